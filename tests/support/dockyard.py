"""Helpers to create Dockyard objects in tests and follow their dock jobs."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION
from tests.support.waiting import wait_for

API_VERSION = f"{GROUP}/{VERSION}"


def objects(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def create(
    api: client.ApiClient,
    namespace: str,
    plural: str,
    kind: str,
    name: str,
    spec: dict[str, Any],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    body = {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}
    created: dict[str, Any] = objects(api).create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)
    return created


def get(api: client.ApiClient, namespace: str, plural: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = objects(api).get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
    return obj


def get_or_empty(api: client.ApiClient, namespace: str, plural: str, name: str) -> dict[str, Any]:
    """The object, or {} while it does not exist (for polling)."""
    try:
        return get(api, namespace, plural, name)
    except client.ApiException as exc:
        if exc.status == 404:
            return {}
        raise


def patch(api: client.ApiClient, namespace: str, plural: str, name: str, body: dict[str, Any]) -> None:
    objects(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, plural, name, body)


def hub_model(api: client.ApiClient, namespace: str, name: str, hub_id: str = "meta-llama/Llama-3.1-8B-Instruct",
              **spec: Any) -> dict[str, Any]:  # fmt: skip
    return create(api, namespace, "models", "Model", name,
                  {"modelType": "openSource", "source": {"hub": {"id": hub_id}}, **spec})  # fmt: skip


def model_deployment(
    api: client.ApiClient,
    namespace: str,
    name: str,
    device_type: str = "g5.xlarge",
    model: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    body = {"modelRef": model or name, "modelType": "openSource", "name": name, "deviceType": device_type, **spec}
    return create(api, namespace, "modeldeployments", "ModelDeployment", name, body, labels, annotations)


def job(api: client.ApiClient, namespace: str, plural: str, name: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = (get(api, namespace, plural, name).get("status") or {}).get("job")
    return found


def wait_job(
    api: client.ApiClient,
    namespace: str,
    plural: str,
    name: str,
    status: str,
    *,
    timeout: float = 60,
    not_id: str | None = None,
) -> dict[str, Any]:
    """Wait until the object's dock job has ``status`` (and, with ``not_id``, is a new job)."""

    def probe() -> dict[str, Any] | None:
        current = job(api, namespace, plural, name)
        if current and current["status"] == status and current["dockStatusId"] != not_id:
            return current
        return None

    try:
        return wait_for(probe, timeout=timeout, what=f"{plural}/{name} job {status}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the job is {job(api, namespace, plural, name)}") from None


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return {}
