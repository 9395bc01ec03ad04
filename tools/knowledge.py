"""The knowledge base of seed 002: ``rag_retrieve`` (documents), ``table_rag_retrieve`` (rows).

:meth:`KnowledgeBase.index` mirrors a folder: Markdown, text and PDF files are cut into chunks
(:func:`chunk_document`), CSV and XLSX files into table rows (:mod:`skilldeck.tools.tables`).
Chunks, rows and each file's sha256 live in one SQLite file, the source of truth; their vectors
live in two Chroma collections (cosine), ``skilldeck_knowledge`` and ``skilldeck_table_rows``.
Re-indexing is incremental: unchanged files are skipped, and ids derive from content, so a
changed file re-embeds only its new chunks.

Retrieval is hybrid. BM25 (stemmed, without stop words, over heading + text) and the dense
index each rank their top ``N`` items, and the two rankings are fused by reciprocal rank
fusion: ``score(item) = sum over rankings of 1 / (60 + rank)``, ranks counted from 1, so an item
near the top of both rankings beats one at the top of only one. ``N`` is ``max(top_k, 50)`` for
chunks; rows take every BM25 match and the 1,000 nearest rows, so that a table result counts
every match it omits. Dense hits count only above a
cosine similarity floor (0.25 for chunks, 0.35 for rows, whose short "header: value" texts all
look alike), so a query that matches nothing returns nothing. The in-memory BM25 indexes are
rebuilt from SQLite, from stored tokens, whenever the base has changed since they were built.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from skilldeck.errors import ToolError
from skilldeck.tools.bm25 import BM25Index
from skilldeck.tools.chunking import (
    CHUNK_TOKENS,
    DOCUMENT_SUFFIXES,
    Chunk,
    chunk_document,
    chunk_id,
    document_chunks,
)
from skilldeck.tools.fusion import rrf
from skilldeck.tools.index_cache import IndexCache, shared_cache
from skilldeck.tools.local_files import walk_files
from skilldeck.tools.tables import TABLE_SUFFIXES, Table, TableRow, read_tables, row_text
from skilldeck.tools.tables import table_result as _table_result
from skilldeck.tools.text import Tokenizer, parse_query

if TYPE_CHECKING:  # chromadb is the vectors extra
    from chromadb.api import ClientAPI
    from chromadb.api.types import Documents, EmbeddingFunction

__all__ = ["CHUNK_TOKENS", "Chunk", "KnowledgeBase", "chunk_document"]

log = logging.getLogger(__name__)

CHUNK_MIN_SIMILARITY = 0.25
ROW_MIN_SIMILARITY = 0.35
ROW_DENSE_DEPTH = 1000  # dense row matches are looked for among this many nearest rows
CHUNKS_COLLECTION = "skilldeck_knowledge"
ROWS_COLLECTION = "skilldeck_table_rows"
CITE_INSTRUCTION = (
    "[INSTRUCTION] Place the <CITATION .../> of each chunk you use right after the paragraph "
    "that uses it."
)
_BATCH = 256  # texts per embedding call and per Chroma write


# -- storage -----------------------------------------------------------------------------------
_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, sha256 TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    file TEXT NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    heading TEXT NOT NULL,
    text TEXT NOT NULL,
    tokens TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_file ON chunks (file);
CREATE TABLE IF NOT EXISTS tables (
    ref TEXT PRIMARY KEY,
    file TEXT NOT NULL,
    header TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS tables_file ON tables (file);
CREATE TABLE IF NOT EXISTS table_rows (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    file TEXT NOT NULL,
    table_ref TEXT NOT NULL,
    number INTEGER NOT NULL,
    cells TEXT NOT NULL,
    text TEXT NOT NULL,
    tokens TEXT NOT NULL,
    value_tokens TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS table_rows_file ON table_rows (file);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_SQL_BATCH = 500  # ids per "IN (...)" query, well under SQLite's parameter limit


def _batches(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    return (items[i : i + size] for i in range(0, len(items), size))


class _Lexicon:
    """A BM25 index over one SQLite table's stored tokens, for one generation of the base."""

    def __init__(self, generation: str, rows: Iterable[tuple[str, str]]) -> None:
        self.generation = generation
        self.index = BM25Index()
        self.ids: list[str] = []
        self._id_bytes = 0
        for item_id, tokens in rows:
            self.index.add(tokens.split(" ") if tokens else [])
            self.ids.append(item_id)
            self._id_bytes += len(item_id) + 58  # the str object and its list slot

    @property
    def nbytes(self) -> int:
        """Estimated memory: the BM25 index and the item ids."""
        return self.index.nbytes + self._id_bytes

    def top(self, terms: Sequence[str], depth: int) -> list[str]:
        """Ids of the best ``depth`` items with a positive BM25 score, best first."""
        if not terms or not self.ids:
            return []
        return [self.ids[doc] for doc, _ in self.index.top(terms, depth)]


class _Vectors:
    """One Chroma collection of item vectors (cosine); the items' texts stay in SQLite."""

    def __init__(self, client: ClientAPI, name: str, ef: EmbeddingFunction[Documents]) -> None:
        self._ef = ef
        self._collection = client.get_or_create_collection(
            name,
            configuration={"hnsw": {"space": "cosine"}},
            embedding_function=cast(Any, ef),  # Chroma types it over all embeddable inputs
        )

    def upsert(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        for start in range(0, len(ids), _BATCH):
            batch = list(texts[start : start + _BATCH])
            vectors = np.asarray(self._ef(batch), dtype=np.float32)
            self._collection.upsert(ids=list(ids[start : start + _BATCH]), embeddings=vectors)

    def delete(self, ids: Sequence[str]) -> None:
        for batch in _batches(ids, _BATCH):
            self._collection.delete(ids=list(batch))

    def nearest(self, text: str, depth: int, min_similarity: float) -> list[str]:
        """Ids of the ``depth`` nearest items at or above ``min_similarity``, nearest first."""
        count = self._collection.count()
        if count == 0:
            return []
        vector = np.asarray(self._ef([text]), dtype=np.float32)
        result = self._collection.query(
            query_embeddings=vector, n_results=min(depth, count), include=["distances"]
        )
        distances = (result["distances"] or [[]])[0]
        # Chroma's cosine distance is 1 - cosine similarity.
        return [
            item_id
            for item_id, distance in zip(result["ids"][0], distances, strict=True)
            if 1.0 - distance >= min_similarity
        ]


def _attr(value: str) -> str:
    """``value`` inside a double-quoted CITATION attribute."""
    return value.replace('"', "&quot;")


class KnowledgeBase:
    """Documents and tables of one folder, searchable by ``rag_retrieve``/``table_rag_retrieve``.

    Args:
        path: Folder of the base's SQLite file (``knowledge.sqlite``), created if missing.
        client: Chroma client holding the collections ``skilldeck_knowledge`` and
            ``skilldeck_table_rows``, e.g. from :func:`~skilldeck.tools.vectors.open_chroma`.
        embedding_function: Chroma embedding function; default the offline multilingual USE
            model. Chroma refuses to reopen a collection with a function of another name.
        tokenizer: BM25 tokenizer; default English stems without stop words, CJK bigrams.
        cache: Where the BM25 indexes are kept (default: the process's shared
            :class:`~skilldeck.tools.index_cache.IndexCache`).

    The collection names are fixed, so a Chroma database holds one knowledge base. Queries may
    run from many threads; :meth:`index` runs one call at a time.
    """

    def __init__(
        self,
        path: str | Path,
        client: ClientAPI,
        *,
        embedding_function: EmbeddingFunction[Documents] | None = None,
        tokenizer: Tokenizer | None = None,
        cache: IndexCache | None = None,
    ) -> None:
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        self._tokenizer = tokenizer or Tokenizer(stem=True, stopwords=True)
        if embedding_function is None:
            from skilldeck.tools.embeddings import default_embedding_function

            embedding_function = default_embedding_function()
        ef = embedding_function
        self._chunk_vectors = _Vectors(client, CHUNKS_COLLECTION, ef)
        self._row_vectors = _Vectors(client, ROWS_COLLECTION, ef)
        self._conn = sqlite3.connect(
            str(folder / "knowledge.sqlite"), check_same_thread=False, isolation_level=None
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(_SCHEMA)
        self._lock = threading.RLock()
        self._index_lock = threading.Lock()  # two index() calls would race on the same files
        # BM25 indexes live in the process's index cache (bounded, LRU): rebuilt when evicted.
        self._cache = cache or shared_cache()
        self._space = f"knowledge:{uuid.uuid4().hex}"
        self._retokenize_if_needed()

    def close(self) -> None:
        """Close the SQLite connection."""
        self._conn.close()

    # -- indexing ------------------------------------------------------------------------------
    def index(
        self, folder: str | Path, *, progress: Callable[[int, int], None] | None = None
    ) -> dict[str, int]:
        """Mirror ``folder`` into the base, incrementally.

        Files whose sha256 is unchanged are skipped; a changed file's chunks and rows are
        replaced; files no longer in ``folder`` are removed. A file that cannot be read is
        logged, counted as failed and left out (its old content too), and retried next time.

        Args:
            folder: The folder of ``.md .markdown .txt .pdf .csv .xlsx`` files (hidden files,
                and symlinks that lead out of it, are skipped).
            progress: Called as ``progress(done_files, total_files)`` after each file.

        Returns:
            Counts: ``files`` (re)indexed, ``chunks`` and ``rows`` written, ``skipped``
            (unchanged), ``removed`` (deleted files) and ``failed``.
        """
        root = Path(folder).resolve()
        if not root.is_dir():
            raise ValueError(f"{folder} is not a folder")
        with self._index_lock:
            paths = list(walk_files(root, DOCUMENT_SUFFIXES | TABLE_SUFFIXES))
            with self._lock:
                known = dict(self._conn.execute("SELECT path, sha256 FROM files").fetchall())
            counts = dict.fromkeys(("files", "chunks", "rows", "skipped", "removed", "failed"), 0)
            seen: set[str] = set()
            for done, path in enumerate(paths, start=1):
                file = path.relative_to(root).as_posix()
                seen.add(file)
                self._index_file(path, file, known.get(file), counts)
                if progress is not None:
                    progress(done, len(paths))
            for file in sorted(known.keys() - seen):
                self._replace(file, None, [], [])
                counts["removed"] += 1
            return counts

    def _index_file(self, path: Path, file: str, known: str | None, counts: dict[str, int]) -> None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            log.warning("cannot read %s: %s", file, exc)
            counts["failed"] += 1
            self._replace(file, None, [], [])
            return
        digest = hashlib.sha256(data).hexdigest()
        if digest == known:
            counts["skipped"] += 1
            return
        chunks: list[Chunk] = []
        tables: list[Table] = []
        try:
            if path.suffix.lower() in TABLE_SUFFIXES:
                tables = read_tables(data, file)
            else:
                chunks = document_chunks(data, file)
        except Exception as exc:
            # Parsers raise many kinds of errors on broken files; one bad file must not stop
            # the rest of the folder from being indexed.
            log.warning("cannot index %s: %s: %s", file, type(exc).__name__, exc)
            counts["failed"] += 1
            self._replace(file, None, [], [])
            return
        self._replace(file, digest, chunks, tables)
        counts["files"] += 1
        counts["chunks"] += len(chunks)
        counts["rows"] += sum(len(table.rows) for table in tables)

    def _replace(
        self, file: str, digest: str | None, chunks: Sequence[Chunk], tables: Sequence[Table]
    ) -> None:
        """Make ``file``'s chunks and rows exactly these; ``digest`` None forgets the file.

        New vectors are written before SQLite commits and old ones deleted after, so a crash
        in between leaves extra vectors, which queries ignore (SQLite is the source of truth),
        and never chunks without vectors.
        """
        chunk_records = [
            (c.id, file, c.start_line, c.end_line, c.heading, c.text, self._tokens(_embedded(c)))
            for c in chunks
        ]
        row_records = []
        for table in tables:
            for row in table.rows:
                text = row_text(table.header, row.cells)
                cells = json.dumps(row.cells, ensure_ascii=False)
                row_id = chunk_id(table.ref, row.number, text)
                values = self._tokens("\n".join(row.cells))
                row_records.append(
                    (row_id, file, table.ref, row.number, cells, text, self._tokens(text), values)
                )
        with self._lock:
            old_chunks = self._ids("chunks", file)
            old_rows = self._ids("table_rows", file)
        fresh = [c for c in chunks if c.id not in old_chunks]
        self._chunk_vectors.upsert([c.id for c in fresh], [_embedded(c) for c in fresh])
        fresh_rows = [r for r in row_records if r[0] not in old_rows]
        self._row_vectors.upsert([r[0] for r in fresh_rows], [r[5] for r in fresh_rows])
        with self._lock, self._transaction():
            for sql in (
                "DELETE FROM chunks WHERE file = ?",
                "DELETE FROM tables WHERE file = ?",
                "DELETE FROM table_rows WHERE file = ?",
                "DELETE FROM files WHERE path = ?",
            ):
                self._conn.execute(sql, (file,))
            self._conn.executemany(
                "INSERT INTO chunks (id, file, start_line, end_line, heading, text, tokens) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                chunk_records,
            )
            self._conn.executemany(
                "INSERT INTO tables (ref, file, header) VALUES (?, ?, ?)",
                [(t.ref, file, json.dumps(t.header, ensure_ascii=False)) for t in tables],
            )
            self._conn.executemany(
                "INSERT INTO table_rows "
                "(id, file, table_ref, number, cells, text, tokens, value_tokens) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                row_records,
            )
            if digest is not None:
                self._conn.execute("INSERT INTO files (path, sha256) VALUES (?, ?)", (file, digest))
            self._bump_generation()
        self._chunk_vectors.delete(sorted(old_chunks - {c.id for c in chunks}))
        self._row_vectors.delete(sorted(old_rows - {r[0] for r in row_records}))

    def _tokens(self, text: str) -> str:
        """BM25 tokens as stored: joined by spaces, which no token contains."""
        return " ".join(self._tokenizer.tokens(text))

    def _ids(self, table: str, file: str) -> set[str]:
        query = f"SELECT id FROM {table} WHERE file = ?"  # table is one of two literals
        return {row[0] for row in self._conn.execute(query, (file,))}

    def _transaction(self) -> sqlite3.Connection:
        # With isolation_level=None the connection autocommits; "with conn" after an explicit
        # BEGIN commits on success and rolls back on an exception.
        self._conn.execute("BEGIN IMMEDIATE")
        return self._conn

    def _bump_generation(self) -> None:
        self._conn.execute(
            "INSERT INTO meta (key, value) VALUES ('generation', '1') ON CONFLICT (key) "
            "DO UPDATE SET value = CAST(value AS INTEGER) + 1"
        )

    def _meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _retokenize_if_needed(self) -> None:
        """Re-tokenize stored texts if they were tokenized with another tokenizer."""
        signature = repr(self._tokenizer)
        with self._lock, self._transaction():
            if self._meta("tokenizer") not in (None, signature):
                chunks = self._conn.execute("SELECT id, heading, text FROM chunks").fetchall()
                self._conn.executemany(
                    "UPDATE chunks SET tokens = ? WHERE id = ?",
                    [(self._tokens(_embedded_text(h, t)), i) for i, h, t in chunks],
                )
                rows = self._conn.execute("SELECT id, text, cells FROM table_rows").fetchall()
                self._conn.executemany(
                    "UPDATE table_rows SET tokens = ?, value_tokens = ? WHERE id = ?",
                    [
                        (self._tokens(text), self._tokens("\n".join(json.loads(cells))), i)
                        for i, text, cells in rows
                    ],
                )
                self._bump_generation()
            self._conn.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('tokenizer', ?)", (signature,)
            )

    def _lexicon(self, table: str, column: str = "tokens") -> _Lexicon:
        """The BM25 index of ``table.column``, rebuilt if the base changed (in any process)."""
        key = f"{table}.{column}"  # both are literals of this module, never user input
        with self._lock:
            generation = self._meta("generation") or "0"
            lexicon: _Lexicon | None = self._cache.get((self._space, key))
            if lexicon is None or lexicon.generation != generation:
                rows = self._conn.execute(f"SELECT id, {column} FROM {table} ORDER BY seq")
                lexicon = _Lexicon(generation, rows)
                self._cache.put((self._space, key), lexicon)
            return lexicon

    # -- retrieval -----------------------------------------------------------------------------
    def rag_retrieve(self, query: str, top_k: int = 30) -> dict[str, Any]:
        """The ``top_k`` chunks best matching ``query``, with their citations.

        BM25 and dense rankings of depth ``max(top_k, 50)`` are fused by reciprocal rank.

        Returns:
            ``{"query", "top_k", "chunks": [{"file_ref", "heading", "text", "score",
            "citation"}], "instruction"}``; ``chunks`` is empty when nothing matches.
        """
        if not 1 <= top_k <= 100:
            raise ToolError(f"top_k must be from 1 to 100, got {top_k}")
        if not query.strip():
            raise ToolError("query must not be empty")
        depth = max(top_k, 50)
        terms = parse_query(query, self._tokenizer).terms
        lexical = self._lexicon("chunks").top(terms, depth)
        dense = self._chunk_vectors.nearest(query, depth, CHUNK_MIN_SIMILARITY)
        fused = rrf(lexical, dense)
        found = self._fetch(
            "SELECT id, file, start_line, end_line, heading, text FROM chunks WHERE id IN ({})",
            [item_id for item_id, _ in fused],
        )
        chunks = []
        for item_id, score in fused:
            row = found.get(item_id)
            if row is None:
                continue  # a vector left over from an interrupted update
            file, start, end, heading, text = row
            chunks.append(
                {
                    "file_ref": f"{file}#L{start}-L{end}",
                    "heading": heading,
                    "text": text,
                    "score": round(score, 6),
                    "citation": f'<CITATION file="{_attr(file)}" lines="{start}-{end}" />',
                }
            )
            if len(chunks) == top_k:
                break
        return {"query": query, "top_k": top_k, "chunks": chunks, "instruction": CITE_INSTRUCTION}

    def table_rag_retrieve(self, query: str, max_rows: int = 20) -> dict[str, Any]:
        """Table rows matching ``query``, grouped by table, at most ``max_rows`` shown.

        A row matches when BM25 scores it above zero (on its values if any row matches on its
        values, else on its column names too) or its cosine similarity to the query is at
        least 0.35; matches are ranked by reciprocal rank fusion, and the total counts every
        match, shown or not.

        Returns:
            ``{"query", "tables": [{"file_ref_table", "header", "rows", "row_numbers",
            "shown", "omitted", "total", "citation"}], "shown", "omitted", "total",
            "truncated", "instruction"}``.
        """
        if not 1 <= max_rows <= 200:
            raise ToolError(f"max_rows must be from 1 to 200, got {max_rows}")
        if not query.strip():
            raise ToolError("query must not be empty")
        terms = parse_query(query, self._tokenizer).terms
        lexicon = self._lexicon("table_rows")
        lexical = lexicon.top(terms, len(lexicon.ids))  # every match, for an exact total
        # A column name in the query ("price") matches every row of its table. Rows that
        # match on their values are the answer when there are any; only when none are do the
        # rows matched by column name alone count ("stock" lists the whole stock table).
        values = self._lexicon("table_rows", "value_tokens")
        by_value = set(values.top(terms, len(values.ids)))
        if by_value:
            lexical = [item_id for item_id in lexical if item_id in by_value]
        dense = self._row_vectors.nearest(query, ROW_DENSE_DEPTH, ROW_MIN_SIMILARITY)
        fused = rrf(lexical, dense)
        found = self._fetch(
            "SELECT id, table_ref, number, cells FROM table_rows WHERE id IN ({})",
            [item_id for item_id, _ in fused],
        )
        with self._lock:
            headers = {
                ref: json.loads(header)
                for ref, header in self._conn.execute("SELECT ref, header FROM tables")
            }
        # Rows and headers are read apart, so a file re-indexed in between by another process
        # may leave a row without its table: such a row is dropped, like a leftover vector.
        ranked = [
            (str(row[0]), TableRow(int(row[1]), tuple(json.loads(row[2]))))
            for row in (found.get(item_id) for item_id, _ in fused)
            if row is not None and row[0] in headers
        ]
        return _table_result(query, ranked, headers, max_rows)

    def _fetch(self, sql: str, ids: Sequence[str]) -> dict[str, tuple[Any, ...]]:
        """Rows of ``sql`` (``id`` first, an ``IN ({})`` placeholder) by id, in batches."""
        found: dict[str, tuple[Any, ...]] = {}
        with self._lock:
            for batch in _batches(ids, _SQL_BATCH):
                query = sql.format(", ".join("?" * len(batch)))
                for row in self._conn.execute(query, list(batch)):
                    found[row[0]] = tuple(row[1:])
        return found


def _embedded_text(heading: str, text: str) -> str:
    """The text searched for a chunk: its heading path gives the text its topic."""
    return f"{heading}\n{text}" if heading else text


def _embedded(chunk: Chunk) -> str:
    return _embedded_text(chunk.heading, chunk.text)
