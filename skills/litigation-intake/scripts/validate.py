"""Business rules of litigation intake: the output rests on the documents, and both parties
are known before intake completes.

An output of a turn that did not read every document in ``input.documents`` with
``file__parse`` is sent back (a model that skips the documents invents the matter). When a
party's name is missing, the lawyer is asked with a clarify card instead of letting the intake
finish on a guess.
"""

from __future__ import annotations

from typing import Any

_LABELS = {"plaintiff": "plaintiff (原告)", "defendant": "defendant (被告)"}


def validate(output: dict[str, Any], state: dict[str, Any], turn: dict[str, Any]) -> dict[str, Any]:
    documents = (state.get("input") or {}).get("documents") or []
    read = {c["args"].get("file_id") for c in turn["tool_calls"] if c["name"] == "file__parse"}
    unread = [str(d) for d in documents if d not in read]
    if unread:
        calls = ", ".join(f'file__parse {{"file_id": "{d}"}}' for d in unread)
        return {
            "action": "retry",
            "errors": [f"the documents were not read in this turn: call {calls} first"],
        }
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
