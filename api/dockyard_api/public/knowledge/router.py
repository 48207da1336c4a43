"""Public API of knowledge bases (docs/knowledge-bases.md), under an environment's address with its API key:
list and create versions, attach a document the chunked import received (fileContext document), delete
a document, ask for a re-index. HTTP only: :class:`~.service.KnowledgeService` holds the logic."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Request

from dockyard_api.deps import DocumentName, KnowledgeBaseName, PublicCaller, VersionParam, app_state
from dockyard_api.public.knowledge.service import KnowledgeService
from dockyard_api.public.schemas import error_responses, ok_responses

router = APIRouter(prefix="/api/public/knowledge-bases", tags=["knowledge bases"])


async def get_knowledge(request: Request) -> KnowledgeService:
    state = app_state(request)
    return KnowledgeService(state.kube, state.imports.documents.files)


Knowledge = Annotated[KnowledgeService, Depends(get_knowledge)]

KB_EXAMPLE: dict[str, Any] = {
    "name": "harbour-rules",
    "version": "1.0.0",
    "knowledgeBaseId": "harbour-rules-1.0.0",
    "description": "Port rules, fees and berths",
    "embedding": {"modelDeployment": "tiny-embed"},
    "chunking": {"maxChars": 1200, "overlapChars": 150, "splitBy": "heading"},
    "retrieval": {"mode": "hybrid", "topK": 5, "candidates": 20},
    "documents": [
        {"name": "guide.md", "fileId": "guide-md-4f2a9c01", "mediaType": "text/markdown", "size": 5120,
         "state": "indexed", "chunks": 12, "error": ""},
    ],
    "status": {
        "phase": "Ready", "documents": 1, "chunks": 12, "bytes": 5120, "lastIndexed": "2026-11-26T08:00:00Z",
        "activeGeneration": 3, "errors": [], "message": "", "job": "kb-harbour-rules-1-0-0-3f9a1c2e77",
        "upToDate": True,
    },
}  # fmt: skip


@router.get(
    "",
    summary="The knowledge base versions of the namespace",
    responses={**ok_responses({"knowledgeBases": [KB_EXAMPLE]}, "The versions"), **error_responses(401, 403, 404, 422)},
)
async def list_knowledge_bases(caller: PublicCaller, service: Knowledge) -> dict[str, Any]:
    return {"knowledgeBases": await service.list(caller.namespace)}


@router.post(
    "",
    summary="Create a knowledge base version: name, version, description, embedding, chunking, retrieval",
    responses={**ok_responses(KB_EXAMPLE, "The new version"), **error_responses(401, 403, 404, 409, 422)},
)
async def create_knowledge_base(
    caller: PublicCaller, service: Knowledge, body: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    return await service.create(caller.namespace, body)


@router.get(
    "/{name}/{version}",
    summary="A knowledge base version: its documents (state, chunks, error) and its index",
    responses={**ok_responses(KB_EXAMPLE, "The version"), **error_responses(401, 403, 404, 422)},
)
async def get_knowledge_base(
    name: KnowledgeBaseName, version: VersionParam, caller: PublicCaller, service: Knowledge
) -> dict[str, Any]:
    return await service.get(caller.namespace, name, version)


@router.post(
    "/{name}/{version}/documents",
    summary="Attach a document the chunked import received (body: fileId, the completion's modelId; name)",
    responses={
        **ok_responses({"document": KB_EXAMPLE["documents"][0], "knowledgeBase": KB_EXAMPLE}, "Attached; indexing"),
        **error_responses(401, 403, 404, 409, 422),
    },
)
async def attach_document(
    name: KnowledgeBaseName,
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
    responses={**ok_responses(KB_EXAMPLE, "The version without it"), **error_responses(401, 403, 404, 409, 422)},
)
async def delete_document(
    name: KnowledgeBaseName, version: VersionParam, document: DocumentName, caller: PublicCaller, service: Knowledge
) -> dict[str, Any]:
    return await service.detach(caller.namespace, name, version, document)


@router.post(
    "/{name}/{version}/reindex",
    summary="Re-index from scratch: a new generation, switched to when ready (agents keep answering)",
    responses={**ok_responses(KB_EXAMPLE, "Re-index asked"), **error_responses(401, 403, 404, 422)},
)
async def reindex(
    name: KnowledgeBaseName, version: VersionParam, caller: PublicCaller, service: Knowledge
) -> dict[str, Any]:
    return await service.reindex(caller.namespace, name, version)
