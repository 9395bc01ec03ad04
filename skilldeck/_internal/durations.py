"""Time-to-live values as people write them: seconds, or a number with a unit (``90s``,
``15m``, ``12h``, ``30d``), or ``never``."""

from __future__ import annotations

import math
import re

from skilldeck.errors import SkillDeckError

__all__ = ["NEVER", "parse_ttl"]

#: The time-to-live of a thread that is kept until it is deleted by hand.
NEVER = "never"
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")


def parse_ttl(value: object, *, name: str = "ttl") -> float | None:
    """``value`` as seconds (``None``: ``never``, the thread is kept).

    Raises:
        SkillDeckError: ``value`` is not a positive, finite number of seconds, a number with
            a unit (s, m, h, d) or ``never``.
    """
    if isinstance(value, str):
        text = value.strip().lower()
        if text == NEVER:
            return None
        found = _DURATION.fullmatch(text)
        seconds = float(found[1]) * _UNITS[found[2]] if found else math.nan
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise SkillDeckError(
            f"{name} must be a positive number of seconds, a number with a unit (90s, 15m, "
            f"12h, 30d) or 'never', not {value!r}"
        )
    return seconds
