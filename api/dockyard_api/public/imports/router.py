"""Public API: chunked model import, plus session status and abort (docs/public-api.md, 'Chunked model import').

Mounted under ``/e/{namespace}/{environment}``: the public API's {base_url} is the environment's address.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from dockyard_api import metrics
from dockyard_api.deps import Imports, PublicCaller, SessionId
from dockyard_api.public.schemas import (
    IMPORT_JOB_EXAMPLE,
    SESSION_EXAMPLE,
    SESSION_STATE_EXAMPLE,
    ChunkReceived,
    CompleteBody,
    JobRecord,
    SessionAborted,
    SessionStarted,
    SessionState,
    error_responses,
    ok_responses,
)
from dockyard_api.server import RAW_BODY
from dockyard_core.upload import Upload

router = APIRouter(prefix="/api/public/files/session", tags=["model import"])

StartBody = Annotated[dict[str, Any], Body()]
"""The start call's JSON object, validated by the service as the one upload type
(:class:`dockyard_core.upload.Upload`) with this facade's limits as the validation context."""


UPLOAD_SCHEMA = Upload.model_json_schema(by_alias=True)
"""The start body's schema in the OpenAPI document (the route takes the JSON object and validates it)."""


@router.post(
    "/start",
    response_model=SessionStarted,
    summary="Start an import session (step 1 of 3)",
    responses={**ok_responses(SESSION_EXAMPLE, "The session"), **error_responses(401, 403, 404, 413, 422, 503)},
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": UPLOAD_SCHEMA}}}},
)
async def start(body: StartBody, caller: PublicCaller, imports: Imports) -> SessionStarted:
    try:
        upload = imports.upload_of(body)
    except ValidationError as exc:  # the same answer as FastAPI's own body validation: 422 naming body.<field>
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors, body=body) from exc
    session = await imports.start(caller.namespace, caller.environment, upload)
    metrics.import_outcome("started")
    return session


@router.post(
    "/{sessionId}",
    response_model=ChunkReceived,
    summary="Upload one chunk (step 2 of 3): multipart fields file and chunkNumber",
    responses={
        **ok_responses({"chunkNumber": 0, "sessionId": "7c9e6679-7425-40de-944b-e07fc1f90ae7"}, "The chunk is stored"),
        **error_responses(401, 403, 404, 409, 410, 413, 422, 503),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["file", "chunkNumber"],
                        "properties": {
                            "file": {"type": "string", "format": "binary", "description": "the chunk"},
                            "chunkNumber": {"type": "integer", "minimum": 0, "description": "0 .. totalChunks-1"},
                        },
                    }
                }
            },
        }
    },
)
async def upload_chunk(sessionId: SessionId, caller: PublicCaller, imports: Imports, request: Request) -> ChunkReceived:
    raw = (request.scope.get("extensions") or {}).get(RAW_BODY)  # the server's faster way to the rest of the body
    received, size, new = await imports.receive_chunk(
        caller.namespace, caller.environment, sessionId, request.headers.get("content-type"), request.stream(), raw
    )
    if new:
        metrics.upload_chunk(size)
    return received


@router.get(
    "/{sessionId}",
    response_model=SessionState,
    response_model_exclude_unset=True,
    summary="Which chunks the session has received (to resume an upload)",
    responses={**ok_responses(SESSION_STATE_EXAMPLE, "The session"), **error_responses(401, 403, 404, 410, 422)},
)
async def describe(sessionId: SessionId, caller: PublicCaller, imports: Imports) -> SessionState:
    return await imports.describe(caller.namespace, caller.environment, sessionId)


@router.delete(
    "/{sessionId}",
    response_model=SessionAborted,
    summary="Abort the session: its chunks are deleted, its Model becomes Failed",
    responses={
        **ok_responses({**SESSION_EXAMPLE, "freedBytes": 16777216}, "The session is aborted"),
        **error_responses(401, 403, 404, 409, 422),
    },
)
async def abort(sessionId: SessionId, caller: PublicCaller, imports: Imports) -> SessionAborted:
    aborted = await imports.abort(caller.namespace, caller.environment, sessionId)
    metrics.import_outcome("aborted")
    return aborted


@router.post(
    "/{sessionId}/complete",
    response_model=JobRecord,
    response_model_exclude_unset=True,
    summary="Complete the import (step 3 of 3): starts the import job; calling it again returns the same job",
    responses={
        **ok_responses(IMPORT_JOB_EXAMPLE, "The import job"),
        **error_responses(401, 403, 404, 409, 410, 422, 503),
    },
)
async def complete(
    sessionId: SessionId,
    caller: PublicCaller,
    imports: Imports,
    body: Annotated[CompleteBody | None, Body()] = None,
) -> JobRecord:
    sha256 = body.sha256 if body is not None else None
    job = await imports.complete(caller.namespace, caller.environment, sessionId, sha256)
    metrics.import_outcome("completed")
    return job
