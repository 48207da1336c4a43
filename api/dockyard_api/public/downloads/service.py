"""Model downloads for the storage initializer of model pods (docs/model-store.md, 'Download tokens', 'The
storage initializer'; not part of the public API of docs/public-api.md): who may download (a download token,
:mod:`dockyard_core.downloadtokens`, for exactly one namespace and model) and what there is (the model's
manifest in the model store).
"""

from __future__ import annotations

import anyio

from dockyard_api.public.schemas import ModelFile, ModelFilesManifest
from dockyard_core import downloadtokens
from dockyard_core.errors import NotFoundError, UnauthenticatedError
from dockyard_core.modelmanifest import ModelFile as StoredFile
from dockyard_core.modelmanifest import ModelManifest
from dockyard_core.modelstore import ModelStore


def authorize(key: bytes, authorization: str | None, namespace: str, model_id: str) -> None:
    """401 unless ``authorization`` is ``Bearer <download token>`` for this namespace and model, unexpired."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthenticatedError("a download token is required (Authorization: Bearer <token>)")
    try:
        downloadtokens.verify(key, token, namespace, model_id)
    except downloadtokens.InvalidToken as exc:
        raise UnauthenticatedError(f"the download token is refused: {exc}") from exc


async def stored_manifest(store: ModelStore, namespace: str, model_id: str) -> ModelManifest:
    """What the model's import job recorded; 404 when it has no finished import."""
    manifest = await anyio.to_thread.run_sync(store.model_manifest, namespace, model_id)
    if manifest is None:
        raise NotFoundError(f"model {namespace}/{model_id} has no finished import in the model store")
    return manifest


async def manifest(store: ModelStore, namespace: str, model_id: str) -> ModelFilesManifest:
    """The model's files with size and SHA-256 (the manifest endpoint's answer)."""
    found = await stored_manifest(store, namespace, model_id)
    return ModelFilesManifest(
        namespace=namespace,
        model_id=model_id,
        dock_status_id=found.dock_status_id,
        size_bytes=found.size_bytes,
        sha256=found.sha256,
        files=[ModelFile(path=f.path, size=f.size, sha256=f.sha256) for f in found.files],
        format=found.format,
        file=found.weights_file,
        total_bytes=found.total_bytes,
    )


async def stored_file(store: ModelStore, namespace: str, model_id: str, path: str) -> StoredFile:
    """One file of the model's manifest; 404 when the model has no such file."""
    entry = (await stored_manifest(store, namespace, model_id)).file(path)
    if entry is None:
        raise NotFoundError(f"model {namespace}/{model_id} has no file {path[:200]!r}")
    return entry
