"""The ``retrieval`` execution mode: seed 002's retrieval policy run as graph logic.

- :mod:`.node`: the skill node (model rewrite and answer, or the rules', the citation check).
- :mod:`.policy`: sources in order, one call at a time, until the evidence suffices.
- The rules, pure and model-free: :mod:`.terms` (vocabulary), :mod:`.rewrite` (the question),
  :mod:`.plan` (order, ``top_k``, what results are judged against), :mod:`.evidence` (tool
  results), :mod:`.sufficiency` (section 4's verdicts), :mod:`.answer` (the rules' answer and
  the citation contract). :mod:`skilldeck.nodes.retrieval_rules` gathers them in one import.
"""

from skilldeck.nodes.retrieval.node import RetrievalSkillNode
from skilldeck.nodes.retrieval.policy import PolicyRun, run_policy, source_order

__all__ = ["PolicyRun", "RetrievalSkillNode", "run_policy", "source_order"]
