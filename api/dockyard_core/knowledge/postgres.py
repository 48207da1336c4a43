"""The knowledge-base index on PostgreSQL: the backend that scales past one machine (any number of facade
replicas and indexing jobs share one server, or a managed one).

Per generation ``g``: ``kb_documents_g`` and ``kb_chunks_g``, whose ``tsv`` column is generated from the
text (``to_tsvector`` with the index's text-search configuration, ``english`` by default) and indexed
with GIN; keyword searches rank the matches of the OR-ed question words by ``ts_rank``. Vectors are
``bytea`` (float32 little-endian unit vectors) scored exactly with numpy by each replica over its cached
copy of the generation's vectors (:mod:`.index`). pgvector (an ``vector`` column with an HNSW index)
would move that scan into the server, but Debian 12 ships no ``postgresql-15-pgvector``: the schema keeps
vectors in their own column so that a later migration can add it (docs/knowledge-bases.md).

Through SQLAlchemy's asyncio engine on asyncpg, like the conversation store. Dropping a retired
generation takes an exclusive lock on its tables, so it waits for the searches still reading them; a
search that resolved a generation just dropped retries once on the active one.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from dockyard_core.errors import InvalidError
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

SCHEMA = """
CREATE TABLE IF NOT EXISTS kb_generations (
    id BIGSERIAL PRIMARY KEY,
    kb TEXT NOT NULL,
    state TEXT NOT NULL,
    embedding_model TEXT NOT NULL,
    dimensions INTEGER,
    revision BIGINT NOT NULL DEFAULT 0,
    created_at DOUBLE PRECISION NOT NULL,
    activated_at DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS kb_generations_kb ON kb_generations (kb);
CREATE UNIQUE INDEX IF NOT EXISTS kb_generations_one_active ON kb_generations (kb) WHERE state = 'active'
"""

GENERATION_SCHEMA = """
CREATE TABLE kb_documents_{g} (
    document_id TEXT PRIMARY KEY, title TEXT NOT NULL, source TEXT NOT NULL, media_type TEXT NOT NULL,
    bytes BIGINT NOT NULL, chunks INTEGER NOT NULL, indexed_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE kb_chunks_{g} (
    id BIGSERIAL PRIMARY KEY, document_id TEXT NOT NULL, ordinal INTEGER NOT NULL, start_offset INTEGER NOT NULL,
    end_offset INTEGER NOT NULL, heading_path TEXT[] NOT NULL, page INTEGER, text TEXT NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('{config}', text)) STORED, vector BYTEA
);
CREATE INDEX kb_chunks_{g}_document ON kb_chunks_{g} (document_id, ordinal);
CREATE INDEX kb_chunks_{g}_tsv ON kb_chunks_{g} USING GIN (tsv)
"""
SCHEMA_LOCK = 0x6B62_0001  # pg_advisory_xact_lock key: replicas starting together create the schema once
UNDEFINED_TABLE = "42P01"


def asyncpg_url(url: str) -> str:
    """``postgresql://`` (or ``postgres://``) URLs get SQLAlchemy's asyncpg driver."""
    return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql+asyncpg://", url)


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


class PostgresIndex(KnowledgeIndex):
    def __init__(self, url: str, *, text_search_config: str = "english", pool_size: int = 4) -> None:
        super().__init__()
        if not re.fullmatch(r"[a-z_]+", text_search_config):
            raise InvalidError("a text-search configuration is a name like english or simple")
        self.url = asyncpg_url(url)
        self.config = text_search_config
        self.pool_size = pool_size
        self._engine: AsyncEngine | None = None

    async def start(self) -> None:
        self._engine = create_async_engine(self.url, pool_size=self.pool_size, max_overflow=0, pool_pre_ping=True)
        async with self._begin() as conn:
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
            for statement in _statements(SCHEMA):
                await conn.execute(text(statement))

    async def close(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            await engine.dispose()

    @asynccontextmanager
    async def _begin(self) -> AsyncIterator[AsyncConnection]:
        """A transaction; a table that vanished under it (a dropped generation) is GenerationGoneError."""
        if self._engine is None:
            raise RuntimeError("the knowledge index is not started")
        try:
            async with self._engine.begin() as conn:
                yield conn
        except DBAPIError as exc:
            if UNDEFINED_TABLE in (getattr(exc.orig, "sqlstate", None), getattr(exc.orig, "pgcode", None)):
                raise GenerationGoneError("the generation was dropped while it was read") from exc
            raise

    async def _fetch(self, query: str, params: dict[str, Any] | None = None) -> list[Any]:
        async with self._begin() as conn:
            return list((await conn.execute(text(query), params or {})).all())

    async def _create_generation(self, kb: str, embedding_model: str, dimensions: int | None, now: float) -> int:
        async with self._begin() as conn:
            created = await conn.execute(
                text(
                    "INSERT INTO kb_generations (kb, state, embedding_model, dimensions, created_at) "
                    "VALUES (:kb, 'building', :model, :dimensions, :now) RETURNING id"
                ),
                {"kb": kb, "model": embedding_model, "dimensions": dimensions, "now": now},
            )
            generation = int(created.scalar_one())
            for statement in _statements(GENERATION_SCHEMA.format(g=generation, config=self.config)):
                await conn.execute(text(statement))
            return generation

    async def generations(self, kb: str) -> list[Generation]:
        rows = await self._fetch(
            "SELECT id, kb, state, embedding_model, dimensions, revision, created_at, activated_at "
            "FROM kb_generations WHERE kb = :kb ORDER BY id",
            {"kb": kb},
        )
        return [Generation(*tuple(row)) for row in rows]

    async def _switch(self, kb: str, generation: int, now: float) -> None:
        async with self._begin() as conn:
            # the knowledge base's rows locked in id order: two switches of one knowledge base queue
            await conn.execute(text("SELECT id FROM kb_generations WHERE kb = :kb ORDER BY id FOR UPDATE"), {"kb": kb})
            await conn.execute(
                text("UPDATE kb_generations SET state = 'retired' WHERE kb = :kb AND state = 'active'"), {"kb": kb}
            )
            await conn.execute(
                text("UPDATE kb_generations SET state = 'active', activated_at = :now WHERE id = :g"),
                {"now": now, "g": generation},
            )

    async def _drop(self, generation: int) -> None:
        async with self._begin() as conn:
            await conn.execute(text(f"DROP TABLE IF EXISTS kb_chunks_{generation}, kb_documents_{generation}"))
            await conn.execute(text("DELETE FROM kb_generations WHERE id = :g"), {"g": generation})

    async def _put(
        self, generation: int, document: DocumentRecord, chunks: Sequence[Chunk], vectors: Matrix | None
    ) -> None:
        g = generation
        rows = [
            {"document_id": c.document_id, "ordinal": c.ordinal, "start": c.start, "end": c.end,
             "heading_path": list(c.heading_path), "page": c.page, "text": c.text,
             "vector": vectors[i].astype("<f4").tobytes() if vectors is not None else None}
            for i, c in enumerate(chunks)
        ]  # fmt: skip
        async with self._begin() as conn:
            await conn.execute(text(f"DELETE FROM kb_chunks_{g} WHERE document_id = :d"), {"d": document.document_id})
            await conn.execute(
                text(
                    f"INSERT INTO kb_documents_{g} VALUES (:document_id, :title, :source, :media_type, :bytes, "
                    ":chunks, :indexed_at) ON CONFLICT (document_id) DO UPDATE SET title = excluded.title, "
                    "source = excluded.source, media_type = excluded.media_type, bytes = excluded.bytes, "
                    "chunks = excluded.chunks, indexed_at = excluded.indexed_at"
                ),
                document.__dict__,
            )
            if rows:
                await conn.execute(
                    text(
                        f"INSERT INTO kb_chunks_{g} (document_id, ordinal, start_offset, end_offset, heading_path, "
                        "page, text, vector) VALUES (:document_id, :ordinal, :start, :end, :heading_path, :page, "
                        ":text, :vector)"
                    ),
                    rows,
                )
            await conn.execute(text("UPDATE kb_generations SET revision = revision + 1 WHERE id = :g"), {"g": g})

    async def _delete(self, generation: int, document_id: str) -> bool:
        g = generation
        async with self._begin() as conn:
            await conn.execute(text(f"DELETE FROM kb_chunks_{g} WHERE document_id = :d"), {"d": document_id})
            gone = await conn.execute(text(f"DELETE FROM kb_documents_{g} WHERE document_id = :d"), {"d": document_id})
            await conn.execute(text("UPDATE kb_generations SET revision = revision + 1 WHERE id = :g"), {"g": g})
            return bool(gone.rowcount)

    async def _documents(self, generation: int) -> list[DocumentRecord]:
        rows = await self._fetch(f"SELECT * FROM kb_documents_{generation} ORDER BY document_id")
        return [DocumentRecord(*tuple(row)) for row in rows]

    async def _stats(self, generation: int) -> IndexStats:
        [row] = await self._fetch(
            f"SELECT count(*), coalesce(sum(chunks), 0), coalesce(sum(bytes), 0), max(indexed_at) "
            f"FROM kb_documents_{generation}"
        )
        return IndexStats(generation, int(row[0]), int(row[1]), int(row[2]), row[3])

    async def _keyword(self, generation: int, terms: list[str], limit: int) -> list[int]:
        rows = await self._fetch(
            f"SELECT id FROM kb_chunks_{generation}, to_tsquery('{self.config}', :q) AS q WHERE tsv @@ q "
            "ORDER BY ts_rank(tsv, q) DESC, id LIMIT :limit",
            {"q": " | ".join(terms), "limit": limit},
        )
        return [int(r[0]) for r in rows]

    async def _revision(self, generation: int) -> int:
        rows = await self._fetch("SELECT revision FROM kb_generations WHERE id = :g", {"g": generation})
        return int(rows[0][0]) if rows else -1

    async def _load_vectors(self, generation: int) -> tuple[npt.NDArray[np.int64], Matrix]:
        rows = await self._fetch(f"SELECT id, vector FROM kb_chunks_{generation} WHERE vector IS NOT NULL ORDER BY id")
        return vectors_from_rows(rows)

    async def _hits(self, generation: int, ids: Sequence[int]) -> dict[int, Hit]:
        if not ids:
            return {}
        g = generation
        rows = await self._fetch(
            f"SELECT c.id, c.document_id, c.ordinal, c.text, c.start_offset, c.end_offset, c.heading_path, c.page, "
            f"d.title, d.source FROM kb_chunks_{g} c JOIN kb_documents_{g} d USING (document_id) "
            "WHERE c.id = ANY(CAST(:ids AS BIGINT[]))",
            {"ids": list(ids)},
        )
        return {int(r[0]): hit_from_row(tuple(r)[1:], r[6]) for r in rows}
