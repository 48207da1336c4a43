"""The knowledge-base index: what both backends (:mod:`.sqlite` for ``make run``, :mod:`.postgres` past one
machine) offer, and the parts they share.

**Generations.** A knowledge base's chunks live in a *generation*: a set of tables of their own. The
indexing job builds a new generation (``new_generation``, then ``put_document`` for each document) while
searches keep reading the *active* one; ``activate`` then moves the knowledge base's active pointer to it
in one transaction, so a search sees either the old index or the new one, never half of each. The
previous generation is kept (``retired``) until ``drop_generation``, so that searches started before the
switch finish and a bad index can be switched back. A document added or deleted between two rebuilds
goes into the active generation (and, while one is being built, into that one too: the job's concern).

**Searches.** ``keyword_search``: full text (SQLite FTS5 with BM25, PostgreSQL ``tsvector`` with a GIN
index and ``ts_rank``); a question's words are OR-ed, so a chunk need not hold every word.
``vector_search``: cosine similarity of unit vectors, exact, scored with numpy over the generation's
vectors, which each process caches per (generation, revision) and reloads when the revision moves. The
scores are an ``einsum``, which runs on the calling thread, not a BLAS matrix product: on a busy machine
BLAS's threads wait for cores and a 10,000 x 64 product's p95 went from 0.05 to 7 ms (0.16 ms with
``einsum``; 10,000 x 1,024: p50 4.6 ms against 13.8 ms).
``hybrid_search``: both, fused by Reciprocal Rank Fusion with k=60 (:mod:`.fusion`).
"""

from __future__ import annotations

import re
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from dockyard_core.errors import ConflictError, InvalidError, NotFoundError
from dockyard_core.knowledge.chunking import Chunk
from dockyard_core.knowledge.fusion import RRF_K, reciprocal_rank_fusion

T = TypeVar("T")
GenerationState = Literal["building", "active", "retired"]
Matrix = npt.NDArray[np.float32]
MAX_QUERY_TERMS = 32
MAX_RESULTS = 200
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
    ]
)
_WORD = re.compile(r"[^\W_]+")


class GenerationGoneError(NotFoundError):
    """A generation's tables vanished under a search (dropped after it was resolved): searched again."""


@dataclass(frozen=True)
class Generation:
    id: int
    kb: str
    state: GenerationState
    embedding_model: str
    dimensions: int | None
    revision: int
    created_at: float
    activated_at: float | None


@dataclass(frozen=True)
class DocumentRecord:
    """A document as indexed: given to ``put_document`` (``chunks`` and ``indexed_at`` are filled in)."""

    document_id: str
    title: str = ""
    source: str = ""
    media_type: str = ""
    bytes: int = 0
    chunks: int = 0
    indexed_at: float = 0.0


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk, with what a citation needs (document, title, source, ordinal, offsets, headings)."""

    document_id: str
    ordinal: int
    text: str
    start: int
    end: int
    heading_path: tuple[str, ...]
    page: int | None
    title: str
    source: str
    score: float
    keyword_rank: int | None = None
    vector_rank: int | None = None

    def as_source(self) -> dict[str, Any]:
        """The hit as an answer's source (camelCase JSON; docs/knowledge-bases.md): no text, the passage is
        found again by document, chunk and offsets."""
        return {
            "document": self.document_id,
            "title": self.title,
            "source": self.source,
            "chunk": self.ordinal,
            "headingPath": list(self.heading_path),
            "page": self.page,
            "start": self.start,
            "end": self.end,
            "score": round(self.score, 6),
        }


@dataclass(frozen=True)
class IndexStats:
    generation: int
    documents: int
    chunks: int
    bytes: int
    """The documents' source bytes."""
    last_indexed: float | None


def query_terms(query: str) -> list[str]:
    """A question's searchable words: lower-cased, common English words dropped (unless nothing else is
    left), duplicates dropped, at most :data:`MAX_QUERY_TERMS`; only letters and digits, so nothing of the
    backends' query syntax gets through."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    kept = [w for w in words if w not in STOPWORDS] or words
    return kept[:MAX_QUERY_TERMS]


def unit_vectors(vectors: Sequence[Sequence[float]], dimensions: int) -> Matrix:
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[1] != dimensions:
        raise InvalidError(f"vectors must have {dimensions} dimensions", details={"field": "vectors"})
    if not np.isfinite(matrix).all():
        raise InvalidError("vectors must be finite numbers", details={"field": "vectors"})
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit: Matrix = (matrix / np.where(norms == 0, 1, norms)).astype(np.float32)
    return unit


class KnowledgeIndex(ABC):
    """The operations of a knowledge-base index; ``generation=None`` means the knowledge base's active one."""

    vector_cache_size = 8
    """Generations whose vectors a process keeps in memory (least recently searched dropped first)."""

    def __init__(self) -> None:
        self._vectors: OrderedDict[int, tuple[int, npt.NDArray[np.int64], Matrix]] = OrderedDict()

    # -- what a backend provides ------------------------------------------------------------------------------
    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def _create_generation(self, kb: str, embedding_model: str, dimensions: int | None, now: float) -> int: ...

    @abstractmethod
    async def generations(self, kb: str) -> list[Generation]: ...

    @abstractmethod
    async def _switch(self, kb: str, generation: int, now: float) -> None:
        """In one transaction: the pointer to ``generation``, its state active, the previous one retired."""

    @abstractmethod
    async def _drop(self, generation: int) -> None: ...

    @abstractmethod
    async def _put(
        self, generation: int, document: DocumentRecord, chunks: Sequence[Chunk], vectors: Matrix | None
    ) -> None: ...

    @abstractmethod
    async def _delete(self, generation: int, document_id: str) -> bool: ...

    @abstractmethod
    async def _documents(self, generation: int) -> list[DocumentRecord]: ...

    @abstractmethod
    async def _stats(self, generation: int) -> IndexStats: ...

    @abstractmethod
    async def _keyword(self, generation: int, terms: list[str], limit: int) -> list[int]:
        """Chunk ids, best first."""

    @abstractmethod
    async def _revision(self, generation: int) -> int: ...

    @abstractmethod
    async def _load_vectors(self, generation: int) -> tuple[npt.NDArray[np.int64], Matrix]: ...

    @abstractmethod
    async def _hits(self, generation: int, ids: Sequence[int]) -> dict[int, Hit]: ...

    # -- generations ------------------------------------------------------------------------------------------
    async def new_generation(self, kb: str, *, embedding_model: str = "", dimensions: int | None = None) -> Generation:
        if not kb:
            raise InvalidError("a knowledge base needs a name", details={"field": "kb"})
        if dimensions is not None and not 1 <= dimensions <= 16_384:
            raise InvalidError("dimensions must be between 1 and 16384", details={"field": "dimensions"})
        generation_id = await self._create_generation(kb, embedding_model, dimensions, time.time())
        return await self.generation(kb, generation_id)

    async def generation(self, kb: str, generation: int | None = None) -> Generation:
        """One generation of ``kb`` (the active one when None); NotFoundError when there is none."""
        found = await self.generations(kb)
        for g in found:
            if (g.id == generation) if generation is not None else g.state == "active":
                return g
        what = f"generation {generation}" if generation is not None else "active index"
        raise NotFoundError(f"knowledge base {kb!r} has no {what}", details={"kb": kb, "generation": generation})

    async def active_generation(self, kb: str) -> Generation | None:
        return next((g for g in await self.generations(kb) if g.state == "active"), None)

    async def activate(self, kb: str, generation: int) -> Generation:
        """Make ``generation`` the one searches read, atomically; the previous one is retired (kept)."""
        await self.generation(kb, generation)
        await self._switch(kb, generation, time.time())
        return await self.generation(kb, generation)

    async def drop_generation(self, kb: str, generation: int) -> None:
        found = await self.generation(kb, generation)
        if found.state == "active":
            raise ConflictError(
                f"generation {generation} is the active index of {kb!r}: activate another one first",
                details={"kb": kb, "generation": generation},
            )
        self._vectors.pop(generation, None)
        await self._drop(generation)

    # -- documents --------------------------------------------------------------------------------------------
    async def put_document(
        self,
        kb: str,
        generation: int | None,
        document: DocumentRecord,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]] | None = None,
    ) -> DocumentRecord:
        """Add ``document`` with its chunks (and their vectors, one per chunk) to a generation, replacing the
        document of the same id in one transaction."""
        target = await self.generation(kb, generation)
        if not document.document_id:
            raise InvalidError("a document needs an id", details={"field": "document_id"})
        if any(c.document_id != document.document_id for c in chunks):
            raise InvalidError("every chunk must belong to the document", details={"field": "chunks"})
        matrix: Matrix | None = None
        if vectors is not None:
            if target.dimensions is None:
                raise InvalidError(f"generation {target.id} was created without vectors", details={"field": "vectors"})
            if len(vectors) != len(chunks):
                raise InvalidError("one vector per chunk", details={"field": "vectors"})
            matrix = unit_vectors(vectors, target.dimensions) if chunks else None
        record = replace(document, chunks=len(chunks), indexed_at=time.time())
        await self._put(target.id, record, chunks, matrix)
        return record

    async def delete_document(self, kb: str, generation: int | None, document_id: str) -> bool:
        return await self._delete((await self.generation(kb, generation)).id, document_id)

    async def documents(self, kb: str, generation: int | None = None) -> list[DocumentRecord]:
        return await self._documents((await self.generation(kb, generation)).id)

    async def stats(self, kb: str, generation: int | None = None) -> IndexStats:
        return await self._stats((await self.generation(kb, generation)).id)

    # -- searches ---------------------------------------------------------------------------------------------
    async def _on(self, kb: str, generation: int | None, search: Callable[[Generation], Awaitable[T]]) -> T:
        """``search`` on the generation (the active one when None); once more when the active one was
        switched and dropped between resolving it and reading it."""
        for attempt in range(2):
            target = await self.generation(kb, generation)
            try:
                return await search(target)
            except GenerationGoneError:
                if generation is not None or attempt:
                    raise
        raise AssertionError("unreachable")

    async def keyword_search(self, kb: str, query: str, *, limit: int = 5, generation: int | None = None) -> list[Hit]:
        _check_limit("limit", limit)

        async def search(target: Generation) -> list[Hit]:
            terms = query_terms(query)
            return await self._ranked(
                target.id, await self._keyword(target.id, terms, limit) if terms else [], "keyword"
            )

        return await self._on(kb, generation, search)

    async def vector_search(
        self, kb: str, vector: Sequence[float], *, limit: int = 5, generation: int | None = None
    ) -> list[Hit]:
        _check_limit("limit", limit)

        async def search(target: Generation) -> list[Hit]:
            return await self._ranked(target.id, await self._nearest(target, vector, limit), "vector")

        return await self._on(kb, generation, search)

    async def hybrid_search(
        self,
        kb: str,
        query: str,
        vector: Sequence[float] | None = None,
        *,
        limit: int = 5,
        candidates: int = 20,
        generation: int | None = None,
    ) -> list[Hit]:
        """The keyword and the vector search's best ``candidates`` each, fused by RRF (k=60); keywords only
        without a vector or in a generation without vectors."""
        _check_limit("limit", limit)
        _check_limit("candidates", candidates)

        async def search(target: Generation) -> list[Hit]:
            terms = query_terms(query)
            keyword = await self._keyword(target.id, terms, candidates) if terms else []
            nearest = await self._nearest(target, vector, candidates)
            fused = reciprocal_rank_fusion([keyword, nearest], k=RRF_K, limit=limit)
            hits = await self._hits(target.id, [i for i, _ in fused])
            kw_rank = {i: r for r, i in enumerate(keyword, start=1)}
            vec_rank = {i: r for r, i in enumerate(nearest, start=1)}
            return [
                replace(hits[i], score=score, keyword_rank=kw_rank.get(i), vector_rank=vec_rank.get(i))
                for i, score in fused
                if i in hits
            ]

        return await self._on(kb, generation, search)

    async def _ranked(self, generation: int, ids: list[int], kind: str) -> list[Hit]:
        hits = await self._hits(generation, ids)
        ranked = [(rank, hits[i]) for rank, i in enumerate(ids, start=1) if i in hits]
        if kind == "keyword":
            return [replace(h, score=1.0 / (RRF_K + r), keyword_rank=r) for r, h in ranked]
        return [replace(h, score=1.0 / (RRF_K + r), vector_rank=r) for r, h in ranked]

    async def _nearest(self, target: Generation, vector: Sequence[float] | None, limit: int) -> list[int]:
        if vector is None or target.dimensions is None:
            return []
        query = unit_vectors([vector], target.dimensions)[0]
        ids, matrix = await self._cached_vectors(target.id)
        if not len(ids):
            return []
        scores = np.einsum("ij,j->i", matrix, query)  # one thread: see the module's docstring
        top = min(limit, len(ids))
        best = np.argpartition(-scores, top - 1)[:top]
        return [int(ids[i]) for i in best[np.argsort(-scores[best], kind="stable")]]

    async def _cached_vectors(self, generation: int) -> tuple[npt.NDArray[np.int64], Matrix]:
        revision = await self._revision(generation)
        cached = self._vectors.get(generation)
        if cached is None or cached[0] != revision:
            ids, matrix = await self._load_vectors(generation)
            cached = (revision, ids, matrix)
            self._vectors[generation] = cached
        self._vectors.move_to_end(generation)
        while len(self._vectors) > self.vector_cache_size:
            self._vectors.popitem(last=False)
        return cached[1], cached[2]


def _check_limit(field: str, value: int) -> None:
    if not 1 <= value <= MAX_RESULTS:
        raise InvalidError(f"{field} must be between 1 and {MAX_RESULTS}", details={"field": field})


def vectors_from_rows(rows: Sequence[Sequence[Any]]) -> tuple[npt.NDArray[np.int64], Matrix]:
    """(id, float32 little-endian bytes) rows to the ids and one matrix."""
    ids = np.fromiter((int(r[0]) for r in rows), dtype=np.int64, count=len(rows))
    if not rows:
        return ids, np.zeros((0, 0), dtype=np.float32)
    matrix = np.frombuffer(b"".join(bytes(r[1]) for r in rows), dtype="<f4").reshape(len(rows), -1)
    return ids, matrix.astype(np.float32, copy=False)


def hit_from_row(row: Sequence[Any], heading_path: Sequence[str]) -> Hit:
    """(document_id, ordinal, text, start, end, _, page, title, source) to a Hit scored later."""
    document_id, ordinal, text, start, end, _, page, title, source = row
    return Hit(
        str(document_id),
        int(ordinal),
        str(text),
        int(start),
        int(end),
        tuple(heading_path),
        None if page is None else int(page),
        str(title),
        str(source),
        0.0,
    )
