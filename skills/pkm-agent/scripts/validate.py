"""Business rules of the PKM agent: the output reports what the turn did to the notes.

The schema checks shapes; these rules check the output against the attempt's successful tool
calls. A "saved" record names only files this attempt appended to or created (a model that
only claims to have saved is sent back, and a write made by a rejected attempt was undone with
it), and a "skipped" one wrote nothing. (That the agent finishes, one record in one turn, is
in its output schema's ``control``.)
"""

from __future__ import annotations

from typing import Any

_WRITES = ("pkm__append", "pkm__create", "pkm__write")


def validate(output: dict[str, Any], state: dict[str, Any], turn: dict[str, Any]) -> dict[str, Any]:
    pkm = (output.get("data") or {}).get("pkm") or {}
    written = {str(c["args"].get("path")) for c in turn["tool_calls"] if c["name"] in _WRITES}
    errors = []
    if pkm.get("action") == "saved":
        unwritten = [f for f in pkm.get("files") or [] if f not in written]
        if unwritten:
            errors.append(
                f"data.pkm.files names {', '.join(map(repr, unwritten))}, but no pkm__append or "
                "pkm__create call in this attempt wrote it: write the entry with pkm__append (or "
                "pkm__create for a new file), then finish"
            )
    elif pkm.get("action") == "skipped" and written:
        errors.append(
            f"the record is skipped but this attempt wrote {', '.join(sorted(written))}: a skip "
            'writes nothing; report what was written as "saved"'
        )
    if errors:
        return {"action": "retry", "errors": errors}
    return {"action": "continue"}
