"""Graders: the registry and the built-in graders (generic, card-agent, pkm-agent, recall).

The registry's API is :mod:`.base`'s, re-exported as its ``__all__`` lists it; importing the
built-in grader modules registers their graders.
"""

from skilldeck.evals.graders import base, card, generic, pkm, recall
from skilldeck.evals.graders.base import *  # noqa: F403

__all__ = ["card", "generic", "pkm", "recall"]
__all__ += base.__all__
