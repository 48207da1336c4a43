"""The indexing job's work (dockyard_core.knowledge.job.index_knowledge_base) on the embedded SQLite index:
documents indexed one by one, a bad one reported with its reason while the others are searchable,
incremental runs (added, changed and removed documents), a rebuild that switches to a new generation
and drops the older ones, and the embedding model's vectors in a hybrid search."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dockyard_core.knowledge.job import document_path, index_knowledge_base, indexed_spec, kb_key, open_index
from dockyard_core.knowledge.sqlite import SqliteIndex

GUIDE = (
    b"# Harbour guide\n\n## Fees\n\nBerthing costs 40 euros per metre and day.\n\n"
    b"## Pilots\n\nA pilot boards at buoy 3.\n"
)
RULES = b"Anchoring is forbidden in the channel. Speed limit inside the harbour is 5 knots.\n"


class HashEmbedder:
    """A deterministic embedder (bag of hashed words, 16 dimensions): vectors without a model server."""

    model = "hash-16"

    def __init__(self) -> None:
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        out = []
        for text in texts:
            vector = [0.0] * 16
            for word in text.lower().split():
                vector[hashlib.sha256(word.encode()).digest()[0] % 16] += 1.0
            vector[0] += 0.001
            out.append(vector)
        return out


def _kb(docs: list[tuple[str, str]], indexed: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "shop", "name": "harbour-1.0.0"},
        "spec": {
            "name": "harbour",
            "version": "1.0.0",
            "chunking": {"maxChars": 200, "overlapChars": 20},
            "documents": [{"name": n, "fileId": f} for n, f in docs],
        },
        "status": {"indexed": indexed or []},
    }


def _store(tmp_path: Path, files: dict[str, bytes]) -> Path:
    for file_id, data in files.items():
        path = document_path(tmp_path / "files", "shop", file_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return tmp_path / "files"


async def _run(tmp_path: Path, kb: dict[str, Any], files: Path, *, rebuild: bool = False) -> dict[str, Any]:
    index = open_index(f"sqlite:///{tmp_path / 'kb.sqlite'}")
    assert isinstance(index, SqliteIndex)
    await index.start()
    try:
        return await index_knowledge_base(
            kb, index, lambda f: document_path(files, "shop", f).read_bytes(), HashEmbedder(), rebuild=rebuild
        )
    finally:
        await index.close()


async def _search(tmp_path: Path, query: str) -> list[str]:
    index = SqliteIndex(tmp_path / "kb.sqlite")
    await index.start()
    try:
        vector = (await HashEmbedder().embed([query]))[0]
        return [h.document_id for h in await index.hybrid_search(kb_key("shop", "harbour-1.0.0"), query, vector)]
    finally:
        await index.close()


def test_a_bad_document_is_reported_and_the_others_are_indexed(tmp_path: Path) -> None:
    files = _store(tmp_path, {"g1": GUIDE, "r1": RULES, "b1": b"\x00\x01binary\x00"})
    kb = _kb([("guide.md", "g1"), ("rules.txt", "r1"), ("broken.txt", "b1"), ("lost.md", "nothing")])
    status = asyncio.run(_run(tmp_path, kb, files))
    assert status["phase"] == "Ready"
    assert status["documents"] == 2
    assert status["chunks"] >= 3
    assert status["bytes"] == len(GUIDE) + len(RULES)
    assert status["errorCount"] == 2
    reasons = {e["document"]: e["reason"] for e in status["errors"]}
    assert "binary" in reasons["broken.txt"] or "NUL" in reasons["broken.txt"], reasons
    assert "nothing is not in the store" in reasons["lost.md"]
    assert {d["name"] for d in status["indexed"]} == {"guide.md", "rules.txt"}
    ready, idle = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Indexed")
    assert ready["message"].endswith(
        "2 document(s), " + f"{status['chunks']} chunks; 2 could not be indexed (status.errors)"
    )
    assert (idle["type"], idle["status"]) == ("Indexing", "False")
    assert asyncio.run(_search(tmp_path, "pilot buoy"))[0] == "guide.md"


def test_incremental_runs_add_replace_and_remove_documents_in_the_active_generation(tmp_path: Path) -> None:
    files = _store(tmp_path, {"g1": GUIDE, "r1": RULES, "r2": b"Speed limit changed: 3 knots everywhere.\n"})
    first = asyncio.run(_run(tmp_path, _kb([("guide.md", "g1")]), files))
    second = asyncio.run(_run(tmp_path, _kb([("guide.md", "g1"), ("rules.txt", "r1")], first["indexed"]), files))
    assert second["activeGeneration"] == first["activeGeneration"]  # incremental: same generation
    assert second["documents"] == 2
    assert "rules.txt" in asyncio.run(_search(tmp_path, "anchoring channel"))
    # rules.txt re-imported as another file: replaced; guide.md deleted: gone from searches
    third = asyncio.run(_run(tmp_path, _kb([("rules.txt", "r2")], second["indexed"]), files))
    assert third["documents"] == 1
    assert third["indexed"] == [{"name": "rules.txt", "fileId": "r2", "chunks": 1}]
    assert "guide.md" not in asyncio.run(_search(tmp_path, "pilot buoy berthing"))
    assert asyncio.run(_search(tmp_path, "speed knots")) == ["rules.txt"]


def test_a_rebuild_switches_to_a_new_generation_and_drops_the_older_ones(tmp_path: Path) -> None:
    files = _store(tmp_path, {"g1": GUIDE})
    kb = _kb([("guide.md", "g1")])
    generations = [asyncio.run(_run(tmp_path, kb, files, rebuild=True))["activeGeneration"] for _ in range(3)]
    assert generations[0] < generations[1] < generations[2]

    async def kept() -> list[tuple[int, str]]:
        index = SqliteIndex(tmp_path / "kb.sqlite")
        await index.start()
        try:
            return [(g.id, g.state) for g in await index.generations(kb_key("shop", "harbour-1.0.0"))]
        finally:
            await index.close()

    # the active one and the one it replaced (to switch back to); older ones dropped
    assert sorted(asyncio.run(kept())) == [(generations[1], "retired"), (generations[2], "active")]


def test_a_run_records_the_generation_it_read_with_the_request_it_was_started_for() -> None:
    """The operator started the run for generation 2; a second document made it 3 before the run read the object:
    the run indexed generation 3 and says so, so the operator starts no second run for it."""
    kb = {"metadata": {"generation": 3}}
    assert indexed_spec(kb, "2/") == "3/"
    assert indexed_spec(kb, "2/reindex-7") == "3/reindex-7"
    assert indexed_spec({"metadata": {"generation": 10}}, "9/" + "r" * 70) == ("10/" + "r" * 70)[:64]
    assert indexed_spec(kb, "") == ""
