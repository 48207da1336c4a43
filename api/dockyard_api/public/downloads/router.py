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
from dockyard_api.public.downloads import service
from dockyard_api.public.schemas import ModelFilesManifest
from dockyard_core.errors import DockyardError
from dockyard_core.storeerrors import parse_range

router = APIRouter(prefix="/api/models", tags=["model downloads"])

ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "no download token, or a forged, expired or other model's one"},
    404: {"description": "the model has no finished import, or no such file"},
    416: {"description": "the range starts past the end of the file"},
    502: {"description": "the object store failed or could not be reached"},
}


@router.get(
    "/{namespace}/{modelId}/manifest",
    response_model=ModelFilesManifest,
    summary="The files of an imported model",
    responses=ERRORS,
)
async def manifest(
    namespace: NamespaceParam,
    modelId: ModelId,
    imports: Imports,
    key: DownloadTokenKey,
    authorization: Annotated[str | None, Header()] = None,
) -> ModelFilesManifest:
    service.authorize(key, authorization, namespace, modelId)
    return await service.manifest(imports.store, namespace, modelId)


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
    service.authorize(key, authorization, namespace, modelId)
    entry = await service.stored_file(imports.store, namespace, modelId, path)
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
