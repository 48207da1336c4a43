"""Model downloads for the storage initializer of model pods (not part of the public API of docs/public-api.md).

``GET /api/models/{namespace}/{modelId}/manifest`` lists the model's files with size and SHA-256;
``GET /api/models/{namespace}/{modelId}/files/{path}`` serves one of them, with HTTP ``Range`` requests
(206 + ``Content-Range``; 416 past the end) so that a download resumes where it stopped. Both need
``Authorization: Bearer <download token>`` (see :mod:`dockyard_core.downloadtokens`): a short-lived token
for exactly that namespace and model, which the operator mints into the pod's Secret. The bytes come from
the model store's backend (a file, or ranged GETs of an S3 object), streamed, never held whole.
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import iterate_in_threadpool

from dockyard_api.deps import DownloadTokenKey, Imports, ModelId, NamespaceParam
from dockyard_api.errors import error_body
from dockyard_core import downloadtokens
from dockyard_core.errors import DockyardError, NotFoundError, UnauthenticatedError
from dockyard_core.modelmanifest import ModelManifest
from dockyard_core.modelstore import ModelStore
from dockyard_core.storeerrors import parse_range

router = APIRouter(prefix="/api/models", tags=["model downloads"])

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "no download token, or a forged, expired or other model's one"},
    404: {"description": "the model has no finished import, or no such file"},
    416: {"description": "the range starts past the end of the file"},
    502: {"description": "the object store failed or could not be reached"},
}


def _authorize(key: bytes, authorization: str | None, namespace: str, model_id: str) -> None:
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise UnauthenticatedError("a download token is required (Authorization: Bearer <token>)")
    try:
        downloadtokens.verify(key, token, namespace, model_id)
    except downloadtokens.InvalidToken as exc:
        raise UnauthenticatedError(f"the download token is refused: {exc}") from exc


async def _manifest(store: ModelStore, namespace: str, model_id: str) -> ModelManifest:
    manifest = await anyio.to_thread.run_sync(store.model_manifest, namespace, model_id)
    if manifest is None:
        raise NotFoundError(f"model {namespace}/{model_id} has no finished import in the model store")
    return manifest


@router.get("/{namespace}/{modelId}/manifest", summary="The files of an imported model", responses=ERRORS)
async def manifest(
    namespace: NamespaceParam,
    modelId: ModelId,
    imports: Imports,
    key: DownloadTokenKey,
    authorization: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    _authorize(key, authorization, namespace, modelId)
    found = await _manifest(imports.store, namespace, modelId)
    return {"namespace": namespace, "modelId": modelId, **found.to_dict(), "totalBytes": found.total_bytes}


@router.get(
    "/{namespace}/{modelId}/files/{path:path}",
    summary="One file of an imported model (supports Range requests)",
    responses={206: {"description": "the requested range"}, **ERRORS},
    response_class=StreamingResponse,
)
async def file(
    namespace: NamespaceParam,
    modelId: ModelId,
    path: str,
    imports: Imports,
    key: DownloadTokenKey,
    authorization: Annotated[str | None, Header()] = None,
    range_header: Annotated[str | None, Header(alias="range")] = None,
) -> Response:
    _authorize(key, authorization, namespace, modelId)
    entry = (await _manifest(imports.store, namespace, modelId)).file(path)
    if entry is None:
        raise NotFoundError(f"model {namespace}/{modelId} has no file {path[:200]!r}")
    try:
        wanted = parse_range(range_header, entry.size)
    except DockyardError as exc:  # 416 with the size, so that a client can restart (RFC 9110 §15.5.17)
        return JSONResponse(
            error_body(exc.code, exc.message, exc.details),
            status_code=exc.status_code,
            headers={"Content-Range": f"bytes */{entry.size}"},
        )
    start, end = wanted or (0, entry.size)
    headers = {
        "Accept-Ranges": "bytes",
        "Content-Length": str(end - start),
        "ETag": f'"{entry.sha256}"',
        "X-Checksum-Sha256": entry.sha256,
    }
    if wanted is not None:
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{entry.size}"
    # open it now, so that a missing file is a 404 and not a broken 200
    blocks = imports.store.read_model_file(namespace, modelId, path, start, end)
    first = await anyio.to_thread.run_sync(next, blocks, b"")

    async def body() -> Any:
        if first:
            yield first
        async for block in iterate_in_threadpool(blocks):
            yield block

    return StreamingResponse(
        body(), status_code=206 if wanted else 200, headers=headers, media_type="application/octet-stream"
    )
