"""The knowledge base (rag_retrieve, table_rag_retrieve), local file search and their tools.

Real embedded Chroma in tmp_path and real USE embeddings; nothing downloads anything.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chromadb.api import ClientAPI

from skilldeck.errors import ToolError
from skilldeck.services import Lazy
from skilldeck.skills.tokens import estimate_tokens
from skilldeck.tools.knowledge import CHUNK_TOKENS, KnowledgeBase, chunk_document
from skilldeck.tools.knowledge_tools import KNOWLEDGE_ALIASES, knowledge_tools
from skilldeck.tools.local_files import MAX_FILE_BYTES, local_file_search
from skilldeck.tools.registry import ToolRegistry
from skilldeck.tools.vectors import open_chroma

pytestmark = pytest.mark.L2

FIXTURES = Path(__file__).parent / "fixtures" / "knowledge"
INSTRUCTION = (
    "[INSTRUCTION] Place the <CITATION .../> of each chunk you use right after the paragraph "
    "that uses it."
)


def _pdf(pages: list[list[str]]) -> bytes:
    """A minimal PDF with one Helvetica text line per string (ASCII without parentheses)."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", ""]
    kids = []
    for lines in pages:
        text = " ".join(f"({line}) Tj T*" for line in lines)
        content = f"BT /F1 12 Tf 72 720 Td 14 TL {text} ET"
        objects.append(f"<< /Length {len(content)} >>\nstream\n{content}\nendstream")
        objects.append(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Contents {len(objects)} 0 R /Resources << /Font << /F1 FONT >> >> >>"
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    objects = [obj.replace("FONT", f"{len(objects)} 0 R") for obj in objects]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{obj}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{offset:010d} 00000 n \n" for offset in offsets).encode()
    trailer = f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    return out + trailer.encode()


def _xlsx(path: Path) -> None:
    """A workbook with two sheets: Staff and Offices."""
    from openpyxl import Workbook

    book = Workbook()
    staff = book.active
    assert staff is not None
    staff.title = "Staff"
    staff.append(["name", "department", "salary"])
    staff.append(["Alice", "Sales", 5000])
    staff.append(["Bob", "Engineering", 6200.5])
    staff.append([None, None, None])  # an empty row is skipped but keeps the numbering
    staff.append(["Carol", "Sales", 4800])
    offices = book.create_sheet("Offices")
    offices.append(["city", "country", "opened"])
    offices.append(["Berlin", "Germany", 2019])
    offices.append(["Lyon", "France", 2021])
    book.save(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fixture documents plus a generated workbook and PDF."""
    folder = tmp_path_factory.mktemp("corpus")
    shutil.copytree(FIXTURES, folder, dirs_exist_ok=True)
    _xlsx(folder / "data" / "book.xlsx")
    pages = [
        ["Warranty terms", "The warranty lasts two years from delivery."],
        ["Repairs are free during the warranty period."],
    ]
    (folder / "warranty.pdf").write_bytes(_pdf(pages))
    return folder


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> ClientAPI:
    return open_chroma(tmp_path_factory.mktemp("chroma"))


@pytest.fixture(scope="module")
def kb(
    corpus: Path, client: ClientAPI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KnowledgeBase]:
    base = KnowledgeBase(tmp_path_factory.mktemp("kb"), client)
    base.index(corpus)
    yield base
    base.close()


def _fresh(tmp_path: Path) -> KnowledgeBase:
    """A knowledge base with its own Chroma, for tests that write."""
    return KnowledgeBase(tmp_path / "kb", open_chroma(tmp_path / "chroma"))


# -- chunking ----------------------------------------------------------------------------------
def test_chunks_follow_headings_and_lines() -> None:
    text = (FIXTURES / "docs" / "guide.md").read_text("utf-8")
    chunks = chunk_document(text, "docs/guide.md")
    assert [(c.heading, c.start_line, c.end_line) for c in chunks] == [
        ("Guide", 3, 4),
        ("Guide > Install", 8, 11),
        ("Guide > Configure", 15, 23),
    ]
    install = chunks[1]
    assert install.file == "docs/guide.md"
    assert install.text.startswith("Install the package with pip")
    assert "\n\nThen run the demo" in install.text  # paragraphs keep their break
    # A '#' line inside a code fence is code, not a heading; the fence stays in one chunk.
    assert "# this comment is not a heading" in chunks[2].text
    assert chunks[2].text.endswith("```")


def test_heading_path_pops_deeper_levels() -> None:
    text = "# A\n\none\n\n## B\n\ntwo\n\n### C\n\nthree\n\n## D\n\nfour\n"
    headings = [c.heading for c in chunk_document(text, "x.md")]
    assert headings == ["A", "A > B", "A > B > C", "A > D"]
    assert [c.heading for c in chunk_document(text, "x.txt", markdown=False)] == [""]


def test_long_paragraphs_split_at_sentences_and_runs() -> None:
    sentence = "The quick brown fox jumps over the lazy dog near the river bank. "
    text = "Intro line.\n\n" + sentence * 80 + "\nA closing line.\n\n" + "退" * 500
    chunks = chunk_document(text, "long.txt", markdown=False)
    assert all(estimate_tokens(c.text) <= CHUNK_TOKENS for c in chunks)
    assert len(chunks) >= 6
    assert (chunks[0].start_line, chunks[0].text.split("\n")[0]) == (1, "Intro line.")
    # The long line is cut at sentence ends, each piece cited to line 3.
    middle = [c for c in chunks if c.start_line == 3 and c.end_line == 3]
    assert len(middle) >= 3
    assert all(c.text.endswith("bank.") for c in middle)
    assert "".join(c.text for c in chunks).count("fox") == 80
    assert chunks[-1].start_line == chunks[-1].end_line == 6
    assert sum(c.text.count("退") for c in chunks) == 500


def test_chunk_ids_change_with_content() -> None:
    first = chunk_document("# T\n\nalpha\n", "a.md")[0]
    assert chunk_document("# T\n\nalpha\n", "a.md")[0].id == first.id
    assert chunk_document("# T\n\nbeta\n", "a.md")[0].id != first.id
    assert chunk_document("# T\n\nalpha\n", "b.md")[0].id != first.id


# -- indexing ----------------------------------------------------------------------------------
def test_index_counts_and_progress(tmp_path: Path) -> None:
    kb = _fresh(tmp_path)
    calls: list[tuple[int, int]] = []
    counts = kb.index(FIXTURES, progress=lambda done, total: calls.append((done, total)))
    assert counts == {
        "files": 5,
        "chunks": 8,
        "rows": 7,
        "skipped": 0,
        "removed": 0,
        "failed": 0,
    }
    assert calls == [(n, 5) for n in range(1, 6)]
    again = kb.index(FIXTURES)
    assert again == {**counts, "files": 0, "chunks": 0, "rows": 0, "skipped": 5}
    kb.close()


def test_reindex_replaces_changed_and_removes_deleted(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    shutil.copytree(FIXTURES, folder)
    client = open_chroma(tmp_path / "chroma")
    kb = KnowledgeBase(tmp_path / "kb", client)
    kb.index(folder)
    assert kb.rag_retrieve("backups kept thirty days")["chunks"][0]["file_ref"] == (
        "docs/operations.md#L5-L6"
    )

    ops = folder / "docs" / "operations.md"
    ops.write_text(ops.read_text("utf-8").replace("thirty", "ninety"), "utf-8")
    (folder / "notes.txt").unlink()
    prices = folder / "data" / "prices.csv"
    prices.write_text(prices.read_text("utf-8").replace("Gadget", "Gizmo"), "utf-8")
    counts = kb.index(folder)
    assert (counts["files"], counts["skipped"], counts["removed"]) == (2, 2, 1)

    texts = [c["text"] for c in kb.rag_retrieve("backups kept thirty days", 100)["chunks"]]
    assert any("ninety days" in t for t in texts)
    assert not any("thirty" in t for t in texts)
    assert not any("Office hours" in c["text"] for c in kb.rag_retrieve("office hours")["chunks"])
    assert kb.table_rag_retrieve("Gadget")["total"] == 0
    assert kb.table_rag_retrieve("Gizmo")["tables"][0]["row_numbers"] == [4]
    # Chroma holds exactly the live items: no stale vector is left behind.
    live = sum(
        len(chunk_document(p.read_text("utf-8"), "x", markdown=p.suffix == ".md"))
        for p in folder.rglob("*")
        if p.suffix in (".md", ".txt")
    )
    assert client.get_collection("skilldeck_knowledge").count() == live
    assert client.get_collection("skilldeck_table_rows").count() == 7

    shutil.rmtree(folder / "data")
    assert kb.index(folder)["removed"] == 1
    assert kb.table_rag_retrieve("Widget")["total"] == 0
    assert client.get_collection("skilldeck_table_rows").count() == 0
    kb.close()


def test_unreadable_file_is_counted_and_skipped(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "broken.xlsx").write_bytes(b"not a zip file")
    (folder / "ok.md").write_text("# Ok\n\nThe lighthouse keeper logs every ship.\n", "utf-8")
    kb = _fresh(tmp_path)
    counts = kb.index(folder)
    assert (counts["files"], counts["failed"]) == (1, 1)
    assert kb.rag_retrieve("lighthouse keeper")["chunks"][0]["file_ref"] == "ok.md#L3-L3"
    kb.close()


# -- rag_retrieve ------------------------------------------------------------------------------
def test_rag_keyword_query_and_citation(kb: KnowledgeBase) -> None:
    result = kb.rag_retrieve("pip virtual environment", top_k=5)
    assert result["query"] == "pip virtual environment"
    assert result["top_k"] == 5
    assert result["instruction"] == INSTRUCTION
    first = result["chunks"][0]
    assert first["file_ref"] == "docs/guide.md#L8-L11"
    assert first["heading"] == "Guide > Install"
    assert first["citation"] == '<CITATION file="docs/guide.md" lines="8-11" />'
    assert first["text"].startswith("Install the package with pip")
    scores = [c["score"] for c in result["chunks"]]
    assert scores == sorted(scores, reverse=True)
    assert first["score"] > 1 / 61  # first in both rankings: BM25 and dense agree


def test_rag_paraphrase_is_found_by_the_dense_index(kb: KnowledgeBase) -> None:
    # No word of the English query is in the Chinese policy: only the embeddings link them.
    result = kb.rag_retrieve("can I return an item I bought", top_k=3)
    assert result["chunks"][0]["file_ref"] == "policies/after-sales.md#L5-L6"


@pytest.mark.parametrize("query", ["退货政策", "七天无理由退货"])
def test_rag_chinese(kb: KnowledgeBase, query: str) -> None:
    first = kb.rag_retrieve(query, top_k=3)["chunks"][0]
    assert first["file_ref"] == "policies/after-sales.md#L5-L6"
    assert first["heading"] == "售后服务 > 退货政策"
    assert "七天无理由退货" in first["text"]


def test_rag_pdf_pages(kb: KnowledgeBase) -> None:
    first = kb.rag_retrieve("how long does the warranty last", top_k=3)["chunks"][0]
    assert first["file_ref"] == "warranty.pdf#L1-L2"
    assert first["heading"] == "Page 1"
    repairs = kb.rag_retrieve("free repairs", top_k=3)["chunks"][0]
    assert (repairs["file_ref"], repairs["heading"]) == ("warranty.pdf#L3-L3", "Page 2")


def test_rag_no_hits_and_empty_base(kb: KnowledgeBase, tmp_path: Path) -> None:
    assert kb.rag_retrieve("quantum chromodynamics lattice")["chunks"] == []
    empty = _fresh(tmp_path)
    result = empty.rag_retrieve("anything at all")
    assert result["chunks"] == []
    assert result["instruction"] == INSTRUCTION
    assert empty.table_rag_retrieve("anything")["total"] == 0
    empty.close()


@pytest.mark.parametrize("top_k", [0, 101, -5])
def test_rag_top_k_bounds(kb: KnowledgeBase, top_k: int) -> None:
    with pytest.raises(ToolError, match="top_k must be from 1 to 100"):
        kb.rag_retrieve("backups", top_k=top_k)


def test_rag_top_k_limits_results(kb: KnowledgeBase) -> None:
    assert len(kb.rag_retrieve("the", top_k=1)["chunks"]) <= 1
    assert len(kb.rag_retrieve("service backups install office", top_k=2)["chunks"]) == 2


# -- table_rag_retrieve ------------------------------------------------------------------------
def test_table_csv_rows(kb: KnowledgeBase) -> None:
    result = kb.table_rag_retrieve("Gadget")
    assert (result["total"], result["shown"], result["omitted"]) == (1, 1, 0)
    assert result["truncated"] is False
    [table] = result["tables"]
    assert table["file_ref_table"] == "data/prices.csv"
    assert table["header"] == ["product", "category", "price", "stock"]
    assert table["rows"] == [["Gadget", "electronics", "5", "3"]]
    assert table["row_numbers"] == [4]
    assert table["citation"] == '<CITATION file="data/prices.csv" rows="4" />'
    assert "data/prices.csv" not in result["instruction"]  # the instruction is generic
    assert "file_ref_table" in result["instruction"]
    # Cells stay as written: "9.50" is not turned into 9.5.
    mini = kb.table_rag_retrieve("Widget Mini")["tables"][0]
    assert mini["rows"][0] == ["Widget Mini", "tools", "9.50", "40"]


def test_table_truncation_counts(kb: KnowledgeBase) -> None:
    result = kb.table_rag_retrieve("widget price", max_rows=3)
    # Four widget rows match on their values; "price" alone (a column name) does not count.
    assert (result["total"], result["shown"], result["omitted"]) == (4, 3, 1)
    assert result["truncated"] is True
    [table] = result["tables"]
    assert (table["shown"], table["omitted"], table["total"]) == (3, 1, 4)
    assert len(table["rows"]) == len(table["row_numbers"]) == 3
    assert set(table["row_numbers"]) < {2, 3, 5, 7}
    assert all(row[0].startswith("Widget") for row in table["rows"])
    text = result["instruction"]
    assert text.startswith("[INSTRUCTION]")
    assert "4 rows matched (N+M); 3 are shown (N) and 1 omitted (M)" in text
    assert "truncated" in text


def test_table_column_name_lists_the_table(kb: KnowledgeBase) -> None:
    result = kb.table_rag_retrieve("stock", max_rows=200)
    assert result["total"] == 7
    assert sorted(result["tables"][0]["row_numbers"]) == [2, 3, 4, 5, 6, 7, 8]


def test_table_xlsx_sheets(kb: KnowledgeBase) -> None:
    offices = kb.table_rag_retrieve("Berlin")
    [table] = offices["tables"]
    assert table["file_ref_table"] == "data/book.xlsx#Offices"
    assert table["header"] == ["city", "country", "opened"]
    assert table["rows"] == [["Berlin", "Germany", "2019"]]
    sales = kb.table_rag_retrieve("Sales department", max_rows=1)
    assert (sales["total"], sales["shown"], sales["omitted"]) == (2, 1, 1)
    [staff] = sales["tables"]
    assert staff["file_ref_table"] == "data/book.xlsx#Staff"
    assert staff["rows"][0][1] == "Sales"
    assert staff["row_numbers"][0] in (2, 6)  # the empty row 5 keeps Carol on row 6
    bob = kb.table_rag_retrieve("Bob")["tables"][0]
    assert bob["rows"] == [["Bob", "Engineering", "6200.5"]]


def test_table_groups_rows_by_table(kb: KnowledgeBase) -> None:
    result = kb.table_rag_retrieve("Berlin Gadget", max_rows=1)
    assert (result["total"], result["shown"], result["omitted"]) == (2, 1, 1)
    tables = {t["file_ref_table"]: t for t in result["tables"]}
    assert set(tables) == {"data/prices.csv", "data/book.xlsx#Offices"}
    shown, hidden = result["tables"]  # the table of the best row comes first
    assert (shown["shown"], shown["omitted"], len(shown["rows"])) == (1, 0, 1)
    assert (hidden["shown"], hidden["omitted"], hidden["rows"]) == (0, 1, [])
    assert hidden["citation"] is None


def test_table_no_match(kb: KnowledgeBase) -> None:
    result = kb.table_rag_retrieve("banana bread recipe")
    assert result["tables"] == []
    assert (result["total"], result["shown"], result["omitted"]) == (0, 0, 0)
    assert result["truncated"] is False
    assert "No table rows matched" in result["instruction"]


@pytest.mark.parametrize("max_rows", [0, 201])
def test_table_max_rows_bounds(kb: KnowledgeBase, max_rows: int) -> None:
    with pytest.raises(ToolError, match="max_rows"):
        kb.table_rag_retrieve("Widget", max_rows=max_rows)


# -- local_file_search -------------------------------------------------------------------------
@pytest.fixture
def files_root(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    shutil.copytree(FIXTURES, root)
    (root / "docs" / "desk.md").write_text(
        "The desk is at the front of the hall.\nAsk at the front desk for keys.\n", "utf-8"
    )
    return root


def test_local_search_finds_lines(files_root: Path) -> None:
    result = local_file_search(files_root, "office hours")
    assert result["root"] == "."
    first = result["matches"][0]
    assert first == {
        "path": "notes.txt",
        "line": 1,
        "text": "Office hours are Monday to Friday, nine to five.",
        "score": 2,
    }
    assert result["total"] == len(result["matches"])
    assert result["truncated"] is False
    chinese = local_file_search(files_root, "七天无理由退货")["matches"][0]
    assert (chinese["path"], chinese["line"]) == ("policies/after-sales.md", 5)


def test_local_search_phrase_is_contiguous(files_root: Path) -> None:
    loose = local_file_search(files_root, "front desk", subdir="docs")
    assert [m["line"] for m in loose["matches"] if m["path"] == "docs/desk.md"] == [1, 2]
    assert loose["root"] == "docs"
    phrase = local_file_search(files_root, '"front desk"', subdir="docs")
    assert [(m["path"], m["line"]) for m in phrase["matches"]] == [("docs/desk.md", 2)]


def test_local_search_truncates(files_root: Path) -> None:
    with pytest.raises(ToolError, match="no searchable words"):
        local_file_search(files_root, "the and of")  # stop words only
    result = local_file_search(files_root, "Widget", max_results=2)
    assert (len(result["matches"]), result["total"], result["truncated"]) == (2, 4, True)


@pytest.mark.parametrize("subdir", ["..", "../files", "docs/../..", "/etc"])
def test_local_search_refuses_escapes(files_root: Path, subdir: str) -> None:
    with pytest.raises(ToolError, match="root"):
        local_file_search(files_root, "office", subdir=subdir)


def test_local_search_skips_outside_symlinks_and_binaries(files_root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("zebra password\n", "utf-8")
    (files_root / "link.txt").symlink_to(outside / "secret.txt")
    (files_root / "linked").symlink_to(outside, target_is_directory=True)
    (files_root / "blob.txt").write_bytes(b"zebra\0\x01\x02 binary")
    (files_root / "big.txt").write_text("zebra\n" + "x" * MAX_FILE_BYTES, "utf-8")
    (files_root / "zebra.txt").write_text("a zebra crossing\n", "utf-8")
    result = local_file_search(files_root, "zebra")
    assert [m["path"] for m in result["matches"]] == ["zebra.txt"]
    with pytest.raises(ToolError, match="root"):
        local_file_search(files_root, "zebra", subdir="linked")


# -- the tools through a registry --------------------------------------------------------------
def _registry(kb: KnowledgeBase, files_root: Path, opened: list[int]) -> ToolRegistry:
    """The knowledge tools, with ``files_root`` as the matter ``MATTER``'s folder."""

    def factory() -> KnowledgeBase:
        opened.append(1)
        return kb

    registry = ToolRegistry()
    for tool in knowledge_tools(Lazy(factory), files_root.parent):
        registry.register(tool, aliases=[KNOWLEDGE_ALIASES[tool.name]])
    return registry


MATTER = {"matter_id": "files"}  # the files_root fixture is the folder tmp_path/files


def test_tools_through_registry(kb: KnowledgeBase, files_root: Path) -> None:
    opened: list[int] = []
    registry = _registry(kb, files_root, opened)
    assert registry.names() == [
        "file__local_search",
        "knowledge__rag_retrieve",
        "knowledge__table_rag_retrieve",
    ]
    assert opened == []  # lazy: nothing opened until a knowledge tool runs
    result = registry.invoke("rag_retrieve", {"query": "退货政策", "top_k": 3}, {})
    assert result.ok
    body: dict[str, Any] = json.loads(result.content)
    assert body["chunks"][0]["citation"] == (
        '<CITATION file="policies/after-sales.md" lines="5-6" />'
    )
    table = registry.invoke("table_rag_retrieve", {"query": "Gadget"}, {})
    assert json.loads(table.content)["tables"][0]["file_ref_table"] == "data/prices.csv"
    local = registry.invoke("local_file_search", {"query": "office hours"}, MATTER)
    assert json.loads(local.content)["matches"][0]["path"] == "notes.txt"
    assert opened == [1]


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("rag_retrieve", {"query": "x", "top_k": 0}, "top_k"),
        ("rag_retrieve", {"query": "x", "top_k": 101}, "top_k"),
        ("rag_retrieve", {"query": ""}, "query"),
        ("rag_retrieve", {"query": "x", "k": 3}, "k"),
        ("knowledge__table_rag_retrieve", {"query": "x", "max_rows": 500}, "max_rows"),
        ("local_file_search", {"query": "x", "root": "../.."}, "must not contain '..'"),
        ("local_file_search", {"query": "x", "root": "/etc"}, "relative folder"),
        ("local_file_search", {"query": "x", "max_results": 0}, "max_results"),
        ("local_file_search", {"query": "x", "matter_id": "m1"}, "bound by the runtime"),
    ],
)
def test_tool_errors_name_the_argument(
    kb: KnowledgeBase, files_root: Path, name: str, args: dict[str, Any], message: str
) -> None:
    result = _registry(kb, files_root, []).invoke(name, args, MATTER)
    assert not result.ok
    assert result.content.startswith("Error: ")
    assert message in result.content


def test_local_search_is_jailed_to_the_matter(kb: KnowledgeBase, files_root: Path) -> None:
    registry = _registry(kb, files_root / "docs", [])  # files_root is the matters' root
    inside = registry.invoke("file__local_search", {"query": "backups"}, {"matter_id": "docs"})
    matches = json.loads(inside.content)["matches"]
    assert matches and all(m["path"] == "operations.md" for m in matches)
    escape = registry.invoke("file__local_search", {"query": "x"}, {"matter_id": "../.."})
    assert not escape.ok
    missing = registry.invoke("file__local_search", {"query": "x"}, {"matter_id": "none"})
    assert missing.content == "Error: there are no local files for this matter"
