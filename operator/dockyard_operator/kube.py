"""The operator's calls on the API server, by kind: :class:`KubeApi`, the one wrapper of its one client.

Every reconcile (ModelDeployments and ToolDeployments, hundreds of calls a second while many roll out;
Apps and Environments), the import job, the autoscaler and the admission webhooks reach the API server
through ``Context.kube``: a :class:`KubeApi` over the aiohttp client the facade uses too
(:class:`~dockyard_core.kubeclient.AsyncKube`, orjson): no thread hop, no urllib3 header bookkeeping,
no generated-client argument validation. The calls themselves (get-or-None, server-side apply as the
operator's field manager, the guarded merge patch) are the core client's and the paths core's
(:mod:`dockyard_core.kubepaths`). The API server's answers that a reconcile acts on are mapped here, once:
a 409 on a merge patch is :class:`Conflict`, a 404 is :class:`Gone`, a 401/403 is :class:`Denied` (both
still :class:`KubeError`), so no reconcile reads a status code. It answers plain dicts, unvalidated: the
reconciles read the few fields they need on their hot paths.
"""

from __future__ import annotations

import contextlib
from typing import Any

from dockyard_core.kubeclient import FIELD_MANAGER, AsyncKube, KubeError
from dockyard_core.kubepaths import collection, object_path
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION

APPLIED_KINDS = {
    "Deployment": "deployments",
    "Service": "services",
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "ToolDeployment": "tooldeployments",
}
"""The kinds the operator applies (children of its deployments, an Environment's ToolDeployments, audit
records), and their plurals."""


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


class Gone(KubeError):
    """404: the object (or its namespace) does not exist (any more)."""


class Denied(KubeError):
    """401/403: the operator may not do this (e.g. read Events where its role does not grant it)."""


def mapped(exc: KubeError) -> KubeError:
    """:class:`Gone` or :class:`Denied` for the answers a reconcile acts on; ``exc`` itself otherwise."""
    kind = Gone if exc.status == 404 else Denied if exc.status in (401, 403) else None
    if kind is None:
        return exc
    return kind(exc.status, exc.reason, exc.message, exc.details)


class KubeApi:
    """The operator's calls on its one async client (``http``, an :class:`AsyncKube`), by plural; a 409
    on a merge patch is :class:`Conflict`, a 404 :class:`Gone`, a 401/403 :class:`Denied`."""

    def __init__(self, http: AsyncKube) -> None:
        self.http = http

    async def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        return await self.http.get_or_none(object_path(plural, namespace, name))

    async def list_objects(
        self, plural: str, namespace: str | None, *, labels: str = "", fields: str = ""
    ) -> list[dict[str, Any]]:
        """The objects of a kind in ``namespace`` (all namespaces when None), by label and field selector."""
        params = {k: v for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v}
        try:
            return await self.http.items(collection(plural, namespace), params or None)
        except KubeError as exc:
            raise mapped(exc) from exc

    async def create(self, plural: str, namespace: str, obj: dict[str, Any]) -> bool:
        """Create the object; False when one of that name exists already."""
        try:
            await self.http.request("POST", collection(plural, namespace), json=obj)
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise mapped(exc) from exc
        return True

    async def delete(self, plural: str, namespace: str, name: str) -> None:
        """Delete the object, best effort (gone already, or refused: the caller goes on)."""
        with contextlib.suppress(KubeError):
            await self.http.request("DELETE", object_path(plural, namespace, name))

    async def apply(self, obj: dict[str, Any], field_manager: str = FIELD_MANAGER) -> None:
        """Server-side apply as the operator's field manager (idempotent; re-running changes nothing)."""
        meta = obj["metadata"]
        path = object_path(APPLIED_KINDS[obj["kind"]], meta["namespace"], meta["name"])
        try:
            await self.http.apply(path, obj, field_manager)
        except KubeError as exc:
            raise mapped(exc) from exc

    async def _merge(
        self,
        plural: str,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        resource_version: str | None,
        sub: str | None,
    ) -> dict[str, Any]:
        try:
            return await self.http.merge(object_path(plural, namespace, name, sub), patch, resource_version or None)
        except KubeError as exc:
            if exc.status == 409:
                raise Conflict(f"{plural}/{name} changed while it was reconciled") from exc
            raise mapped(exc) from exc

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any]:
        """Merge-patch ``status``; with ``resource_version``, only if the object is still at it (else
        :class:`Conflict`: a newer version exists and its own event reconciles it). Returns the object
        as it is now."""
        return await self._merge(plural, namespace, name, {"status": status}, resource_version, "status")

    async def patch_object(
        self, plural: str, namespace: str, name: str, patch: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any]:
        """Merge-patch metadata/spec (guarded like :meth:`patch_status`); returns the object as it is now."""
        return await self._merge(plural, namespace, name, patch, resource_version, None)
