"""Time-to-live values as people write them: seconds (a positive number), a whole number with
a unit (``90s``, ``15m``, ``12h``, ``30d``), or ``never``. The HTTP run body's schema says the
same (:data:`TTL_PATTERN`), so what it lets through is what this reads."""

from __future__ import annotations

import math
import re

from skilldeck.errors import SkillDeckError

__all__ = ["NEVER", "TTL_PATTERN", "parse_ttl"]

#: The time-to-live of a thread that is kept until it is deleted by hand.
NEVER = "never"
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: The strings a time-to-live may be.
TTL_PATTERN = r"^([1-9][0-9]*[smhd]?|never)$"
_DURATION = re.compile(r"([1-9][0-9]*)([smhd]?)")


def parse_ttl(value: object, *, name: str = "ttl") -> float | None:
    """``value`` as seconds (``None``: ``never``, the thread is kept).

    Raises:
        SkillDeckError: ``value`` is not a positive, finite number of seconds, a whole number
            with a unit (s, m, h, d) or ``never``.
    """
    if isinstance(value, str):
        if value == NEVER:
            return None
        found = _DURATION.fullmatch(value)
        seconds = float(found[1]) * _UNITS[found[2]] if found else math.nan
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int past a float's range
            seconds = math.inf
    else:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise SkillDeckError(
            f"{name} must be a positive number of seconds, a whole number with a unit (90s, "
            f"15m, 12h, 30d) or 'never', not {value!r}"
        )
    return seconds
