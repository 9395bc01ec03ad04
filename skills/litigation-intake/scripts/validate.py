"""Business rule of litigation intake: both parties must be known before intake completes.

When a party's name is missing, ask the lawyer with a clarify card instead of letting the
intake finish on a guess.
"""

from __future__ import annotations

from typing import Any

_LABELS = {"plaintiff": "plaintiff (原告)", "defendant": "defendant (被告)"}


def validate(output: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    profile = state.get("profile") or {}
    missing = [p for p in ("plaintiff", "defendant") if not (profile.get(p) or {}).get("name")]
    if not missing:
        return {"action": "continue"}
    questions: list[dict[str, Any]] = []
    for party in missing:
        questions.append(
            {
                "question": f"Who is the {_LABELS[party]}? The documents do not name them.",
                "field_key": f"profile.{party}.name",
                "input_type": "text",
                "required": True,
            }
        )
        questions.append(
            {
                "question": f"Is the {party} a person or an organisation?",
                "field_key": f"profile.{party}.type",
                "input_type": "select",
                "required": True,
                "options": [
                    {"label": "Person", "value": "person"},
                    {"label": "Organisation", "value": "organisation"},
                ],
            }
        )
    return {"action": "ask_user", "review_type": "clarify", "questions": questions}
