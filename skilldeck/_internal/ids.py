"""Identifiers a caller chooses: one pattern and one length for all of them.

Thread ids, matter ids, AG-UI run, message and tool call ids, interrupt ids: a client names them,
and skilldeck stores them, repeats them in events and makes folders of some (a matter is a
folder). So each is a name and never a path, and short: an id is repeated in every event of a
run, and a long one would make each event long. The HTTP bodies (pydantic, :data:`Identifier`)
and the deck (:func:`check_id`) check them with this one rule.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

from skilldeck.errors import SkillDeckError

__all__ = ["ID_MAX_LENGTH", "ID_PATTERN", "Identifier", "check_id", "id_problem"]

#: The longest id: a UUID with a prefix fits, a document pasted in its place does not.
ID_MAX_LENGTH = 128
#: Letters, digits and ``. _ : -``, starting with a letter or digit (so never ``.``, ``..``,
#: a hidden file or an option).
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
_ID = re.compile(ID_PATTERN)
_RULE = f"1 to {ID_MAX_LENGTH} letters, digits and . _ : -, starting with a letter or digit"

#: An id in a request body: the same rule, as pydantic checks it (a 422 before anything runs).
Identifier = Annotated[
    str,
    Field(
        min_length=1,
        max_length=ID_MAX_LENGTH,
        pattern=ID_PATTERN,
        description=f"An id: {_RULE}.",
    ),
]


def id_problem(value: object) -> str | None:
    """Why ``value`` is not an id (``None``: it is one)."""
    if not isinstance(value, str):
        return f"must be a string, not {type(value).__name__}"
    if len(value) > ID_MAX_LENGTH:
        return f"is {len(value):,} characters long; an id is {_RULE}"
    if not _ID.fullmatch(value):
        return f"must be {_RULE}"
    return None


def check_id(kind: str, value: object) -> str:
    """``value``, if it is an id.

    Raises:
        SkillDeckError: it is not; the message names ``kind`` (``thread_id``, ``matter_id``)
            and the rule, and quotes the value only when it is short.
    """
    problem = id_problem(value)
    if problem is not None:
        shown = f" {value!r}" if isinstance(value, str) and len(value) <= ID_MAX_LENGTH else ""
        raise SkillDeckError(f"{kind}{shown} {problem}")
    assert isinstance(value, str)
    return value
