"""What every node needs to know about the deck, built once by the graph builder."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from langchain_core.language_models import BaseChatModel

from skilldeck.nodes.route_lexical import LexicalRanker
from skilldeck.nodes.route_model import ModelRouter
from skilldeck.settings import Settings
from skilldeck.skills.bundle import SkillBundle
from skilldeck.tools.registry import ToolRegistry

__all__ = ["CARD_NODE", "ROUTER_NODE", "START_NODE", "TOOLS_NODE", "NodeContext"]

ROUTER_NODE = "router"
START_NODE = "start"
TOOLS_NODE = "tools"
CARD_NODE = "card"


@dataclass(frozen=True)
class NodeContext:
    """The loaded skills, tools, host settings and model lookup shared by the nodes."""

    bundles: Mapping[str, SkillBundle]
    registry: ToolRegistry
    settings: Settings
    model_for: Callable[[str], BaseChatModel]
    model_label: Callable[[str], str]
    has_model: Callable[[str], bool]
    #: The output mode of a skill's model calls (``auto`` resolved: see ``skilldeck.models``).
    output_mode: Callable[[str], str]
    #: Routing by description with a model (``None``: the lexical ranker only).
    route_model: ModelRouter | None = None
    #: The deck's embedding function, for matching a skill's examples by meaning (``None``:
    #: by words), and its name.
    embed: Callable[[list[str]], Sequence[Any]] | None = None
    embed_name: str = ""
    #: The skills whose tools work in the run's matter: the router never picks one for a run
    #: without a matter (a context that names one is refused before it starts).
    matter_skills: frozenset[str] = frozenset()

    @cached_property
    def ranker(self) -> LexicalRanker:
        """Routing by description without a model (IDF over the whole deck)."""
        return LexicalRanker(tuple(self.ranked), self.settings.route_threshold)

    @cached_property
    def ranked(self) -> tuple[SkillBundle, ...]:
        """The skills best first, as the router prefers them: priority, then load order."""
        return tuple(sorted(self.bundles.values(), key=lambda b: b.rank))

    @cached_property
    def data_keys(self) -> tuple[str, ...]:
        """Every data field of every skill, in load order, without repeats."""
        keys: dict[str, None] = {}
        for bundle in sorted(self.bundles.values(), key=lambda b: b.order):
            keys.update(dict.fromkeys(bundle.data_keys))
        return tuple(keys)
