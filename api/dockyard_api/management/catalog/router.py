"""Management: what exists to pick from and to watch — the agent versions an App has used, the tool
versions (Tools) of a namespace, and the Models, ModelDeployments and ToolDeployments with their dock
status. The console's pickers and its Models and tools page read these; every call acts as the caller.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from dockyard_api.deps import AppName, Kube, KubeUser, NamespaceParam
from dockyard_core import jobs
from dockyard_core.resources.v1alpha1.common import semver_key as _semver

router = APIRouter(prefix="/api/v1/namespaces/{namespace}", tags=["catalog"])


def _job(obj: dict[str, Any], id_key: str) -> dict[str, Any] | None:
    """The object's current job as the one job record (dockyard_core.jobs), None before its first."""
    return jobs.record(obj, id_key) if jobs.current_job(obj) else None


def _ready(obj: dict[str, Any]) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return {"status": cond.get("status"), "reason": cond.get("reason"), "message": cond.get("message", "")}
    return None


def tool_view(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec") or {}
    return {
        "toolId": obj["metadata"]["name"],
        "name": spec.get("name"),
        "version": spec.get("version"),
        "description": spec.get("description", ""),
        "kind": "image" if spec.get("container") else "endpoint",
        "image": (spec.get("container") or {}).get("image"),
        "endpoint": spec.get("endpoint"),
        "mcp": bool(spec.get("mcp")),
        "createdAt": obj["metadata"].get("creationTimestamp"),
    }


def model_view(obj: dict[str, Any]) -> dict[str, Any]:
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    storage = st.get("storage") or {}
    source = spec.get("source") or {}
    return {
        "modelId": obj["metadata"]["name"],
        "modelType": spec.get("modelType"),
        "source": "hub" if source.get("hub") else "upload" if source.get("upload") else None,
        "phase": st.get("phase"),
        "format": storage.get("format"),
        "sizeBytes": storage.get("sizeBytes") or (source.get("upload") or {}).get("fileSize"),
        "job": _job(obj, "modelId"),
        "ready": _ready(obj),
    }


def model_deployment_view(obj: dict[str, Any]) -> dict[str, Any]:
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    return {
        "name": obj["metadata"]["name"],
        "modelRef": spec.get("modelRef"),
        "deviceType": spec.get("deviceType"),
        "replicas": st.get("replicas"),
        "readyReplicas": st.get("readyReplicas"),
        "job": _job(obj, "modelId"),
        "ready": _ready(obj),
    }


def tool_deployment_view(obj: dict[str, Any]) -> dict[str, Any]:
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    labels = obj["metadata"].get("labels") or {}
    return {
        "name": obj["metadata"]["name"],
        "toolRef": spec.get("toolRef"),
        "environment": labels.get("dockyard.dev/environment"),
        "deviceType": spec.get("deviceType"),
        "replicas": st.get("replicas"),
        "readyReplicas": st.get("readyReplicas"),
        "job": _job(obj, "toolId"),
        "ready": _ready(obj),
    }


def agent_versions(app: dict[str, Any], versions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every (agent, version) pair the App's draft or one of its versions holds, newest versions of an
    agent last; each with its configuration (the one a version pins) and where it is found."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    sources = [("draft", (app.get("spec") or {}).get("agents") or [])]
    sources += [(v["spec"]["version"], v["spec"].get("agents") or []) for v in versions]
    for where, agents in sources:
        for agent in agents:
            key = (agent["name"], str(agent["version"]))
            entry = found.setdefault(key, {"name": key[0], "version": key[1], "agent": agent, "foundIn": []})
            entry["foundIn"].append(where)
    return sorted(found.values(), key=lambda e: (e["name"], _version_key(e["version"])))


def _version_key(version: str) -> tuple[Any, ...]:
    try:
        return (0, *_semver(version))
    except ValueError:
        return (1, version)


@router.get("/apps/{app}/agentversions", summary="Agent versions to pick from: those in the draft and in any version")
async def list_agent_versions(namespace: NamespaceParam, app: AppName, user: KubeUser, kube: Kube) -> dict[str, Any]:
    obj = await kube.request("GET", kube.custom_path(namespace, "apps", app), as_user=user)
    found = await kube.request(
        "GET", kube.custom_path(namespace, "appversions"), params={"fieldSelector": f"spec.appRef={app}"}, as_user=user
    )
    return {"items": agent_versions(obj, found.get("items", []))}


@router.get("/tools", summary="Tool versions (Tools) to pick from")
async def list_tools(namespace: NamespaceParam, user: KubeUser, kube: Kube) -> dict[str, Any]:
    found = await kube.request("GET", kube.custom_path(namespace, "tools"), as_user=user)
    items = sorted(
        (tool_view(o) for o in found.get("items", [])), key=lambda t: (t["name"], _version_key(t["version"]))
    )
    return {"items": items}


@router.get("/models", summary="Models with phase, format and size")
async def list_models(namespace: NamespaceParam, user: KubeUser, kube: Kube) -> dict[str, Any]:
    found = await kube.request("GET", kube.custom_path(namespace, "models"), as_user=user)
    return {"items": sorted((model_view(o) for o in found.get("items", [])), key=lambda m: m["modelId"])}


@router.get("/modeldeployments", summary="ModelDeployments with device type, replicas and dock status")
async def list_model_deployments(namespace: NamespaceParam, user: KubeUser, kube: Kube) -> dict[str, Any]:
    found = await kube.request("GET", kube.custom_path(namespace, "modeldeployments"), as_user=user)
    return {"items": sorted((model_deployment_view(o) for o in found.get("items", [])), key=lambda m: m["name"])}


@router.get("/tooldeployments", summary="ToolDeployments with replicas and dock status")
async def list_tool_deployments(namespace: NamespaceParam, user: KubeUser, kube: Kube) -> dict[str, Any]:
    found = await kube.request("GET", kube.custom_path(namespace, "tooldeployments"), as_user=user)
    return {"items": sorted((tool_deployment_view(o) for o in found.get("items", [])), key=lambda m: m["name"])}
