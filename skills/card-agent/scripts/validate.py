"""Business rules of the card agent: the card reported is the record's card, and it was saved.

The schema checks shapes, and that ``fact_id`` is the input's (its ``x-state`` pin); these
rules check the output against the run: ``path`` is where ``card__save`` puts that fact's
card, and the turn has a successful ``card__save`` call that stands (a model that only claims
to have saved is sent back; a save made by a rejected attempt was undone with it).
"""

from __future__ import annotations

from typing import Any

from skilldeck.tools.cards import card_relpath


def validate(output: dict[str, Any], state: dict[str, Any], turn: dict[str, Any]) -> dict[str, Any]:
    card = (output.get("data") or {}).get("timeline_card") or {}
    fact_id = str((state.get("input") or {}).get("fact_id"))
    errors = []
    if card.get("path") != card_relpath(fact_id):
        errors.append(
            f"data.timeline_card.path is {card.get('path')!r}; card__save returned "
            f"{card_relpath(fact_id)!r} for this fact_id"
        )
    if not any(c["name"] == "card__save" for c in turn["tool_calls"]):
        errors.append(
            "no successful card__save call in this attempt: call card__save with the card "
            "(fix what its error says, if it failed), then finish"
        )
    if errors:
        return {"action": "retry", "errors": errors}
    return {"action": "continue"}
