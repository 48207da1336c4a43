"""The runtime's knowledge-base search function (dockyard_api.runtime.retrieval) over a real SQLite index that
the indexing job built: numbered passages for the model, the turn's sources recorded once each, a
deleted document gone from the next search, and the reasons the model reads when it cannot search."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from dockyard_api.runtime.retrieval import KnowledgeSearch, passages, turn_sources
from dockyard_core.knowledge.job import document_path, index_knowledge_base, open_index

GUIDE = (
    b"# Harbour guide\n\n## Fees\n\nBerthing costs 40 euros per metre and day.\n\n"
    b"## Pilots\n\nA pilot boards at buoy 3.\n"
)
RULES = b"Anchoring is forbidden in the channel.\n"


def _kb(docs: list[tuple[str, str]], **retrieval: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "shop", "name": "harbour-1.0.0"},
        "spec": {"name": "harbour", "version": "1.0.0", "description": "the harbour's rules",
                 "retrieval": retrieval, "documents": [{"name": n, "fileId": f} for n, f in docs]},
        "status": {},
    }  # fmt: skip


async def _index(tmp_path: Path, kb: dict[str, Any]) -> str:
    files = tmp_path / "files"
    for file_id, data in {"g": GUIDE, "r": RULES}.items():
        document_path(files, "shop", file_id).parent.mkdir(parents=True, exist_ok=True)
        document_path(files, "shop", file_id).write_bytes(data)
    url = f"sqlite:///{tmp_path / 'kb.sqlite'}"
    index = open_index(url)
    await index.start()
    try:
        await index_knowledge_base(kb, index, lambda f: document_path(files, "shop", f).read_bytes(), None)
    finally:
        await index.close()
    return url


def test_the_search_function_answers_numbered_passages_and_records_the_sources(tmp_path: Path) -> None:
    async def scenario() -> None:
        kb = _kb([("guide.md", "g"), ("rules.txt", "r")], mode="keyword", topK=3)
        search = KnowledgeSearch(await _index(tmp_path, kb))
        try:
            function = search.function(kb, None)
            assert function.name == "search_harbour"
            assert "the harbour's rules" in function.description
            assert function.parameters["required"] == ["query"]
            sources = turn_sources()
            result = await function.call({"query": "pilot buoy"})
            assert result.ok
            assert result.content.startswith("[1] guide.md > Pilots: Pilots\n\nA pilot boards at buoy 3.")
            again = await function.call({"query": "pilot boards"})  # the same chunk: one source
            assert again.ok
            assert [(s["knowledgeBase"], s["version"], s["document"], s["headingPath"]) for s in sources] == [
                ("harbour", "1.0.0", "guide.md", ["Harbour guide", "Pilots"])
            ]
            assert set(sources[0]) >= {"chunk", "start", "end", "score", "title", "page", "source"}
            bad = await function.call({"query": ""})
            assert not bad.ok
        finally:
            await search.aclose()

    asyncio.run(scenario())


def test_a_deleted_document_is_gone_from_the_next_search(tmp_path: Path) -> None:
    async def scenario() -> None:
        kb = _kb([("guide.md", "g"), ("rules.txt", "r")], mode="keyword")
        url = await _index(tmp_path, kb)
        search = KnowledgeSearch(url)
        try:
            function = search.function(kb, None)
            assert "rules.txt" in (await function.call({"query": "anchoring channel"})).content
            await _index(
                tmp_path, {**_kb([("guide.md", "g")]), "status": {"indexed": [{"name": "guide.md", "fileId": "g"}]}}
            )
            after = await function.call({"query": "anchoring channel"})
            assert "rules.txt" not in after.content
            assert after.content == passages([])
        finally:
            await search.aclose()

    asyncio.run(scenario())


def test_a_knowledge_base_without_an_index_is_a_result_the_model_reads(tmp_path: Path) -> None:
    async def scenario() -> None:
        search = KnowledgeSearch(f"sqlite:///{tmp_path / 'empty.sqlite'}")
        try:
            result = await search.function(_kb([]), None).call({"query": "fees"})
            assert not result.ok
            assert "knowledge base harbour 1.0.0 cannot be searched" in result.content
        finally:
            await search.aclose()

    asyncio.run(scenario())
