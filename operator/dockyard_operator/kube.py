"""The operator's few API calls: server-side apply of children and guarded status patches."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dockyard_api.resources import GROUP
from dockyard_api.resources.v1alpha1 import VERSION

FIELD_MANAGER = "dockyard-operator"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


def owner_reference(kind: str, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def apply(api: client.ApiClient, obj: dict[str, Any]) -> None:
    """Server-side apply as the operator's field manager (idempotent; re-running changes nothing)."""
    meta = obj["metadata"]
    kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER, "force": True, "_content_type": APPLY}
    kind = obj["kind"]
    if kind == "Deployment":
        client.AppsV1Api(api).patch_namespaced_deployment(meta["name"], meta["namespace"], obj, **kwargs)
    elif kind == "Service":
        client.CoreV1Api(api).patch_namespaced_service(meta["name"], meta["namespace"], obj, **kwargs)
    elif kind == "ConfigMap":
        client.CoreV1Api(api).patch_namespaced_config_map(meta["name"], meta["namespace"], obj, **kwargs)
    else:  # pragma: no cover - a programming error
        raise ValueError(f"no apply for {kind}")


def delete_child(api: client.ApiClient, kind: str, namespace: str, name: str) -> None:
    try:
        if kind == "Deployment":
            client.AppsV1Api(api).delete_namespaced_deployment(name, namespace)
        elif kind == "Service":
            client.CoreV1Api(api).delete_namespaced_service(name, namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise


class Conflict(Exception):
    """The object changed since it was read; the next reconcile sees the new version."""


def patch_status(
    api: client.ApiClient, plural: str, namespace: str, name: str, resource_version: str, status: dict[str, Any]
) -> None:
    """Merge-patch ``status``, only if the object is still at ``resource_version`` (else Conflict)."""
    body = {"metadata": {"resourceVersion": resource_version}, "status": status}
    try:
        client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, plural, name, body, _content_type=MERGE
        )
    except ApiException as exc:
        if exc.status == 409:
            raise Conflict(f"{plural}/{name} changed while it was reconciled") from exc
        raise


def patch_metadata(api: client.ApiClient, plural: str, namespace: str, name: str, metadata: dict[str, Any]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, name, {"metadata": metadata}, _content_type=MERGE
    )
