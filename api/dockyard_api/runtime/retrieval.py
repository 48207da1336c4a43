"""Agents retrieve from knowledge bases (docs/knowledge-bases.md, "Agents retrieve, with sources").

For each knowledge base an agent lists (``spec.agents[].knowledgeBases``, its version pinned in
``knowledgeBaseVersions``), the agent is offered a function ``search_<name>`` (``{"query": string}``,
described by the KnowledgeBase's ``description``). A call embeds the query with the knowledge base's
embedding ModelDeployment (when it has one and the mode is not ``keyword``), searches the active
generation of the index (hybrid: keywords and vectors fused by RRF; or the version's ``retrieval.mode``)
and gives the model the hits as numbered passages. The function is a tool like any other: the turn's
guard screens its arguments and its results (``toolArguments``/``toolResults``).

Every hit a call returns is a source of the turn: :func:`turn_sources` starts the turn's list (a context
variable, so the calls of the turn's task and its children append to it) and the execute answer and the
stream's ``done`` event carry it as ``sources``.
"""

from __future__ import annotations

import asyncio
import logging
from contextvars import ContextVar
from typing import Any

import httpx

from dockyard_api.runtime.tools import Function, ToolResult, function_name
from dockyard_core.errors import DockyardError
from dockyard_core.knowledge.embeddings import OpenAIEmbedder
from dockyard_core.knowledge.index import Hit, KnowledgeIndex
from dockyard_core.knowledge.job import kb_key, open_index

log = logging.getLogger(__name__)

MAX_PASSAGE_CHARS = 1500
MAX_SOURCES = 50
_SOURCES: ContextVar[list[dict[str, Any]] | None] = ContextVar("dockyard_turn_sources", default=None)


def turn_sources() -> list[dict[str, Any]]:
    """Start the current turn's list of sources (filled by the retrieval calls of the turn)."""
    sources: list[dict[str, Any]] = []
    _SOURCES.set(sources)
    return sources


def _record(kb: str, version: str, hits: list[Hit]) -> None:
    sources = _SOURCES.get()
    if sources is None:
        return
    seen = {(s["knowledgeBase"], s["version"], s["document"], s["chunk"]) for s in sources}
    for hit in hits:
        if len(sources) >= MAX_SOURCES:
            return
        key = (kb, version, hit.document_id, hit.ordinal)
        if key not in seen:
            seen.add(key)
            sources.append({"knowledgeBase": kb, "version": version, **hit.as_source()})


def passages(hits: list[Hit]) -> str:
    """The hits as the model reads them: numbered passages with their document and headings."""
    if not hits:
        return "No passage of the knowledge base matches the query."
    out = []
    for number, hit in enumerate(hits, start=1):
        where = " > ".join([hit.document_id, *hit.heading_path[1:]] if hit.heading_path else [hit.document_id])
        page = f" (page {hit.page})" if hit.page else ""
        out.append(f"[{number}] {where}{page}: {hit.text[:MAX_PASSAGE_CHARS]}")
    return "\n\n".join(out)


class KnowledgeSearch:
    """The facade's reader of the knowledge index (opened on first use) and its embedding client."""

    def __init__(self, index_url: str) -> None:
        self.index_url = index_url
        self._index: KnowledgeIndex | None = None
        self._lock = asyncio.Lock()
        self._http = httpx.AsyncClient(timeout=30.0)

    async def index(self) -> KnowledgeIndex:
        async with self._lock:
            if self._index is None:
                index = open_index(self.index_url)
                await index.start()
                self._index = index
            return self._index

    async def aclose(self) -> None:
        if self._index is not None:
            await self._index.close()
        await self._http.aclose()

    def function(self, kb: dict[str, Any], embedding_url: str | None) -> Function:
        """The ``search_<name>`` function of one KnowledgeBase version (as the informer holds it)."""
        meta, spec = kb["metadata"], kb.get("spec") or {}
        name, version = str(spec.get("name", "")), str(spec.get("version", ""))
        retrieval = spec.get("retrieval") or {}
        mode = str(retrieval.get("mode") or "hybrid")
        top_k, candidates = int(retrieval.get("topK") or 5), int(retrieval.get("candidates") or 20)
        key = kb_key(meta["namespace"], meta["name"])
        model = str((spec.get("embedding") or {}).get("modelDeployment") or "")
        description = str(spec.get("description") or f"the {name} knowledge base")

        async def call(arguments: dict[str, Any]) -> ToolResult:
            query = arguments.get("query")
            if not isinstance(query, str) or not query.strip():
                return ToolResult(False, 'error: give a query, e.g. {"query": "berthing fees"}')
            try:
                index = await self.index()
                vector = None
                if model and embedding_url and mode != "keyword":
                    embedder = OpenAIEmbedder(embedding_url, model, client=self._http)
                    vector = (await embedder.embed([query]))[0]
                if mode == "keyword" or vector is None:
                    hits = await index.keyword_search(key, query, limit=top_k)
                elif mode == "vector":
                    hits = await index.vector_search(key, vector, limit=top_k)
                else:
                    hits = await index.hybrid_search(key, query, vector, limit=top_k, candidates=candidates)
            except DockyardError as exc:  # no index yet, the embedding model is away: the model reads why
                return ToolResult(False, f"knowledge base {name} {version} cannot be searched: {exc.message}")
            _record(name, version, hits)
            return ToolResult(True, passages(hits))

        parameters = {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "what to look for, in a few words"}},
            "required": ["query"],
        }
        return Function(function_name(f"search_{name}"), f"Search {description}", parameters, call)
