"""Knowledge bases: keyword recall, indexing rate, retrieval latency and memory on a generated corpus.

The corpus (``--seed``, printed with its sizes) is ``--documents`` documents (1,000), a quarter each
Markdown, HTML, plain text and PDF (PDFs written byte by byte, tests/support/knowledge.py). Each
describes one vessel with a made-up unique name in ``--sections`` sections (10), each a heading and a
paragraph of filler sentences around one fact ("The draught of the Karvolin is 7.4 metres."); filler
sentences name the vessel and other attributes, so the question's words are spread over many chunks and
only the source passage holds all of them (filler words are never attribute words). The questions
(``--questions``, 1,000) ask for one fact each ("What is the draught of the Karvolin?"): its source is the
chunk holding the fact's sentence.

Measured, on the embedded SQLite index (``--backend sqlite``, ``make run``'s) or a PostgreSQL server
started on loopback for the run (``--backend postgresql``):

- indexing: parsing, chunking (maxChars 800, overlap 100, by heading) and writing every document into a
  new generation, without vectors: documents/s and chunks/s (target >= 50 documents/s), then the
  generation activated;
- resident memory of this process before indexing, after the first fifth of the chunks and at the end:
  flat means it grows by at most 16 MiB over the last four fifths (SQLite's page cache and Python's
  allocator warm up in the first fifth);
- keyword recall@5: the share of questions whose source chunk (the one holding the fact's sentence, line
  breaks read as spaces) is among the keyword search's 5 hits (target >= 0.9);
- retrieval: the same documents indexed again into a second generation with a vector per chunk, then
  switched to; p50/p95 of keyword, vector and hybrid (RRF) searches over its chunks (target p95 <= 50 ms
  at 10,000 chunks). Those vectors are random unit vectors of ``--dimensions`` (64: the tiny GGUF's):
  a search's cost depends on the number of vectors and their dimension, not on their values, and
  embedding 10,000 chunks with the tiny model would take most of the run;
- embedding throughput, apart: ``--embed-sample`` chunks (256) sent in batches of 32 to llama.cpp's
  ``llama-server`` (``--embedding --pooling mean``) serving the tiny GGUF the tests generate, one thread
  (``--no-embeddings`` skips it).

    .venv/bin/python -m bench.knowledge [--documents 1000 --questions 1000 --backend sqlite --seed 29]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tests.support.knowledge import make_pdf

from dockyard_core.knowledge import (
    ChunkSettings,
    DocumentRecord,
    KnowledgeIndex,
    OpenAIEmbedder,
    chunk_document,
    parse_document,
)

SETTINGS = ChunkSettings(max_chars=800, overlap_chars=100, split_by="heading")
SYLLABLES = ("ka", "ro", "vi", "len", "mar", "tho", "sul", "en", "dra", "gu", "pel", "zo", "wi", "nak", "tur", "ber",
             "os", "li", "ma", "fen", "quo", "rix", "dal", "sev")  # fmt: skip
ATTRIBUTES = (
    "draught", "gross tonnage", "home port", "launch year", "chief engineer", "hull colour", "berth number",
    "pilot station", "cargo class", "insurance broker", "flag state", "call sign", "ballast capacity",
    "crane count", "service speed", "fuel type", "classification society", "dry dock", "crew size",
    "owner company", "builder yard", "engine maker", "propeller type", "bow thruster", "radar model",
    "lifeboat count", "winter route", "summer route", "tug partner", "agent office", "last survey",
    "next survey", "master mariner", "radio officer", "reefer plugs", "hatch count", "deck cargo",
    "anchor weight", "chain length", "mooring plan",
)  # fmt: skip
FILLER = (
    "harbour", "morning", "weather", "sailors", "gangway", "voyage", "report", "freight", "season", "routine",
    "quay", "logbook", "schedule", "inspection", "weekly", "notes", "convoy", "channel", "tide", "approach",
)  # fmt: skip
assert not {w for a in ATTRIBUTES for w in a.split()} & set(FILLER)  # filler never holds a question's words


@dataclass
class Document:
    id: str
    filename: str
    data: bytes
    facts: dict[str, str]  # attribute -> the fact's sentence


def vessel_names(rng: random.Random, n: int) -> list[str]:
    names: set[str] = set()
    while len(names) < n:
        names.add("".join(rng.choices(SYLLABLES, k=3)).capitalize())
    return sorted(names)


def filler(rng: random.Random, name: str) -> str:
    words = rng.choices(FILLER, k=rng.randint(8, 14))
    if rng.random() < 0.5:  # distractors: the vessel's name, or another attribute, in a sentence without the fact
        words.insert(rng.randrange(len(words)), f"the {name}")
    if rng.random() < 0.5:
        words.insert(rng.randrange(len(words)), rng.choice(ATTRIBUTES))
    return " ".join(words).capitalize() + "."


def value(rng: random.Random) -> str:
    company = f"{''.join(rng.choices(SYLLABLES, k=2))} {rng.choice(['Ltd', 'yard', 'office', 'works'])}"
    return rng.choice([f"{rng.randint(2, 40)}.{rng.randint(0, 9)} metres", str(rng.randint(1950, 2025)), company])


def generate(seed: int, documents: int, sections: int) -> list[Document]:
    rng = random.Random(seed)
    out = []
    for n, name in enumerate(vessel_names(rng, documents)):
        facts: dict[str, str] = {}
        body: list[tuple[str, str]] = []
        for attribute in rng.sample(ATTRIBUTES, sections):
            fact = f"The {attribute} of the {name} is {value(rng)}."
            sentences = [filler(rng, name) for _ in range(rng.randint(3, 5))]
            sentences.insert(rng.randrange(len(sentences) + 1), fact)
            facts[attribute] = fact
            body.append((attribute.capitalize(), " ".join(sentences)))
        title = f"The vessel {name}"
        kind = ("md", "html", "txt", "pdf")[n % 4]
        if kind == "md":
            data = "\n\n".join([f"# {title}", *(f"## {h}\n\n{p}" for h, p in body)]).encode()
        elif kind == "html":
            data = (f"<html><head><title>{title}</title></head><body><h1>{title}</h1>"
                    + "".join(f"<h2>{h}</h2><p>{p}</p>" for h, p in body) + "</body></html>").encode()  # fmt: skip
        elif kind == "txt":
            data = "\n\n".join([title, *(f"{h}\n\n{p}" for h, p in body)]).encode()
        else:
            data = make_pdf([[h, *wrap(p, 90)] for h, p in body], title=title)
        out.append(Document(f"vessel-{n:04d}", f"{name.lower()}.{kind}", data, facts))
    return out


def wrap(text: str, width: int) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return [*lines, line]


def questions(seed: int, docs: list[Document], n: int) -> list[tuple[str, Document, str]]:
    rng = random.Random(seed + 1)
    forms = ("What is the {a} of the {v}?", "Which {a} does the {v} have?", "Tell me the {a} of {v}.")
    asked = []
    for _ in range(n):
        doc = rng.choice(docs)
        attribute = rng.choice(sorted(doc.facts))
        vessel = doc.facts[attribute].split(" of the ", 1)[1].split(" is ", 1)[0]
        asked.append((rng.choice(forms).format(a=attribute, v=vessel), doc, doc.facts[attribute]))
    return asked


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


@contextlib.asynccontextmanager
async def backend(kind: str, directory: Path) -> AsyncIterator[KnowledgeIndex]:
    index: KnowledgeIndex
    with contextlib.ExitStack() as stack:
        if kind == "sqlite":
            from dockyard_core.knowledge.sqlite import SqliteIndex

            index = SqliteIndex(directory / "knowledge.sqlite")
        else:
            from tests.support.postgres import postgres_server

            from dockyard_core.knowledge.postgres import PostgresIndex

            server = stack.enter_context(postgres_server())
            index = PostgresIndex(server.url(await server.create_database("bench")))
        await index.start()
        try:
            yield index
        finally:
            await index.close()


async def index_all(
    index: KnowledgeIndex,
    docs: list[Document],
    generation: int,
    dimensions: int | None,
    rng: np.random.Generator,
    memory: list[tuple[str, float]] | None = None,
) -> tuple[float, int]:
    """Parse, chunk and write every document; (seconds without making the vectors, chunks)."""
    chunks_total, seconds, fifth = 0, 0.0, len(docs) // 5
    for n, doc in enumerate(docs, start=1):
        started = time.perf_counter()
        parsed = parse_document(doc.data, filename=doc.filename)
        chunks = chunk_document(doc.id, parsed, SETTINGS)
        record = DocumentRecord(doc.id, parsed.title, doc.filename, parsed.media_type, len(doc.data))
        made = time.perf_counter()
        vectors = rng.standard_normal((len(chunks), dimensions)).tolist() if dimensions else None
        written = time.perf_counter()
        await index.put_document("bench", generation, record, chunks, vectors)
        seconds += (made - started) + (time.perf_counter() - written)
        chunks_total += len(chunks)
        if memory is not None and n == fifth:
            memory.append((f"after {n} documents ({chunks_total} chunks)", rss_mib()))
    return seconds, chunks_total


async def embedding_throughput(directory: Path, texts: list[str]) -> str:
    from tests.support.engines import embedding_server

    from dockyard_localcluster.tinymodel import write_tiny_gguf

    model = write_tiny_gguf(directory / "tiny.gguf")
    with embedding_server(model, directory / "llama-server.log", ctx_size=4096, batch_size=4096) as url:
        embedder = OpenAIEmbedder(url, "tiny-embed", batch_size=32)
        try:
            await embedder.embed(texts[:32])  # warm-up
            started = time.perf_counter()
            vectors = await embedder.embed(texts)
            seconds = time.perf_counter() - started
        finally:
            await embedder.aclose()
    chars = sum(len(t) for t in texts)
    return (f"{len(texts) / seconds:.1f} chunks/s ({chars / seconds / 1000:.1f} k characters/s; {len(texts)} chunks "
            f"of {chars // len(texts)} characters on average, {len(vectors[0])} dimensions; llama.cpp llama-server, "
            "tiny GGUF, 1 thread, batches of 32)")  # fmt: skip


async def run(args: argparse.Namespace) -> None:
    docs = generate(args.seed, args.documents, args.sections)
    asked = questions(args.seed, docs, args.questions)
    by_kind: dict[str, int] = {}
    for doc in docs:
        by_kind[doc.filename.rsplit(".", 1)[1]] = by_kind.get(doc.filename.rsplit(".", 1)[1], 0) + len(doc.data)
    print(f"seed {args.seed}: {len(docs)} documents of {args.sections} sections, "
          f"{sum(by_kind.values()) / 1e6:.2f} MB ({', '.join(f'{k} {v / 1e6:.2f} MB' for k, v in by_kind.items())}); "
          f"{len(asked)} questions; chunking {SETTINGS}; backend {args.backend}")  # fmt: skip
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory(prefix="dockyard-bench-kb-") as tmp:
        directory = Path(tmp)
        async with backend(args.backend, directory) as index:
            memory = [("before indexing", rss_mib())]
            keywords = await index.new_generation("bench")
            seconds, chunks = await index_all(index, docs, keywords.id, None, rng, memory)
            memory.append((f"after {len(docs)} documents ({chunks} chunks)", rss_mib()))
            await index.activate("bench", keywords.id)
            rate = len(docs) / seconds
            print(f"indexing without vectors: {rate:.1f} documents/s, {chunks / seconds:.0f} chunks/s "
                  f"({chunks} chunks in {seconds:.1f} s: parse, chunk, write)")  # fmt: skip
            for label, mib in memory:
                print(f"  resident memory {label:40} {mib:7.1f} MiB")
            growth = memory[-1][1] - memory[1][1]

            found = 0
            for question, doc, fact in asked:
                hits = await index.keyword_search("bench", question, limit=5)
                found += any(h.document_id == doc.id and fact in " ".join(h.text.split()) for h in hits)
            recall = found / len(asked)
            print(f"keyword recall@5: {recall:.3f} ({found} of {len(asked)} questions found their source chunk)")

            vectors = await index.new_generation("bench", embedding_model="random", dimensions=args.dimensions)
            seconds, chunks = await index_all(index, docs, vectors.id, args.dimensions, rng)
            print(f"indexing with {args.dimensions}-dimension vectors (made apart, not counted): "
                  f"{len(docs) / seconds:.1f} documents/s")  # fmt: skip
            await index.activate("bench", vectors.id)
            await index.drop_generation("bench", keywords.id)
            stats = await index.stats("bench")
            latencies: dict[str, list[float]] = {"keyword": [], "vector": [], "hybrid": []}
            for question, _, _ in asked:
                query = rng.standard_normal(args.dimensions).tolist()
                for kind in latencies:
                    started = time.perf_counter()
                    if kind == "keyword":
                        await index.keyword_search("bench", question, limit=5)
                    elif kind == "vector":
                        await index.vector_search("bench", query, limit=5)
                    else:
                        await index.hybrid_search("bench", question, query, limit=5)
                    latencies[kind].append((time.perf_counter() - started) * 1000)
            print(f"retrieval over {stats.chunks} chunks ({stats.documents} documents, {stats.bytes / 1e6:.2f} MB; "
                  f"random {args.dimensions}-dimension unit vectors), {len(asked)} searches each:")  # fmt: skip
            for kind, values in latencies.items():
                print(f"  {kind:8} p50 {percentile(values, 50):6.2f} ms  p95 {percentile(values, 95):6.2f} ms")
            p95 = max(percentile(values, 95) for values in latencies.values())

        embedding = "skipped (--no-embeddings)"
        if not args.no_embeddings:
            sample = [
                c.text
                for d in docs[: args.embed_sample]
                for c in chunk_document(d.id, parse_document(d.data, filename=d.filename), SETTINGS)
            ][: args.embed_sample]
            embedding = await embedding_throughput(directory, sample)
        print(f"embedding throughput: {embedding}")

    print(f"summary ({len(docs)} documents, {stats.chunks} chunks, {args.backend}): keyword recall@5 {recall:.2f} "
          f"(>= 0.9: {met(recall >= 0.9)}), indexing {rate:.0f} documents/s without embedding "
          f"(>= 50: {met(rate >= 50)}), retrieval p95 {p95:.1f} ms, the slowest of keyword, vector and hybrid "
          f"(<= 50: {met(p95 <= 50)}), resident memory {growth:+.1f} MiB over the last four fifths of indexing "
          f"(flat, <= 16: {met(growth <= 16)})")  # fmt: skip


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--sections", type=int, default=10)
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--dimensions", type=int, default=64)
    parser.add_argument("--embed-sample", type=int, default=256)
    parser.add_argument("--no-embeddings", action="store_true")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
