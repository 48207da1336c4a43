"""Apps (the draft), their versions and restore, as the calling Kubernetes user.

Validation of a new version (at least one agent, each with a model that exists; pinned tools exist; MCP
servers well-formed, answering and listing tools) and the refusal to delete a deployed version are
admission webhooks of the operator, so kubectl users get exactly the same answers; the service passes
the API server's message through (the repositories map it), with each problem's field as a cause.
How a service is built and what it acts as: :mod:`dockyard_api.management.base`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from dockyard_api.events import record_event
from dockyard_api.management.base import CallerService
from dockyard_api.management.schemas import (
    AppCreate,
    AppList,
    AppView,
    DraftUpdate,
    Restore,
    VersionCreate,
    VersionList,
    VersionView,
)
from dockyard_core.errors import InvalidError, NotFoundError
from dockyard_core.resources.v1alpha1 import API_VERSION, RESTORED_FROM_ANNOTATION, App, AppVersion
from dockyard_core.resources.v1alpha1.common import semver_key

CONTENT_FIELDS = ("agents", "toolVersions", "mcpServers", "guardrails")
"""What a restore copies into the draft: all of its configuration (the app's own name and description
stay; a version's description describes the version)."""


PROBLEM = re.compile(r"^(spec(?:\.[A-Za-z]+|\[\d+\])+): (.+)$")


def problem_causes(message: str) -> list[dict[str, str]]:
    """The causes of the version webhook's refusal ("... the version is not valid: <field>: <problem>;
    ..."), in the shape of the API server's own field causes: what the console shows next to each field."""
    _, sep, rest = message.partition("the version is not valid: ")
    found = (PROBLEM.match(p) for p in rest.split("; ")) if sep else ()
    return [{"field": m[1], "message": m[2], "reason": "FieldValueInvalid"} for m in found if m]


def app_view(app: App) -> AppView:
    meta, spec = app.metadata, app.spec
    return AppView(
        name=meta.name or "",
        namespace=meta.namespace or "",
        display_name=spec.display_name,
        description=spec.description,
        agents=spec.agents,
        tool_versions=spec.tool_versions,
        mcp_servers=spec.mcp_servers,
        guardrails=spec.guardrails,
        restored_from=(meta.annotations or {}).get(RESTORED_FROM_ANNOTATION),
        created_at=meta.creation_timestamp,
    )


def version_view(version: AppVersion) -> VersionView:
    spec = version.spec
    return VersionView(
        app=spec.app_ref,
        version=spec.version,
        name=spec.display_name,
        description=spec.description,
        agents=spec.agents,
        tool_versions=spec.tool_versions,
        mcp_servers=spec.mcp_servers,
        guardrails=spec.guardrails,
        deployed_in=version.status.deployed_in,
        object_name=version.metadata.name or "",
        created_at=version.metadata.creation_timestamp,
    )


class AppService(CallerService):
    """Apps and versions of the caller's namespaces."""

    async def create(self, namespace: str, body: AppCreate) -> AppView:
        spec = body.model_dump(by_alias=True, exclude_none=True, exclude={"name"})
        obj = {"apiVersion": API_VERSION, "kind": "App", "metadata": {"name": body.name}, "spec": spec}
        return app_view(await self.repos.apps.create(obj, namespace))

    async def list_apps(self, namespace: str) -> AppList:
        return AppList(items=[app_view(a) for a in await self.repos.apps.select(namespace)])

    async def get_app(self, namespace: str, app: str) -> AppView:
        return app_view(await self.repos.apps.get(namespace, app))

    async def update_draft(self, namespace: str, app: str, body: DraftUpdate) -> AppView:
        """Replace the draft: what the body does not name is emptied (``displayName`` removed)."""
        spec = body.model_dump(by_alias=True, exclude_none=True)
        spec.setdefault("displayName", None)
        spec.setdefault("guardrails", None)
        return app_view(await self.repos.apps.merge(namespace, app, {"spec": spec}))

    async def restore(self, namespace: str, app: str, body: Restore) -> AppView:
        """Overwrite the whole draft with a version's content (confirmed; it cannot be undone)."""
        await self.auth.require(self.user, verb="create", namespace=namespace, resource="apps", subresource="restore")
        if not body.confirm:
            raise InvalidError(
                "restoring overwrites the whole draft and cannot be undone: send confirm: true",
                [{"field": "confirm", "message": "must be true"}],
            )
        version = await self._version(namespace, app, body.version)
        # the whole draft: content fields missing from the version are emptied, MCP servers included
        content = version.spec.model_dump(mode="json", by_alias=True, exclude_unset=True)
        spec: dict[str, Any] = {f: content.get(f, []) for f in CONTENT_FIELDS}
        spec["guardrails"] = content.get("guardrails")  # none in the version: the draft's are removed
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        patch = {
            "metadata": {
                "annotations": {
                    RESTORED_FROM_ANNOTATION: body.version,
                    "dockyard.dev/restored-by": self.user.username,
                    "dockyard.dev/restored-at": stamp,
                }
            },
            "spec": spec,
        }
        patched = await self.repos.apps.merge(namespace, app, patch)
        await record_event(
            self.repos.kube,
            patched.to_manifest(),
            reason="DraftRestored",
            message=f"draft restored from version {body.version} by {self.user.username} "
            f"({len(spec['mcpServers'])} MCP server configuration(s) applied)",
        )
        return app_view(patched)

    async def create_version(self, namespace: str, app: str, body: VersionCreate) -> VersionView:
        """A new version of the chosen agents, tool versions and MCP servers (the draft's where not chosen)."""
        draft = await self.repos.apps.get(namespace, app)
        content = draft.spec.model_dump(mode="json", by_alias=True, exclude_unset=True)
        chosen = body.model_dump(
            by_alias=True, exclude_none=True, include={"agents", "tool_versions", "mcp_servers", "guardrails"}
        )
        spec = {
            "appRef": app,
            "version": body.version,
            "displayName": body.name,
            "description": body.description,
            "agents": chosen.get("agents", content.get("agents", [])),
            "toolVersions": chosen.get("toolVersions", content.get("toolVersions", [])),
            "mcpServers": chosen.get("mcpServers", content.get("mcpServers", [])),
        }
        guardrails = chosen.get("guardrails", content.get("guardrails"))
        if guardrails is not None:
            spec["guardrails"] = guardrails
        obj = {
            "apiVersion": API_VERSION,
            "kind": "AppVersion",
            "metadata": {"name": AppVersion.object_name(app, body.version)},
            "spec": spec,
        }
        try:
            created = await self.repos.app_versions.create(obj, namespace)
        except InvalidError as error:
            if error.details is None:  # the webhook's refusal: its problems, each with its field
                error.details = problem_causes(error.message) or None
            raise
        return version_view(created)

    async def list_versions(self, namespace: str, app: str) -> VersionList:
        found = await self.repos.app_versions.select(namespace, fields={"spec.appRef": app})
        return VersionList(items=sorted((version_view(v) for v in found), key=lambda v: semver_key(v.version)))

    async def get_version(self, namespace: str, app: str, version: str) -> VersionView:
        return version_view(await self._version(namespace, app, version))

    async def delete_version(self, namespace: str, app: str, version: str) -> None:
        """Delete a version (the operator's webhook refuses while an environment deploys it)."""
        await self._version(namespace, app, version)
        await self.repos.app_versions.delete(namespace, AppVersion.object_name(app, version))

    async def _version(self, namespace: str, app: str, version: str) -> AppVersion:
        found = await self.repos.app_versions.find(namespace, AppVersion.object_name(app, version))
        if found is None:
            raise NotFoundError(f"app {app!r} has no version {version}", {"app": app, "version": version})
        return found
