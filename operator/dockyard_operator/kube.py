"""The operator's few API calls: server-side apply of children and guarded patches.

The reconciles of ModelDeployments and ToolDeployments (hundreds of calls a second while many roll
out) make them on the event loop with the aiohttp client the facade uses (:class:`AsyncKube`,
orjson): no thread hop, no urllib3 header bookkeeping, no generated-client argument validation.
The import job and the App/AppVersion/Environment handlers use the same client.
"""

from __future__ import annotations

from typing import Any

from dockyard_core.kubeclient import APPLY, FIELD_MANAGER, MERGE, AsyncKube, KubeError, guarded
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION

APPLIED_KINDS = {
    "Deployment": "/apis/apps/v1/namespaces/{namespace}/deployments",
    "Service": "/api/v1/namespaces/{namespace}/services",
    "ConfigMap": "/api/v1/namespaces/{namespace}/configmaps",
    "Secret": "/api/v1/namespaces/{namespace}/secrets",
}
"""The kinds of children the operator applies, and their collections."""


def owner_reference(kind: str, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


class Conflict(Exception):
    """The object changed since it was read; the next reconcile sees the new version."""


class Kube:
    """The operator's calls on its one async client (:class:`AsyncKube`); a 409 on a guarded patch is
    :class:`Conflict`."""

    def __init__(self, http: AsyncKube) -> None:
        self.http = http

    async def apply_async(self, obj: dict[str, Any]) -> None:
        """Server-side apply as the operator's field manager (idempotent; re-running changes nothing)."""
        meta = obj["metadata"]
        collection = APPLIED_KINDS[obj["kind"]].format(namespace=meta["namespace"])
        path = f"{collection}/{meta['name']}"
        params = {"fieldManager": FIELD_MANAGER, "force": "true"}
        await self.http.request("PATCH", path, json=obj, params=params, content_type=APPLY)

    async def get_custom_async(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A dockyard.dev object, or None when it does not exist."""
        try:
            return await self.http.request("GET", AsyncKube.custom_path(namespace, plural, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def _merge_async(
        self, plural: str, namespace: str, name: str, body: dict[str, Any], status: bool
    ) -> dict[str, Any]:
        path = AsyncKube.custom_path(namespace, plural, name, "status" if status else None)
        try:
            return await self.http.request("PATCH", path, json=body, content_type=MERGE)
        except KubeError as exc:
            if exc.status == 409:
                raise Conflict(f"{plural}/{name} changed while it was reconciled") from exc
            raise

    async def patch_status_async(
        self, plural: str, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any]:
        """Merge-patch ``status``; with ``resource_version``, only if the object is still at it (else
        :class:`Conflict`). Returns the object as it is now."""
        return await self._merge_async(plural, namespace, name, guarded({"status": status}, resource_version), True)

    async def patch_object_async(
        self, plural: str, namespace: str, name: str, patch: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any]:
        """Merge-patch metadata/spec (guarded like :meth:`patch_status_async`); returns the object as it is now."""
        return await self._merge_async(plural, namespace, name, guarded(patch, resource_version), False)
