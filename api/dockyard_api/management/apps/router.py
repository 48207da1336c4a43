"""Management: Apps (the draft), their versions, restore. Every call acts as the calling Kubernetes user.

Validation of a new version (tools exist, models exist, MCP configs well-formed) and the refusal to
delete a deployed version are admission webhooks of the operator, so kubectl users get exactly the
same answers; this router passes the API server's message through.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, status

from dockyard_api.deps import AppName, Auth, Kube, KubeUser, NamespaceParam, VersionParam
from dockyard_api.events import record_event
from dockyard_api.management.schemas import AppCreate, DraftUpdate, Restore, VersionCreate
from dockyard_core.errors import InvalidError, NotFoundError
from dockyard_core.kubeclient import AsyncKube, KubeError
from dockyard_core.resources.v1alpha1 import API_VERSION, RESTORED_FROM_ANNOTATION, AppVersion
from dockyard_core.resources.v1alpha1.common import semver_key

router = APIRouter(prefix="/api/v1/namespaces/{namespace}", tags=["apps and versions"])

CONTENT_FIELDS = ("agents", "toolVersions", "mcpServers")
"""What a restore copies into the draft: all of its configuration (the app's own name and description
stay; a version's description describes the version)."""


def app_view(obj: dict[str, Any]) -> dict[str, Any]:
    meta, spec = obj["metadata"], obj.get("spec") or {}
    notes = meta.get("annotations") or {}
    return {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "displayName": spec.get("displayName"),
        "description": spec.get("description", ""),
        "agents": spec.get("agents", []),
        "toolVersions": spec.get("toolVersions", []),
        "mcpServers": spec.get("mcpServers", []),
        "restoredFrom": notes.get(RESTORED_FROM_ANNOTATION),
        "createdAt": meta.get("creationTimestamp"),
    }


def version_view(obj: dict[str, Any]) -> dict[str, Any]:
    meta, spec = obj["metadata"], obj["spec"]
    return {
        "app": spec["appRef"],
        "version": spec["version"],
        "name": spec.get("displayName"),
        "description": spec.get("description", ""),
        "agents": spec.get("agents", []),
        "toolVersions": spec.get("toolVersions", []),
        "mcpServers": spec.get("mcpServers", []),
        "deployedIn": (obj.get("status") or {}).get("deployedIn", []),
        "objectName": meta["name"],
        "createdAt": meta.get("creationTimestamp"),
    }


@router.post("/apps", status_code=status.HTTP_201_CREATED, summary="Create an App (its draft environment follows)")
async def create_app(namespace: NamespaceParam, body: AppCreate, user: KubeUser, kube: Kube) -> dict[str, Any]:
    spec = body.model_dump(by_alias=True, exclude_none=True, exclude={"name"})
    obj = {"apiVersion": API_VERSION, "kind": "App", "metadata": {"name": body.name}, "spec": spec}
    created = await kube.request("POST", kube.custom_path(namespace, "apps"), json=obj, as_user=user)
    return app_view(created)


@router.get("/apps", summary="List Apps")
async def list_apps(namespace: NamespaceParam, user: KubeUser, kube: Kube) -> dict[str, Any]:
    found = await kube.request("GET", kube.custom_path(namespace, "apps"), as_user=user)
    return {"items": [app_view(o) for o in found.get("items", [])]}


@router.get("/apps/{app}", summary="Get an App's draft")
async def get_app(namespace: NamespaceParam, app: AppName, user: KubeUser, kube: Kube) -> dict[str, Any]:
    return app_view(await kube.request("GET", kube.custom_path(namespace, "apps", app), as_user=user))


@router.put("/apps/{app}/draft", summary="Replace the App's draft")
async def update_draft(
    namespace: NamespaceParam, app: AppName, body: DraftUpdate, user: KubeUser, kube: Kube
) -> dict[str, Any]:
    spec = body.model_dump(by_alias=True, exclude_none=True)
    spec.setdefault("displayName", None)
    patched = await kube.request(
        "PATCH",
        kube.custom_path(namespace, "apps", app),
        json={"spec": spec},
        content_type="application/merge-patch+json",
        as_user=user,
    )
    return app_view(patched)


@router.post(
    "/apps/{app}/restore",
    summary="Restore a version into the draft (overwrites the whole draft; cannot be undone)",
)
async def restore(
    namespace: NamespaceParam, app: AppName, body: Restore, user: KubeUser, kube: Kube, auth: Auth
) -> dict[str, Any]:
    await auth.require(user, verb="create", namespace=namespace, resource="apps", subresource="restore")
    if not body.confirm:
        raise InvalidError(
            "restoring overwrites the whole draft and cannot be undone: send confirm: true",
            [{"field": "confirm", "message": "must be true"}],
        )
    version = await _version(kube, user, namespace, app, body.version)
    # the whole draft: content fields missing from the version are emptied, MCP servers included
    spec = {f: version["spec"].get(f, []) for f in CONTENT_FIELDS}
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    patch = {
        "metadata": {
            "annotations": {
                RESTORED_FROM_ANNOTATION: body.version,
                "dockyard.dev/restored-by": user.username,
                "dockyard.dev/restored-at": stamp,
            }
        },
        "spec": spec,
    }
    patched = await kube.request(
        "PATCH",
        kube.custom_path(namespace, "apps", app),
        json=patch,
        content_type="application/merge-patch+json",
        as_user=user,
    )
    await record_event(
        kube,
        patched,
        reason="DraftRestored",
        message=f"draft restored from version {body.version} by {user.username} "
        f"({len(spec['mcpServers'])} MCP server configuration(s) applied)",
    )
    return app_view(patched)


@router.post(
    "/apps/{app}/versions",
    status_code=status.HTTP_201_CREATED,
    summary="Create a version (validated first: tools, models, MCP configurations)",
)
async def create_version(
    namespace: NamespaceParam, app: AppName, body: VersionCreate, user: KubeUser, kube: Kube
) -> dict[str, Any]:
    draft = await kube.request("GET", kube.custom_path(namespace, "apps", app), as_user=user)
    content = draft.get("spec") or {}
    chosen = body.model_dump(by_alias=True, exclude_none=True, include={"agents", "tool_versions", "mcp_servers"})
    spec = {
        "appRef": app,
        "version": body.version,
        "displayName": body.name,
        "description": body.description,
        "agents": chosen.get("agents", content.get("agents", [])),
        "toolVersions": chosen.get("toolVersions", content.get("toolVersions", [])),
        "mcpServers": chosen.get("mcpServers", content.get("mcpServers", [])),
    }
    obj = {
        "apiVersion": API_VERSION,
        "kind": "AppVersion",
        "metadata": {"name": AppVersion.object_name(app, body.version)},
        "spec": spec,
    }
    created = await kube.request("POST", kube.custom_path(namespace, "appversions"), json=obj, as_user=user)
    return version_view(created)


@router.get("/apps/{app}/versions", summary="List an App's versions (the full history is kept)")
async def list_versions(namespace: NamespaceParam, app: AppName, user: KubeUser, kube: Kube) -> dict[str, Any]:
    found = await kube.request(
        "GET", kube.custom_path(namespace, "appversions"), params={"fieldSelector": f"spec.appRef={app}"}, as_user=user
    )
    items = sorted((version_view(o) for o in found.get("items", [])), key=lambda v: semver_key(v["version"]))
    return {"items": items}


@router.get("/apps/{app}/versions/{version}", summary="Preview a version")
async def get_version(
    namespace: NamespaceParam, app: AppName, version: VersionParam, user: KubeUser, kube: Kube
) -> dict[str, Any]:
    return version_view(await _version(kube, user, namespace, app, version))


@router.delete(
    "/apps/{app}/versions/{version}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a version (refused while an environment deploys it)",
)
async def delete_version(
    namespace: NamespaceParam, app: AppName, version: VersionParam, user: KubeUser, kube: Kube
) -> None:
    await _version(kube, user, namespace, app, version)
    await kube.request(
        "DELETE", kube.custom_path(namespace, "appversions", AppVersion.object_name(app, version)), as_user=user
    )


async def _version(kube: AsyncKube, user: KubeUser, namespace: str, app: str, version: str) -> dict[str, Any]:
    try:
        found: dict[str, Any] = await kube.request(
            "GET", kube.custom_path(namespace, "appversions", AppVersion.object_name(app, version)), as_user=user
        )
    except KubeError as exc:
        if exc.status == 404:
            raise NotFoundError(f"app {app!r} has no version {version}", {"app": app, "version": version}) from exc
        raise
    return found
