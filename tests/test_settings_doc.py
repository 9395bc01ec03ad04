"""docs/settings.md lists every setting as the code defines it (default and meaning)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skilldeck import Settings
from skilldeck.settings import settings_reference

pytestmark = pytest.mark.L2

DOC = Path(__file__).resolve().parents[1] / "docs" / "settings.md"


def test_the_settings_reference_is_current() -> None:
    text = DOC.read_text("utf-8")
    assert text.endswith(settings_reference()), (
        "docs/settings.md is out of date: replace its table with "
        "skilldeck.settings.settings_reference()"
    )


def test_every_setting_says_what_it_does() -> None:
    missing = [name for name, field in Settings.model_fields.items() if not field.description]
    assert missing == []
