"""The embedded knowledge-base index (``make run``): one SQLite file, FTS5 for keywords, vectors as BLOBs.

Per generation ``g``: ``kb_documents_g``, ``kb_chunks_g`` (text, offsets, heading path, page, the unit
vector as float32 little-endian bytes) and ``kb_fts_g``, an FTS5 table over the chunks' text (external
content: the text is stored once; tokenizer ``porter unicode61``: case and accents folded, English
stems). Searches rank by FTS5's BM25. Python's ``sqlite3`` here cannot load extensions (no
``enable_load_extension``), so vectors are scored with numpy (:mod:`.index`): 10,000 chunks of 64 to 1,024
dimensions are one matrix product of well under 50 ms.

The file is shared by processes (the indexing job writes, the facade reads): WAL journal, a busy timeout,
and each write in one transaction. Calls run in a worker thread, one at a time per connection.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from dockyard_core.knowledge.chunking import Chunk
from dockyard_core.knowledge.index import (
    DocumentRecord,
    Generation,
    GenerationGoneError,
    Hit,
    IndexStats,
    KnowledgeIndex,
    Matrix,
    hit_from_row,
    vectors_from_rows,
)

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS kb_generations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kb TEXT NOT NULL,
    state TEXT NOT NULL,
    embedding_model TEXT NOT NULL,
    dimensions INTEGER,
    revision INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    activated_at REAL
);
CREATE INDEX IF NOT EXISTS kb_generations_kb ON kb_generations (kb);
CREATE TABLE IF NOT EXISTS kb_active (kb TEXT PRIMARY KEY, generation INTEGER NOT NULL);
"""

GENERATION_SCHEMA = """
CREATE TABLE kb_documents_{g} (
    document_id TEXT PRIMARY KEY, title TEXT NOT NULL, source TEXT NOT NULL, media_type TEXT NOT NULL,
    bytes INTEGER NOT NULL, chunks INTEGER NOT NULL, indexed_at REAL NOT NULL
);
CREATE TABLE kb_chunks_{g} (
    id INTEGER PRIMARY KEY, document_id TEXT NOT NULL, ordinal INTEGER NOT NULL, start INTEGER NOT NULL,
    "end" INTEGER NOT NULL, heading_path TEXT NOT NULL, page INTEGER, text TEXT NOT NULL, vector BLOB
);
CREATE INDEX kb_chunks_{g}_document ON kb_chunks_{g} (document_id, ordinal);
CREATE VIRTUAL TABLE kb_fts_{g} USING fts5(text, content='kb_chunks_{g}', content_rowid='id',
    tokenize='porter unicode61 remove_diacritics 2');
"""


class SqliteIndex(KnowledgeIndex):
    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = str(path)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    async def start(self) -> None:
        def open_() -> None:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(SCHEMA)
            self._conn = conn

        await asyncio.to_thread(open_)

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await asyncio.to_thread(conn.close)

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def call() -> T:
            with self._lock:
                if self._conn is None:
                    raise RuntimeError("the knowledge index is not started")
                try:
                    return work(self._conn)
                except sqlite3.OperationalError as exc:
                    if "no such table: kb_" in str(exc):
                        raise GenerationGoneError("the generation was dropped while it was read") from exc
                    raise

        return await asyncio.to_thread(call)

    async def _write(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def transaction(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = work(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

        return await self._run(transaction)

    async def _create_generation(self, kb: str, embedding_model: str, dimensions: int | None, now: float) -> int:
        def create(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "INSERT INTO kb_generations (kb, state, embedding_model, dimensions, created_at) "
                "VALUES (?, 'building', ?, ?, ?)",
                (kb, embedding_model, dimensions, now),
            )
            generation = int(cursor.lastrowid or 0)
            for statement in GENERATION_SCHEMA.format(g=generation).split(";"):
                if statement.strip():
                    conn.execute(statement)
            return generation

        return await self._write(create)

    async def generations(self, kb: str) -> list[Generation]:
        rows = await self._run(
            lambda c: c.execute(
                "SELECT id, kb, state, embedding_model, dimensions, revision, created_at, activated_at "
                "FROM kb_generations WHERE kb = ? ORDER BY id",
                (kb,),
            ).fetchall()
        )
        return [Generation(*row) for row in rows]

    async def _switch(self, kb: str, generation: int, now: float) -> None:
        def switch(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE kb_generations SET state = 'retired' WHERE kb = ? AND state = 'active'", (kb,))
            conn.execute("UPDATE kb_generations SET state = 'active', activated_at = ? WHERE id = ?", (now, generation))
            conn.execute(
                "INSERT INTO kb_active (kb, generation) VALUES (?, ?) "
                "ON CONFLICT (kb) DO UPDATE SET generation = excluded.generation",
                (kb, generation),
            )

        await self._write(switch)

    async def _drop(self, generation: int) -> None:
        def drop(conn: sqlite3.Connection) -> None:
            for table in ("kb_fts", "kb_chunks", "kb_documents"):
                conn.execute(f"DROP TABLE IF EXISTS {table}_{generation}")
            conn.execute("DELETE FROM kb_generations WHERE id = ?", (generation,))

        await self._write(drop)

    async def _put(
        self, generation: int, document: DocumentRecord, chunks: Sequence[Chunk], vectors: Matrix | None
    ) -> None:
        g = generation

        def put(conn: sqlite3.Connection) -> None:
            _delete_chunks(conn, g, document.document_id)
            conn.execute(
                f"INSERT OR REPLACE INTO kb_documents_{g} VALUES (?, ?, ?, ?, ?, ?, ?)",
                (document.document_id, document.title, document.source, document.media_type, document.bytes,
                 document.chunks, document.indexed_at),
            )  # fmt: skip
            for i, chunk in enumerate(chunks):
                vector = vectors[i].astype("<f4").tobytes() if vectors is not None else None
                cursor = conn.execute(
                    f'INSERT INTO kb_chunks_{g} (document_id, ordinal, start, "end", heading_path, page, text, vector) '
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (chunk.document_id, chunk.ordinal, chunk.start, chunk.end, json.dumps(chunk.heading_path),
                     chunk.page, chunk.text, vector),
                )  # fmt: skip
                conn.execute(f"INSERT INTO kb_fts_{g} (rowid, text) VALUES (?, ?)", (cursor.lastrowid, chunk.text))
            conn.execute("UPDATE kb_generations SET revision = revision + 1 WHERE id = ?", (g,))

        await self._write(put)

    async def _delete(self, generation: int, document_id: str) -> bool:
        def delete(conn: sqlite3.Connection) -> bool:
            _delete_chunks(conn, generation, document_id)
            gone = conn.execute(f"DELETE FROM kb_documents_{generation} WHERE document_id = ?", (document_id,))
            conn.execute("UPDATE kb_generations SET revision = revision + 1 WHERE id = ?", (generation,))
            return gone.rowcount > 0

        return await self._write(delete)

    async def _documents(self, generation: int) -> list[DocumentRecord]:
        rows = await self._run(
            lambda c: c.execute(f"SELECT * FROM kb_documents_{generation} ORDER BY document_id").fetchall()
        )
        return [DocumentRecord(*row) for row in rows]

    async def _stats(self, generation: int) -> IndexStats:
        row = await self._run(
            lambda c: c.execute(
                f"SELECT count(*), coalesce(sum(chunks), 0), coalesce(sum(bytes), 0), max(indexed_at) "
                f"FROM kb_documents_{generation}"
            ).fetchone()
        )
        return IndexStats(generation, int(row[0]), int(row[1]), int(row[2]), row[3])

    async def _keyword(self, generation: int, terms: list[str], limit: int) -> list[int]:
        match = " OR ".join(f'"{term}"' for term in terms)
        rows = await self._run(
            lambda c: c.execute(
                f"SELECT rowid FROM kb_fts_{generation} WHERE kb_fts_{generation} MATCH ? ORDER BY rank LIMIT ?",
                (match, limit),
            ).fetchall()
        )
        return [int(r[0]) for r in rows]

    async def _revision(self, generation: int) -> int:
        row = await self._run(
            lambda c: c.execute("SELECT revision FROM kb_generations WHERE id = ?", (generation,)).fetchone()
        )
        return int(row[0]) if row else -1

    async def _load_vectors(self, generation: int) -> tuple[npt.NDArray[np.int64], Matrix]:
        rows = await self._run(
            lambda c: c.execute(
                f"SELECT id, vector FROM kb_chunks_{generation} WHERE vector IS NOT NULL ORDER BY id"
            ).fetchall()
        )
        return vectors_from_rows(rows)

    async def _hits(self, generation: int, ids: Sequence[int]) -> dict[int, Hit]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = await self._run(
            lambda c: c.execute(
                f'SELECT c.id, c.document_id, c.ordinal, c.text, c.start, c."end", c.heading_path, c.page, d.title, '
                f"d.source FROM kb_chunks_{generation} c JOIN kb_documents_{generation} d USING (document_id) "
                f"WHERE c.id IN ({marks})",
                tuple(ids),
            ).fetchall()
        )
        return {int(r[0]): hit_from_row(r[1:], json.loads(r[6])) for r in rows}


def _delete_chunks(conn: sqlite3.Connection, generation: int, document_id: str) -> None:
    g = generation
    conn.execute(
        f"INSERT INTO kb_fts_{g} (kb_fts_{g}, rowid, text) "
        f"SELECT 'delete', id, text FROM kb_chunks_{g} WHERE document_id = ?",
        (document_id,),
    )
    conn.execute(f"DELETE FROM kb_chunks_{g} WHERE document_id = ?", (document_id,))
