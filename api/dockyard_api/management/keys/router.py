"""Management: an environment's API keys (HTTP only; the logic is
:class:`~dockyard_api.management.keys.service.KeyService`)."""

from __future__ import annotations

from fastapi import APIRouter, status

from dockyard_api.deps import EnvName, KeyId, KeysDep, NamespaceParam
from dockyard_api.management.schemas import KeyCreate, KeyList, NewKeyView

router = APIRouter(prefix="/api/v1/namespaces/{namespace}", tags=["environments and API keys"])


@router.post(
    "/environments/{environment}/apikeys",
    status_code=status.HTTP_201_CREATED,
    summary="Generate an API key (the key is in this answer only: it cannot be viewed again)",
)
async def create_key(namespace: NamespaceParam, environment: EnvName, body: KeyCreate, keys: KeysDep) -> NewKeyView:
    return await keys.create_key(namespace, environment, body)


@router.get("/environments/{environment}/apikeys", summary="List API keys (name, prefix, created, last used)")
async def list_keys(namespace: NamespaceParam, environment: EnvName, keys: KeysDep) -> KeyList:
    return await keys.list_keys(namespace, environment)


@router.delete(
    "/environments/{environment}/apikeys/{key_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Revoke an API key",
)
async def revoke_key(namespace: NamespaceParam, environment: EnvName, key_id: KeyId, keys: KeysDep) -> None:
    await keys.revoke_key(namespace, environment, key_id)
