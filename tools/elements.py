"""``element__extract``: structured elements (parties, dates, amounts) from legal text.

A rule-based extractor for English and Chinese filings. It finds what is stated literally and
nothing more; skills use it as evidence, not as a verdict.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from skilldeck.tools.registry import GRAMMAR, ToolHost, tool_family

__all__ = ["MAX_WRITTEN_TEXT", "element_tools", "extract_elements"]

_PARTY = re.compile(
    r"(?P<role>Plaintiff|Defendant|原告|被告)\s*[:：]\s*(?P<name>[^\n,;，；。]+)", re.IGNORECASE
)
_DATE = re.compile(
    r"\b\d{4}-\d{2}-\d{2}\b"
    r"|\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.? \d{1,2}, \d{4}\b"
    r"|\d{4}年\d{1,2}月\d{1,2}日"
)
_AMOUNT = re.compile(
    r"(?:USD|US\$|\$|RMB|¥|人民币)\s?\d[\d,]*(?:\.\d+)?(?:\s?(?:元|万元))?"
    r"|\d[\d,]*(?:\.\d+)?\s?(?:元|万元|dollars)"
)

_ROLE = {
    "plaintiff": "plaintiff",
    "原告": "plaintiff",
    "defendant": "defendant",
    "被告": "defendant",
}


def extract_elements(text: str) -> dict[str, list[str]]:
    """Parties by role, dates and money amounts, each in order of first appearance."""
    out: dict[str, list[str]] = {"plaintiff": [], "defendant": [], "dates": [], "amounts": []}

    def add(key: str, value: str) -> None:
        value = value.strip()
        if value and value not in out[key]:
            out[key].append(value)

    for match in _PARTY.finditer(text):
        add(_ROLE[match.group("role").lower()], match.group("name"))
    for match in _DATE.finditer(text):
        add("dates", match.group(0))
    for match in _AMOUNT.finditer(text):
        add("amounts", match.group(0))
    return out


class _ExtractArgs(BaseModel):
    text: str = Field(description="The text to extract elements from.", max_length=200_000)


#: The longest text a grammar lets a model write into one call (``metadata["grammar"]``): a
#: model copies a document into ``text``, and a copy that starts repeating itself has to end
#: well inside the reply's output token budget instead of running into it.
MAX_WRITTEN_TEXT = 2_000


def _grammar() -> dict[str, Any]:
    schema = _ExtractArgs.model_json_schema()
    schema["properties"]["text"]["maxLength"] = MAX_WRITTEN_TEXT
    return schema


def element_tools() -> list[BaseTool]:
    return [
        StructuredTool.from_function(
            extract_elements,
            name="element__extract",
            description="Extract parties (plaintiff/defendant), dates and money amounts.",
            args_schema=_ExtractArgs,
            metadata={GRAMMAR: _grammar()},
        )
    ]


@tool_family("element")
def _element_family(host: ToolHost) -> list[BaseTool]:
    return element_tools()
