"""Tables for ``table_rag_retrieve``: reading CSV and XLSX files, and shaping the result.

Every CSV file and every XLSX sheet is a table whose header is its first non-empty row. Each
later non-empty row is indexed as the text ``"header1: v1; header2: v2"`` (empty cells left
out), so a query matches both column names and values. Cells stay strings as written in the
file: XLSX numbers as stored (without number formats), dates in ISO 8601. Row numbers count
the header as row 1, as a spreadsheet shows them. Ranking lives in
:mod:`skilldeck.tools.knowledge`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from pathlib import Path
from typing import Any

from skilldeck.tools.local_files import decode_text

__all__ = ["TABLE_SUFFIXES", "Table", "TableRow", "read_tables", "row_text", "table_result"]

TABLE_SUFFIXES = frozenset({".csv", ".xlsx"})
_SNIFF_CHARS = 64 * 1024


@dataclass(frozen=True, slots=True)
class TableRow:
    """One data row: its number in the file or sheet (header = 1) and its cells."""

    number: int
    cells: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Table:
    """One CSV file or XLSX sheet.

    Attributes:
        ref: ``data/prices.csv`` or ``book.xlsx#Sheet1``, as cited in ``file_ref_table``.
        file: The file, relative to the indexed folder.
        header: Column names; a column without one is called ``column N``.
        rows: The non-empty data rows, padded to the header's width.
    """

    ref: str
    file: str
    header: tuple[str, ...]
    rows: tuple[TableRow, ...]


def row_text(header: Sequence[str], cells: Sequence[str]) -> str:
    """The indexed text of a row: ``"header1: v1; header2: v2"``, empty cells left out."""
    return "; ".join(f"{h}: {c.strip()}" for h, c in zip(header, cells, strict=False) if c.strip())


def _table(ref: str, file: str, numbered: Iterable[tuple[int, list[str]]]) -> Table | None:
    """A table from numbered raw rows; None if it has no header."""
    rows: list[tuple[int, list[str]]] = []
    for number, cells in numbered:
        while cells and not cells[-1].strip():
            cells.pop()  # trailing empty cells are formatting debris, not columns
        if cells:
            rows.append((number, cells))
    if not rows:
        return None
    (_, first), data = rows[0], rows[1:]
    width = max(len(cells) for _, cells in rows)
    header = [name.strip() or f"column {i + 1}" for i, name in enumerate(first)]
    header += [f"column {i + 1}" for i in range(len(header), width)]
    return Table(
        ref=ref,
        file=file,
        header=tuple(header),
        rows=tuple(TableRow(n, tuple(c + [""] * (width - len(c)))) for n, c in data),
    )


def _read_csv(data: bytes, file: str) -> list[Table]:
    text = decode_text(data)
    if text is None:
        raise ValueError(f"{file} is not a text file")
    try:
        dialect: Any = csv.Sniffer().sniff(text[:_SNIFF_CHARS], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel  # too little text to tell: the common comma dialect
    reader = csv.reader(io.StringIO(text, newline=""), dialect)
    table = _table(file, file, ((n, row) for n, row in enumerate(reader, start=1)))
    return [table] if table is not None else []


def _cell(value: object) -> str:
    """An XLSX cell as text, as stored: no number formats are applied."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, datetime):
        return value.date().isoformat() if value.time() == time() else value.isoformat(sep=" ")
    if isinstance(value, date | time):
        return value.isoformat()
    return str(value)


def _read_xlsx(data: bytes, file: str) -> list[Table]:
    from openpyxl import load_workbook  # imported here: only XLSX files need it

    # data_only: a formula cell gives the value Excel last computed, which is what users see.
    book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        tables = []
        for sheet in book.worksheets:
            numbered = (
                (n, [_cell(v) for v in row])
                for n, row in enumerate(sheet.iter_rows(values_only=True), start=1)
            )
            table = _table(f"{file}#{sheet.title}", file, numbered)
            if table is not None:
                tables.append(table)
        return tables
    finally:
        book.close()


def read_tables(data: bytes, file: str) -> list[Table]:
    """The tables of a CSV or XLSX file's bytes; ``file`` is its posix path to cite.

    Raises:
        ValueError: The file is not a CSV or XLSX file, or cannot be read as one.
    """
    suffix = Path(file).suffix.lower()
    if suffix == ".csv":
        return _read_csv(data, file)
    if suffix == ".xlsx":
        try:
            return _read_xlsx(data, file)
        except (OSError, KeyError, ValueError) as exc:  # zipfile and openpyxl's errors
            raise ValueError(f"{file} is not a readable XLSX file: {exc}") from exc
    raise ValueError(f"{file} is not a CSV or XLSX file")


def _instruction(shown: int, omitted: int) -> str:
    if not shown:
        return (
            "[INSTRUCTION] No table rows matched. Treat this result as insufficient and try "
            "rag_retrieve next, then local file search."
        )
    text = (
        f"[INSTRUCTION] {shown + omitted} rows matched (N+M); {shown} are shown (N) and "
        f"{omitted} omitted (M). "
    )
    if omitted:
        text += (
            "The result is truncated: tell the user the total matches (N+M), the displayed "
            "count (N) and the omitted count (M), or search again with a narrower query. "
        )
    return text + (
        "Cite the data sources with the filenames in file_ref_table: place each table's "
        "<CITATION .../> right after the paragraph that uses its rows."
    )


def table_result(
    query: str,
    ranked: Sequence[tuple[str, TableRow]],
    headers: Mapping[str, Sequence[str]],
    max_rows: int,
) -> dict[str, Any]:
    """The ``table_rag_retrieve`` result for ``ranked`` matching rows, best first.

    Args:
        query: The query, echoed back.
        ranked: ``(table ref, row)`` of every matching row, best first.
        headers: The header of each table by ref.
        max_rows: How many rows to show; the others are counted as omitted.

    Returns:
        The rows shown, grouped by table in order of each table's best row. Every table with
        a match is listed, with its own shown/omitted/total counts, so the omitted rows can
        be found with a narrower query.
    """
    groups: dict[str, dict[str, Any]] = {}
    for position, (ref, row) in enumerate(ranked):
        group = groups.get(ref)
        if group is None:
            group = groups[ref] = {
                "file_ref_table": ref,
                "header": list(headers[ref]),
                "rows": [],
                "row_numbers": [],
                "shown": 0,
                "omitted": 0,
                "total": 0,
            }
        group["total"] += 1
        if position < max_rows:
            group["rows"].append(list(row.cells))
            group["row_numbers"].append(row.number)
            group["shown"] += 1
        else:
            group["omitted"] += 1
    for group in groups.values():
        numbers = ",".join(str(n) for n in group["row_numbers"])
        ref = group["file_ref_table"].replace('"', "&quot;")
        group["citation"] = f'<CITATION file="{ref}" rows="{numbers}" />' if numbers else None
    shown = min(len(ranked), max_rows)
    omitted = len(ranked) - shown
    return {
        "query": query,
        "tables": list(groups.values()),
        "shown": shown,
        "omitted": omitted,
        "total": len(ranked),
        "truncated": omitted > 0,
        "instruction": _instruction(shown, omitted),
    }
