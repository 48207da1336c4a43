"""The OpenAI-compatible embedder against REAL engines serving the tiny GGUF the tests generate: llama.cpp's
own ``llama-server`` (``--embedding --pooling mean``: one vector per text, batched; the binary
build-llama-server.sh compiles, cached) and llama-cpp-python's server (started as the local engine runner
starts it, with ``--embedding true``: per-token vectors, which the embedder mean-pools, one text at a
time). The vectors index and find their own chunk first."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from dockyard_core.knowledge import (
    ChunkSettings,
    DocumentRecord,
    EmbeddingError,
    OpenAIEmbedder,
    chunk_document,
    parse_document,
)
from dockyard_core.knowledge.sqlite import SqliteIndex
from dockyard_localcluster.engines import llama_cpp_command
from dockyard_localcluster.tinymodel import N_EMBD, write_tiny_gguf
from tests.support.engines import embedding_server, serving
from tests.support.knowledge import HARBOUR, started
from tests.support.runners import free_port


class Engine(NamedTuple):
    url: str
    per_token: bool
    """Whether it answers a vector per token (the embedder pools them, one text per request)."""


@pytest.fixture(scope="module", params=["llama-server", "llama-cpp-python"])
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """The engine with embeddings on; its base URL."""
    directory = tmp_path_factory.mktemp("embeddings")
    model = write_tiny_gguf(directory / "tiny.gguf")
    log = directory / "llama.log"
    if request.param == "llama-server":
        with embedding_server(model, log) as url:
            yield Engine(url, per_token=False)
        return
    port = free_port()
    command = llama_cpp_command(["--alias=tiny-embed", "--ctx-size=1024"], model, port, threads=1)
    with serving([*command.argv, "--embedding", "true"], port, log, health=command.health_path) as url:
        yield Engine(url, per_token=True)


def test_batches_of_texts_get_one_pooled_vector_each_in_order(engine: Engine) -> None:
    texts = ["Pilots board at the buoy.", "Berth seven takes tankers.", "Fog closes the channel.", "x", "Fees."]

    async def main() -> None:
        embedder = OpenAIEmbedder(engine.url + "/v1", "tiny-embed", batch_size=2)
        try:
            vectors = await embedder.embed(texts)
            one_by_one = [(await embedder.embed([t]))[0] for t in texts]
        finally:
            await embedder.aclose()
        assert embedder.model == "tiny-embed"
        assert embedder.per_token == engine.per_token
        assert len(vectors) == len(texts)
        assert {len(v) for v in vectors} == {N_EMBD}
        np.testing.assert_allclose(vectors, one_by_one, rtol=1e-4, atol=1e-5)  # the order survives the batches
        assert len({tuple(round(x, 4) for x in v) for v in vectors}) == len(texts)  # different texts differ

    asyncio.run(main())


def test_real_embeddings_index_and_find_a_chunk_by_its_own_text(engine: Engine, tmp_path: Path) -> None:
    async def main() -> None:
        doc = parse_document(HARBOUR, filename="guide.md")
        chunks = chunk_document("guide", doc, ChunkSettings(max_chars=120, overlap_chars=0))
        embedder = OpenAIEmbedder(engine.url, "tiny-embed")
        async with started(SqliteIndex(tmp_path / "kb.sqlite")) as index:
            generation = await index.new_generation("kb", embedding_model=embedder.model, dimensions=N_EMBD)
            await index.put_document("kb", generation.id, DocumentRecord("guide", doc.title), chunks,
                                     await embedder.embed([c.text for c in chunks]))  # fmt: skip
            await index.activate("kb", generation.id)
            for chunk in chunks:
                [question] = await embedder.embed([chunk.text])
                assert (await index.vector_search("kb", question, limit=1))[0].ordinal == chunk.ordinal
            fused = await index.hybrid_search("kb", "anchorage fee", (await embedder.embed(["anchorage fee"]))[0])
            assert "anchorage fee" in fused[0].text
            assert fused[0].keyword_rank == 1
            assert fused[0].vector_rank is not None
        await embedder.aclose()

    asyncio.run(main())


def test_an_endpoint_that_fails_or_is_not_there_is_an_embedding_error(engine: Engine) -> None:
    async def main() -> None:
        wrong_path = OpenAIEmbedder(engine.url + "/nowhere", "tiny-embed")
        with pytest.raises(EmbeddingError, match="answered HTTP 404"):
            await wrong_path.embed(["text"])
        await wrong_path.aclose()
        gone = OpenAIEmbedder(f"http://127.0.0.1:{free_port()}", "tiny-embed", timeout=5)
        with pytest.raises(EmbeddingError, match="could not be reached: ConnectError"):
            await gone.embed(["text"])
        await gone.aclose()
        no_list = OpenAIEmbedder(engine.url, "tiny-embed")
        no_list.url = engine.url + "/v1/models"  # answers 200, with no embeddings
        with pytest.raises(EmbeddingError):
            await no_list.embed(["text"])
        await no_list.aclose()

    asyncio.run(main())
