"""Embedders: texts to vectors, for indexing chunks and for the question of a vector or hybrid search.

:class:`OpenAIEmbedder` calls an OpenAI-compatible ``POST /v1/embeddings`` (a deployed embedding model's
llama.cpp server, vLLM, or a hosted API), in batches. A server that answers one vector per *token*
(llama-cpp-python's for a GGUF without a pooling type, such as the tests' tiny model) gets its token
vectors mean-pooled here, which is what llama.cpp's ``--pooling mean`` would have done; such a server is
then asked one text at a time, since llama-cpp-python 0.3 answers wrong token vectors for every text of a
batch but the first when the model has no pooling (measured in tests/tools/test_knowledge_embeddings.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import httpx
import numpy as np

from dockyard_core.errors import UpstreamError


class EmbeddingError(UpstreamError):
    """The embedding endpoint failed or answered something that is not one vector per text."""

    code = "embedding_failed"


class Embedder(Protocol):
    @property
    def model(self) -> str: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, all of one dimension."""
        ...


class OpenAIEmbedder:
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        batch_size: int = 32,
        timeout: float = 120.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        """``base_url``: the server's root or its ``/v1``; ``model``: the served model name."""
        base = base_url.rstrip("/")
        self.url = f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"
        self._model = model
        self.batch_size = max(1, batch_size)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.AsyncClient(timeout=timeout)
        self._own_client = client is None
        self.per_token = False
        """Whether the server answered per-token vectors: from then on, one text per request."""

    @property
    def model(self) -> str:
        return self._model

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        first = 0
        while first < len(texts):
            size = 1 if self.per_token else self.batch_size
            batch = list(texts[first : first + size])
            answered = await self._batch(batch)
            if self.per_token and len(batch) > 1:
                continue  # found out on this batch: asked again one text at a time
            vectors.extend(answered)
            first += len(batch)
        if vectors and len({len(v) for v in vectors}) != 1:
            raise EmbeddingError(f"{self.url} answered vectors of different dimensions")
        return vectors

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        try:
            response = await self._client.post(
                self.url, json={"model": self._model, "input": texts}, headers=self._headers
            )
        except httpx.HTTPError as exc:
            raise EmbeddingError(f"{self.url} could not be reached: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise EmbeddingError(
                f"{self.url} answered HTTP {response.status_code}", details={"body": response.text[:500]}
            )
        try:
            data = sorted(response.json()["data"], key=lambda item: int(item["index"]))
            self.per_token = self.per_token or any(_per_token(item["embedding"]) for item in data)
            vectors = [_pooled(item["embedding"]) for item in data]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(f"{self.url} answered no embeddings list ({type(exc).__name__})") from exc
        if len(vectors) != len(texts):
            raise EmbeddingError(f"{self.url} answered {len(vectors)} vectors for {len(texts)} texts")
        return vectors


def _per_token(embedding: Any) -> bool:
    return isinstance(embedding, list) and bool(embedding) and isinstance(embedding[0], list)


def _pooled(embedding: Any) -> list[float]:
    """A vector, or the mean of per-token vectors."""
    if not isinstance(embedding, list) or not embedding:
        raise TypeError("an embedding is a non-empty list")
    matrix = np.asarray(embedding, dtype=np.float64)  # ValueError for ragged token vectors
    if matrix.ndim == 2:
        matrix = matrix.mean(axis=0)
    if matrix.ndim != 1:
        raise TypeError("an embedding is a vector or a list of token vectors")
    return [float(x) for x in matrix]
