"""The indexing run and the runtime's search function on a REAL PostgreSQL server (the backend for a cluster:
Jobs, the operator and every facade replica reach it): documents indexed with vectors, the agent's
``search_<name>`` answering the whole time a rebuild builds a new generation and switches to it (never an
empty or failed search), a deleted document gone after the next run."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dockyard_api.runtime.retrieval import KnowledgeSearch, turn_sources
from dockyard_core.knowledge.job import document_path, index_knowledge_base, open_index
from tests.support.postgres import Postgres, postgres_server
from tests.unit.test_knowledge_job import GUIDE, RULES, HashEmbedder


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    with postgres_server() as server:
        yield server


def _kb(docs: list[tuple[str, str]], indexed: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "shop", "name": "harbour-1.0.0"},
        "spec": {"name": "harbour", "version": "1.0.0", "description": "harbour rules",
                 "retrieval": {"mode": "hybrid", "topK": 3}, "embedding": {"modelDeployment": "hash"},
                 "documents": [{"name": n, "fileId": f} for n, f in docs]},
        "status": {"indexed": indexed or []},
    }  # fmt: skip


def test_a_rebuild_on_postgres_never_interrupts_the_agents_search(pg: Postgres, tmp_path: Path) -> None:
    files = tmp_path / "files"
    for file_id, data in {"g": GUIDE, "r": RULES}.items():
        document_path(files, "shop", file_id).parent.mkdir(parents=True, exist_ok=True)
        document_path(files, "shop", file_id).write_bytes(data)

    def read(file_id: str) -> bytes:
        return document_path(files, "shop", file_id).read_bytes()

    async def run(url: str, kb: dict[str, Any], rebuild: bool = False) -> dict[str, Any]:
        index = open_index(url)
        await index.start()
        try:
            return await index_knowledge_base(kb, index, read, HashEmbedder(), rebuild=rebuild)
        finally:
            await index.close()

    async def main() -> None:
        url = pg.url(await pg.create_database())
        kb = _kb([("guide.md", "g"), ("rules.txt", "r")])
        first = await run(url, kb)
        assert (first["documents"], first["errorCount"]) == (2, 0)
        search = KnowledgeSearch(url)
        try:
            function = search.function(kb, None)  # no embedding endpoint: keywords, as while the model is away
            answers: list[str] = []
            stop = asyncio.Event()

            async def agent() -> None:
                while not stop.is_set():
                    result = await function.call({"query": "pilot buoy"})
                    assert result.ok, result.content
                    answers.append(result.content)
                    await asyncio.sleep(0)

            searching = asyncio.create_task(agent())
            rebuilt = [await run(url, {**kb, "status": {"indexed": first["indexed"]}}, rebuild=True) for _ in range(3)]
            stop.set()
            await searching
            assert rebuilt[-1]["activeGeneration"] > first["activeGeneration"]
            assert len(answers) > 3
            assert all(a.startswith("[1] guide.md > Pilots") for a in answers), {a[:60] for a in answers}

            sources = turn_sources()
            await function.call({"query": "anchoring channel"})
            assert [s["document"] for s in sources][:1] == ["rules.txt"]

            kept = await run(url, {**_kb([("guide.md", "g")]), "status": {"indexed": rebuilt[-1]["indexed"]}})
            assert kept["documents"] == 1
            gone = await function.call({"query": "anchoring channel"})
            assert "rules.txt" not in gone.content
        finally:
            await search.aclose()

    asyncio.run(main())
