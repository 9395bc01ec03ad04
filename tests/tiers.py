"""Seed 004's tiers and the heavy markers: a pytest plugin that tests/conftest.py registers.

Each test carries a tier (``L1``, ``L2``, ``L3`` or ``integration``; a test with none stops the
run). Heavy tests (servers, browsers, wheels, notebooks, child processes, long in-process work,
and the applications around the engine: the HTTP service, the CLI, the vector stores) carry a
heavy marker too, by hand or because they use a fixture that starts a server. They run
with everything else under a plain ``pytest``, and under ``-m`` only when the expression names a
heavy marker: ``pytest -m "L1 or L2"``, the tiers a skill author runs after every change, leaves
them out and stays quick.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pytest

__all__ = ["HEAVY", "TIERS", "Tiers"]

#: Seed 004's tiers: each test carries one of these (its module's ``pytestmark``, mostly).
TIERS = ("L1", "L2", "L3", "integration")
#: The markers of heavy tests (pyproject.toml describes each).
HEAVY = ("server", "browser", "wheel", "notebook", "subprocess", "slow", "service", "cli", "stores")


class Tiers:
    """The plugin; see the module docstring.

    Args:
        heavy_fixtures: fixture name -> the heavy marker a test that uses it gets.
    """

    def __init__(self, heavy_fixtures: Mapping[str, str]) -> None:
        unknown = set(heavy_fixtures.values()) - set(HEAVY)
        if unknown:
            raise ValueError(f"heavy_fixtures name markers {unknown} that are not in {HEAVY}")
        self.heavy_fixtures = dict(heavy_fixtures)

    @pytest.hookimpl(tryfirst=True)  # before ``-m`` selects
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        untiered = [i.nodeid for i in items if not any(i.get_closest_marker(t) for t in TIERS)]
        if untiered:
            raise pytest.UsageError(
                f"tests with none of the markers {TIERS} (give the module a pytestmark): {untiered}"
            )
        for item in items:
            for fixture, marker in self.heavy_fixtures.items():
                if fixture in getattr(item, "fixturenames", ()):
                    item.add_marker(marker)
        expression = config.option.markexpr or ""
        if not expression or set(re.findall(r"\w+", expression)) & set(HEAVY):
            return
        heavy = [i for i in items if any(i.get_closest_marker(m) for m in HEAVY)]
        if heavy:
            config.hook.pytest_deselected(items=heavy)
            left = set(heavy)
            items[:] = [i for i in items if i not in left]
