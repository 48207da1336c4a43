"""Public API: chunked model import, plus session status and abort (docs/public-api.md, 'Chunked model import').

Mounted under ``/e/{namespace}/{environment}``: the public API's {base_url} is the environment's address.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dockyard_api import metrics
from dockyard_api.deps import Imports, PublicCaller, SessionId
from dockyard_api.public.schemas import error_responses, ok_responses
from dockyard_core.upload import Upload, sha256_hex

router = APIRouter(prefix="/api/public/files/session", tags=["model import"])

StartBody = Annotated[dict[str, Any], Body()]
"""The start call's JSON object, validated by the service as the one upload type
(:class:`dockyard_core.upload.Upload`) with this facade's limits as the validation context."""


class CompleteBody(BaseModel):
    """Optional body of the completion call (a Dockyard extension: the published call has no body)."""

    model_config = ConfigDict(extra="forbid")

    sha256: str | None = Field(
        default=None,
        description="hex SHA-256 of the whole file, computed while uploading; the import job FAILS when it "
        "differs (409 checksum_conflict when it contradicts the start call's)",
    )

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        return sha256_hex(value)


class StartResponse(BaseModel):
    sessionId: str
    modelId: str
    expirationDate: str = Field(description="ISO 8601 timestamp (UTC) after which the session takes no chunks")


class ChunkResponse(BaseModel):
    chunkNumber: int
    sessionId: str


class JobRecord(BaseModel):
    """The job record; the id is given under both spellings."""

    model_config = ConfigDict(populate_by_name=True)

    dockStatusId: str
    dock_statusId: str = Field(alias="dock-statusId", serialization_alias="dock-statusId")
    modelId: str
    jobType: str
    action: str
    status: str


UPLOAD_SCHEMA = Upload.model_json_schema(by_alias=True)
"""The start body's schema in the OpenAPI document (the route takes the JSON object and validates it)."""
SESSION_EXAMPLE = {
    "sessionId": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
    "modelId": "llama-lora-3f9a1c2e",
    "expirationDate": "2026-11-24T10:00:00Z",
}
IMPORT_JOB_EXAMPLE = {
    "dockStatusId": "5b0f7c3e-4a53-4a0e-9a39-2b7f0d7e9a11",
    "dock-statusId": "5b0f7c3e-4a53-4a0e-9a39-2b7f0d7e9a11",
    "modelId": "llama-lora-3f9a1c2e",
    "jobType": "MODELS",
    "action": "EXPORT",
    "status": "IN_PROGRESS",
}
SESSION_STATE_EXAMPLE = {
    **SESSION_EXAMPLE,
    "state": "open",
    "fileSize": 50331648,
    "totalChunks": 3,
    "receivedChunks": [{"chunkNumber": 0, "size": 16777216}],
    "receivedBytes": 16777216,
    "missingChunks": [1, 2],
}


@router.post(
    "/start",
    response_model=StartResponse,
    summary="Start an import session (step 1 of 3)",
    responses={**ok_responses(SESSION_EXAMPLE, "The session"), **error_responses(401, 403, 404, 413, 422, 503)},
    openapi_extra={"requestBody": {"content": {"application/json": {"schema": UPLOAD_SCHEMA}}}},
)
async def start(body: StartBody, caller: PublicCaller, imports: Imports) -> Any:
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
    response_model=ChunkResponse,
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
async def upload_chunk(sessionId: SessionId, caller: PublicCaller, imports: Imports, request: Request) -> Any:
    number, size, new = await imports.receive_chunk(
        caller.namespace, caller.environment, sessionId, request.headers.get("content-type"), request.stream()
    )
    if new:
        metrics.upload_chunk(size)
    return {"chunkNumber": number, "sessionId": sessionId}


@router.get(
    "/{sessionId}",
    summary="Which chunks the session has received (to resume an upload)",
    responses={**ok_responses(SESSION_STATE_EXAMPLE, "The session"), **error_responses(401, 403, 404, 410, 422)},
)
async def describe(sessionId: SessionId, caller: PublicCaller, imports: Imports) -> dict[str, Any]:
    return await imports.describe(caller.namespace, caller.environment, sessionId)


@router.delete(
    "/{sessionId}",
    summary="Abort the session: its chunks are deleted, its Model becomes Failed",
    responses={
        **ok_responses({**SESSION_EXAMPLE, "freedBytes": 16777216}, "The session is aborted"),
        **error_responses(401, 403, 404, 409, 422),
    },
)
async def abort(sessionId: SessionId, caller: PublicCaller, imports: Imports) -> dict[str, Any]:
    aborted = await imports.abort(caller.namespace, caller.environment, sessionId)
    metrics.import_outcome("aborted")
    return aborted


@router.post(
    "/{sessionId}/complete",
    response_model=JobRecord,
    response_model_by_alias=True,
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
) -> Any:
    sha256 = body.sha256 if body is not None else None
    job = await imports.complete(caller.namespace, caller.environment, sessionId, sha256)
    metrics.import_outcome("completed")
    return job
