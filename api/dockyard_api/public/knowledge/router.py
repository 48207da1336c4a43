"""Public API of knowledge bases (docs/knowledge-bases.md), under an environment's address with its API key:
list and create versions, attach a document the chunked import received (fileContext document), delete
a document, ask for a re-index. HTTP only: :class:`~.service.KnowledgeService` holds the logic."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Request

from dockyard_api.deps import PublicCaller, app_state
from dockyard_api.public.knowledge.service import KnowledgeService
from dockyard_api.public.schemas import error_responses

router = APIRouter(prefix="/api/public/knowledge-bases", tags=["knowledge bases"])

NameParam = Annotated[str, Path(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
VersionParam = Annotated[str, Path(min_length=5, max_length=32, pattern=r"^\d+\.\d+\.\d+$")]
DocumentParam = Annotated[str, Path(min_length=1, max_length=253)]


async def get_knowledge(request: Request) -> KnowledgeService:
    state = app_state(request)
    return KnowledgeService(state.kube, state.settings.knowledge_files())


Knowledge = Annotated[KnowledgeService, Depends(get_knowledge)]


@router.get("", summary="The knowledge base versions of the namespace", responses=error_responses(401, 403))
async def list_knowledge_bases(caller: PublicCaller, service: Knowledge) -> dict[str, Any]:
    return {"knowledgeBases": await service.list(caller.namespace)}


@router.post(
    "",
    status_code=201,
    summary="Create a knowledge base version: name, version, description, embedding, chunking, retrieval",
    responses=error_responses(401, 403, 409, 422),
)
async def create_knowledge_base(
    caller: PublicCaller, service: Knowledge, body: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    return await service.create(caller.namespace, body)


@router.get(
    "/{name}/{version}",
    summary="A knowledge base version: its documents (state, chunks, error) and its index",
    responses=error_responses(401, 403, 404),
)
async def get_knowledge_base(
    name: NameParam, version: VersionParam, caller: PublicCaller, service: Knowledge
) -> dict[str, Any]:
    return await service.get(caller.namespace, name, version)


@router.post(
    "/{name}/{version}/documents",
    status_code=202,
    summary="Attach a document the chunked import received (body: fileId, the completion's modelId; name)",
    responses=error_responses(401, 403, 404, 409, 422),
)
async def attach_document(
    name: NameParam,
    version: VersionParam,
    caller: PublicCaller,
    service: Knowledge,
    file_id: Annotated[str, Body(alias="fileId", min_length=1, max_length=128, pattern=r"^[a-z0-9][a-z0-9.-]*$")],
    document: Annotated[str | None, Body(alias="name", max_length=253)] = None,
) -> dict[str, Any]:
    return await service.attach(caller.namespace, name, version, file_id, document)


@router.delete(
    "/{name}/{version}/documents/{document}",
    summary="Delete a document: gone from answers once the indexing run removed its chunks",
    responses=error_responses(401, 403, 404, 409),
)
async def delete_document(
    name: NameParam, version: VersionParam, document: DocumentParam, caller: PublicCaller, service: Knowledge
) -> dict[str, Any]:
    return await service.detach(caller.namespace, name, version, document)


@router.post(
    "/{name}/{version}/reindex",
    status_code=202,
    summary="Re-index from scratch: a new generation, switched to when ready (agents keep answering)",
    responses=error_responses(401, 403, 404),
)
async def reindex(name: NameParam, version: VersionParam, caller: PublicCaller, service: Knowledge) -> dict[str, Any]:
    return await service.reindex(caller.namespace, name, version)
