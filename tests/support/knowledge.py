"""Test support for knowledge bases: PDFs written byte by byte (no PDF library writes text, so the parser's
tests read files made independently of it), and the contract every knowledge index keeps, run on the
embedded SQLite index (tests/unit/test_knowledge_index.py) and on a real PostgreSQL server
(tests/tools/test_knowledge_postgres.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from dockyard_core.errors import ConflictError, InvalidError, NotFoundError
from dockyard_core.knowledge import ChunkSettings, DocumentRecord, KnowledgeIndex, chunk_document, parse_document


def local_knowledge_runs(state: Path) -> dict[str, str]:
    """The operator's variables for indexing runs as host processes (``knowledge_runs: local``, checked every
    second) on the model store of a facade started by ``run_local_runtime(state, ...)``."""
    return {
        "DOCKYARD_OPERATOR_MODEL_STORE": str(state / "model-store"),
        "DOCKYARD_OPERATOR_KNOWLEDGE_RUNS": "local",
        "DOCKYARD_OPERATOR_KNOWLEDGE_INTERVAL_SECONDS": "1",
    }


def make_pdf(pages: Sequence[Sequence[str]], title: str = "") -> bytes:
    """A PDF 1.4 file: each page its lines in Helvetica, a cross-reference table, the title in /Info."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog, tree = add(b""), add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    kids = []
    for lines in pages:
        escaped = (line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in lines)
        stream = "\n".join(["BT /F1 12 Tf 72 720 Td 14 TL", *(f"({line}) Tj T*" for line in escaped), "ET"]).encode()
        content = add(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        kids.append(add(f"<< /Type /Page /Parent {tree} 0 R /MediaBox [0 0 612 792] /Resources << /Font << "
                        f"/F1 {font} 0 R >> >> /Contents {content} 0 R >>".encode()))  # fmt: skip
    objects[catalog - 1] = f"<< /Type /Catalog /Pages {tree} 0 R >>".encode()
    objects[tree - 1] = f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {len(kids)} >>".encode()
    info = add(f"<< /Title ({title}) >>".encode()) if title else 0
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    trailer = f"<< /Size {len(objects) + 1} /Root {catalog} 0 R" + (f" /Info {info} 0 R" if info else "") + " >>"
    out += f"trailer\n{trailer}\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


HARBOUR = b"""# Harbour guide

Pilots board every ship above 80 metres at the outer buoy.

## Berths

Berth seven takes tankers; its fenders were replaced in March.

## Fees

The anchorage fee is 120 crowns a day, paid to the harbour master.
"""
WEATHER = b"""<html><head><title>Weather rules</title></head><body>
<h1>Weather</h1><p>Above force eight winds the harbour closes to all traffic.</p>
<h2>Fog</h2><p>In fog, ships keep to the western channel and sound their horns.</p></body></html>"""


async def index_document(index: KnowledgeIndex, kb: str, generation: int | None, doc_id: str, data: bytes,
                         filename: str, vectors: bool = False) -> int:  # fmt: skip
    parsed = parse_document(data, filename=filename)
    chunks = chunk_document(doc_id, parsed, ChunkSettings(max_chars=200, overlap_chars=20))
    record = DocumentRecord(doc_id, parsed.title, filename, parsed.media_type, len(data))
    embedded = [toy_vector(c.text) for c in chunks] if vectors else None
    await index.put_document(kb, generation, record, chunks, embedded)
    return len(chunks)


def toy_vector(text: str) -> list[float]:
    """A deterministic 8-dimensional bag-of-letters vector: similar texts, similar vectors (a stand-in for an
    embedding model in the index's own tests; the real embedder is tested against llama.cpp)."""
    vector = [0.0] * 8
    for word in text.lower().split():
        vector[sum(map(ord, word)) % 8] += 1.0
    return vector


async def contract(index: KnowledgeIndex) -> None:
    """What every backend must do, in one scenario: build, search, replace, delete, re-index and switch
    while searching, drop."""
    kb = "harbour"
    with pytest.raises(NotFoundError, match="has no active index"):
        await index.keyword_search(kb, "pilots")
    first = await index.new_generation(kb, embedding_model="toy", dimensions=8)
    assert first.state == "building"
    chunks = await index_document(index, kb, first.id, "guide", HARBOUR, "guide.md", vectors=True)
    await index_document(index, kb, first.id, "weather", WEATHER, "weather.html", vectors=True)
    active = await index.activate(kb, first.id)
    assert active.state == "active"

    hits = await index.keyword_search(kb, "Who pays the anchorage fee?", limit=3)
    assert hits[0].document_id == "guide"
    assert "120 crowns" in hits[0].text
    assert hits[0].heading_path == ("Harbour guide", "Fees")
    assert hits[0].title == "Harbour guide"
    assert hits[0].source == "guide.md"
    parsed = parse_document(HARBOUR, filename="guide.md")
    assert parsed.text[hits[0].start : hits[0].end] == hits[0].text
    assert (await index.keyword_search(kb, "fog western channel"))[0].heading_path == ("Weather", "Fog")
    assert await index.keyword_search(kb, "!!! ???") == []  # no searchable word, no syntax error
    assert await index.keyword_search(kb, 'fee" OR x*') != []  # the backends' query syntax is not passed on
    await index.keyword_search(kb, "what is it")  # only common words: searched as they are, no error
    with pytest.raises(InvalidError, match="limit must be between 1 and 200"):
        await index.keyword_search(kb, "fee", limit=0)
    with pytest.raises(InvalidError, match="candidates must be between 1 and 200"):
        await index.hybrid_search(kb, "fee", candidates=1000)

    nearest = await index.vector_search(kb, toy_vector("ships keep to the western channel and sound their horns"))
    assert nearest[0].document_id == "weather"
    assert nearest[0].vector_rank == 1
    fused = await index.hybrid_search(kb, "fog channel horns", toy_vector("fog channel horns"), limit=2)
    assert fused[0].heading_path == ("Weather", "Fog")
    assert fused[0].keyword_rank is not None
    assert fused[0].vector_rank is not None
    assert fused[0].score >= fused[-1].score
    source = fused[0].as_source()
    assert source["headingPath"] == ["Weather", "Fog"]
    assert source["document"] == "weather"
    assert source["source"] == "weather.html"
    assert set(source) == {"document", "title", "source", "chunk", "headingPath", "page", "start", "end", "score"}

    stats = await index.stats(kb)
    assert (stats.documents, stats.bytes) == (2, len(HARBOUR) + len(WEATHER))
    assert stats.chunks >= chunks + 1
    assert stats.last_indexed is not None

    # replace: the document's old chunks are gone in the same transaction
    await index_document(index, kb, None, "guide", b"# Harbour guide\n\nThe anchorage is free now.", "guide.md", True)
    hits = await index.keyword_search(kb, "anchorage")
    assert [h.text for h in hits] == ["Harbour guide\n\nThe anchorage is free now."]
    assert (await index.stats(kb)).documents == 2
    # delete: gone from every search, vectors included (the cached matrix is reloaded)
    assert await index.delete_document(kb, None, "weather")
    assert not await index.delete_document(kb, None, "weather")
    assert await index.keyword_search(kb, "fog") == []
    assert all(h.document_id != "weather" for h in await index.vector_search(kb, toy_vector("fog horns"), limit=10))
    assert [d.document_id for d in await index.documents(kb)] == ["guide"]

    # re-index: a new generation is built while searches read the active one, then switched at once
    second = await index.new_generation(kb, embedding_model="toy", dimensions=8)
    seen: list[str] = []
    stop = asyncio.Event()

    async def searcher() -> None:
        while not stop.is_set():
            found = await index.keyword_search(kb, "anchorage harbour", limit=1)
            seen.append(found[0].text if found else "")
            await asyncio.sleep(0)

    async def searched(more: int) -> None:
        """Until ``more`` searches have ended from now: the last of two began after now (under a loaded CI a
        fixed 50 ms had seen no search end at all)."""
        target = len(seen) + more
        async with asyncio.timeout(30):
            while len(seen) < target:
                await asyncio.sleep(0.005)

    task = asyncio.create_task(searcher())
    await index_document(index, kb, second.id, "guide", HARBOUR, "guide.md", vectors=True)
    await searched(2)
    assert set(seen) == {"Harbour guide\n\nThe anchorage is free now."}, seen  # the building one is not read
    await index.activate(kb, second.id)
    await searched(2)
    stop.set()
    await task
    assert "" not in seen, seen  # never an empty or missing index in between
    assert "anchorage fee is 120 crowns" in seen[-1], seen
    states = {g.id: g.state for g in await index.generations(kb)}
    assert states == {first.id: "retired", second.id: "active"}
    with pytest.raises(ConflictError, match="active index"):
        await index.drop_generation(kb, second.id)
    await index.drop_generation(kb, first.id)
    assert [g.id for g in await index.generations(kb)] == [second.id]
    with pytest.raises(NotFoundError):
        await index.keyword_search(kb, "fee", generation=first.id)

    # bad input names what is wrong; other knowledge bases are apart
    one = chunk_document("x", parse_document(b"One chunk.", filename="x.txt"))
    with pytest.raises(InvalidError, match="8 dimensions"):
        await index.put_document(kb, None, DocumentRecord("x"), one, [[1.0, 2.0]])
    with pytest.raises(InvalidError, match="one vector per chunk"):
        await index.put_document(kb, None, DocumentRecord("x"), one, [])
    with pytest.raises(InvalidError, match="belong to the document"):
        await index.put_document(kb, None, DocumentRecord("y"), one)
    assert "x" not in {d.document_id for d in await index.documents(kb)}  # nothing half written
    with pytest.raises(NotFoundError):
        await index.keyword_search("other", "fee")
    plain = await index.new_generation("other")
    await index_document(index, "other", plain.id, "note", b"Tugs wait at the outer buoy.", "note.txt")
    await index.activate("other", plain.id)
    assert [h.document_id for h in await index.hybrid_search("other", "buoy", toy_vector("buoy"))] == ["note"]
    assert all(h.document_id != "note" for h in await index.keyword_search(kb, "tugs buoy"))


@contextlib.asynccontextmanager
async def started(index: KnowledgeIndex) -> AsyncIterator[KnowledgeIndex]:
    await index.start()
    try:
        yield index
    finally:
        await index.close()
