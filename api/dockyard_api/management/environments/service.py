"""Environments: create, deploy, roll back, delete, as the calling Kubernetes user.

Deploying and rolling back both set the Environment's ``spec.appVersion`` as the calling user; the
operator's mutating webhook records who and when from the request's userInfo, and the operator
appends the history entry. Deleting revokes the environment's API keys
(:class:`~dockyard_api.management.keys.service.KeyService`) and stamps its audit record.
How a service is built and what it acts as: :mod:`dockyard_api.management.base`.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from datetime import UTC, datetime
from typing import Any, NamedTuple

from pydantic import TypeAdapter, ValidationError

from dockyard_api.events import record_event
from dockyard_api.management.base import CallerService
from dockyard_api.management.keys.service import KeyService
from dockyard_api.management.schemas import (
    DeleteEnvironmentAnswer,
    Deploy,
    EnvironmentChange,
    EnvironmentCreate,
    EnvironmentList,
    EnvironmentSettings,
    EnvironmentView,
    Rollback,
)
from dockyard_core import audit, requestid
from dockyard_core.errors import ConflictError, DockyardError, InvalidError
from dockyard_core.mergepatch import merge_patch
from dockyard_core.resources.cel import RuleViolation
from dockyard_core.resources.v1alpha1 import API_VERSION, DEPLOY_REQUEST_ANNOTATION, Environment
from dockyard_core.resources.v1alpha1.environment import Access, EnvironmentSpec, WidgetSettings

_TIME = TypeAdapter(datetime)


def environment_view(env: Environment) -> EnvironmentView:
    return EnvironmentView(**_view_fields(env))


def _location(error: Any) -> list[str]:
    """A validation error's location; a failed CEL-twin rule adds the field it names (access.oidc)."""
    cause = (error.get("ctx") or {}).get("error")
    return [str(p) for p in error["loc"]] + list(cause.field_path if isinstance(cause, RuleViolation) else ())


def _view_fields(env: Environment) -> dict[str, Any]:
    meta, spec, st = env.metadata, env.spec, env.status
    urls = st.urls
    # an access or widget object that holds nothing is shown as absent (its defaults), as stored
    access = spec.access if spec.access is not None and spec.access.model_fields_set else None
    widget = spec.widget if spec.widget is not None and spec.widget.model_fields_set else None
    return {
        "name": spec.display_name or meta.name or "",
        "object_name": meta.name or "",
        "namespace": meta.namespace or "",
        "app": spec.app_ref,
        "description": spec.description,
        "app_version": spec.app_version or "draft",
        "active_version": st.active_version,
        "phase": st.phase,
        "web_client_url": urls.web_client_url if urls else None,
        "api_base_url": urls.api_base_url if urls else None,
        "widget_script_url": urls.widget_script_url if urls else None,
        "app_id": st.app_id,
        "curl_script": st.curl_script,
        "embed_code": st.embed_code,
        "access": access or Access(),
        "widget": widget or WidgetSettings(allowed_origins=[]),
        "rate_limits": spec.rate_limits,
        "pii": spec.pii,
        "history": st.history,
        "canary": spec.canary,
        "canary_state": st.canary,
        "slo": spec.slo,
        "slo_state": st.slo,
        "checklist": st.checklist,
        "conditions": st.conditions,
        "configuration": spec.configuration,
        "deleting_since": meta.deletion_timestamp,
    }


def _changed(env: Environment, message: str) -> EnvironmentChange:
    return EnvironmentChange(**_view_fields(env), message=message)


class Deployed(NamedTuple):
    """What a deploy did: the environment after it, and whether the version was the linked one already."""

    answer: EnvironmentChange
    redeploy: bool


class EnvironmentService(CallerService):
    """An App's environments and their deployments."""

    async def create_environment(self, namespace: str, app: str, body: EnvironmentCreate) -> EnvironmentView:
        spec: dict[str, Any] = {"appRef": app, "displayName": body.name, "description": body.description}
        if body.app_version:
            spec["appVersion"] = body.app_version
        if body.configuration:
            spec["configuration"] = body.configuration
        metadata = {"name": f"{app}-{body.name}", "annotations": requestid.as_annotation()}
        obj = {"apiVersion": API_VERSION, "kind": "Environment", "metadata": metadata, "spec": spec}
        return environment_view(await self.repos.environments.create(obj, namespace))

    async def list_environments(self, namespace: str, app: str) -> EnvironmentList:
        found = await self.repos.environments.select(namespace, fields={"spec.appRef": app})
        return EnvironmentList(items=[environment_view(e) for e in found])

    async def get_environment(self, namespace: str, name: str) -> EnvironmentView:
        return environment_view(await self.environment(namespace, name))

    async def deploy(self, namespace: str, name: str, body: Deploy) -> Deployed:
        """Link ``body.version``: another version is a Deploy; the linked one is deployed again (a Redeploy)."""
        await self._may_deploy(namespace)
        env = await self.environment(namespace, name)
        if env.spec.app_version == body.version:
            state = (
                "is already the active version"
                if env.status.active_version == body.version
                else f"is already linked (phase {env.status.phase or 'Pending'})"
            )
            message = (
                f"version {body.version} {state} of {name}: it is deployed again "
                "(a new history entry with action Redeploy)"
            )
            return Deployed(_changed(await self._set_version(namespace, name, body.version, "Redeploy"), message), True)
        message = f"deploying version {body.version} to {name} (a new history entry with action Deploy)"
        return Deployed(_changed(await self._set_version(namespace, name, body.version, "Deploy"), message), False)

    async def rollback(self, namespace: str, name: str, body: Rollback) -> EnvironmentChange:
        """Link a previous working version from the history (a ConflictError when it is none)."""
        await self._may_deploy(namespace)
        if not body.confirm:
            raise InvalidError("a rollback must be confirmed: send confirm: true", [{"field": "confirm"}])
        env = await self.environment(namespace, name)
        history = env.status.history
        # a previous working version: its deployment here became healthy (the environment was Active with
        # every model and tool it uses ready; docs/apps-environments.md, "Health")
        working = sorted({h.version for h in history if h.status == "Previous" and h.healthy is True})
        current = env.status.active_version or env.spec.app_version or "draft"
        if body.version in (current, env.spec.app_version):
            raise ConflictError(
                f"version {body.version} is the active version of {name}: there is nothing to roll back; "
                "to deploy it again, use deploy (a redeploy)",
                {"activeVersion": current, "previousWorkingVersions": working},
            )
        earlier = [h for h in history if h.status == "Previous" and h.version == body.version]
        if not earlier:
            raise ConflictError(
                f"version {body.version} is not a previous deployment of {name}",
                {"previousWorkingVersions": working},
            )
        if not any(h.healthy is True for h in earlier):
            raise ConflictError(
                f"version {body.version} never became healthy in {name} (deployed at "
                f"{', '.join(str(_TIME.dump_python(h.deployed_at, mode='json')) for h in earlier)}): "
                "roll back to a previous working version",
                {"previousWorkingVersions": working},
            )
        message = (
            f"rolling back {name} from {current} to version {body.version} (a new history entry with action Rollback)"
        )
        return _changed(await self._set_version(namespace, name, body.version, "Rollback"), message)

    async def delete_environment(self, namespace: str, name: str, confirm: str | None) -> DeleteEnvironmentAnswer:
        """Delete a created environment (``confirm``: its name): keys revoked first, audit record stamped."""
        env = await self.environment(namespace, name)
        if confirm not in {name, env.spec.display_name}:
            raise InvalidError(
                f"deleting an environment cannot be undone: confirm by sending ?confirm={name}",
                [{"field": "confirm", "message": f"must be {name!r}"}],
            )
        if env.spec.display_name == "draft":
            raise ConflictError("the draft environment exists as long as its App; delete the App instead")
        keys = KeyService(self.repos, self.auth)
        # revoke the keys first: from now on nothing authenticates at this environment
        secrets = await keys.secrets_of(namespace, name)
        await self.repos.environments.delete(namespace, name)
        await keys.drop(namespace, secrets)
        meta = env.to_manifest()["metadata"]
        stamp = audit.deletion_record(meta, env.spec.app_ref, datetime.now(UTC), self.user.username)
        with contextlib.suppress(DockyardError):  # best effort: the operator writes the record's other keys
            await self.dockyard.configmaps.apply(stamp, field_manager=audit.DELETION_MANAGER)
        return DeleteEnvironmentAnswer(
            deleted=name,
            audit_record=f"ConfigMap {namespace}/{audit.audit_record_name(meta)}",
            message="endpoints deactivated and API keys revoked; the model and tool deployments made through its "
            "public API are released (imported Models stay: they belong to the namespace); the audit log and "
            "usage statistics are kept",
        )

    async def change_settings(self, namespace: str, name: str, body: EnvironmentSettings) -> EnvironmentView:
        """Merge-patch the settings members of ``spec`` as the caller (RBAC: update of the Environment); the
        result is validated like the Environment, and an Event SettingsChanged names who changed what."""
        patch = body.spec_patch()
        if not patch:
            raise InvalidError(
                "nothing to change: send one or more of access, widget, rateLimits, configuration, pii",
                [{"field": "body", "message": "no settings member"}],
            )
        change = {"metadata": {"annotations": requestid.as_annotation()}, "spec": patch}
        for attempt in range(3):  # the operator may write the object between the read and the patch: read again
            env = await self.environment(namespace, name)
            try:
                EnvironmentSpec.model_validate(merge_patch(env.to_manifest()["spec"], patch))
            except ValidationError as exc:
                details = [{"field": ".".join(["body", *_location(e)]), "message": e["msg"]} for e in exc.errors()]
                shown = "; ".join(f"{d['field']}: {d['message']}" for d in details[:3])
                raise InvalidError(f"the settings are not valid: {shown}", details) from None
            try:
                patched = await self.repos.environments.merge(
                    namespace, name, change, resource_version=env.metadata.resource_version
                )
                break
            except ConflictError:
                if attempt == 2:
                    raise
        changes = ", ".join(f"{path}={json.dumps(value)}" for path, value in changed_members(patch))
        await record_event(
            self.repos.kube,
            patched.to_manifest(),
            reason="SettingsChanged",
            message=f"settings changed by {self.user.username}: {changes}",
        )
        return environment_view(patched)

    async def _may_deploy(self, namespace: str) -> None:
        await self.auth.require(
            self.user, verb="create", namespace=namespace, resource="environments", subresource="deploy"
        )

    async def _set_version(self, namespace: str, name: str, version: str, action: str) -> Environment:
        """Link ``version``; the deploy request annotation makes it a new deployment even when the version
        stays (a redeploy), and tells the admission webhook what was asked (it records the action)."""
        request = f"{action} {uuid.uuid4().hex}"
        patch = {
            "metadata": {"annotations": {DEPLOY_REQUEST_ANNOTATION: request, **requestid.as_annotation()}},
            "spec": {"appVersion": version},
        }
        return await self.repos.environments.merge(namespace, name, patch)


def changed_members(patch: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """The leaves of a merge patch as (dotted path, value): ``widget.allowedOrigins``, ``access.webClient``
    (a list is one leaf; ``None`` means removed)."""
    out: list[tuple[str, Any]] = []
    for key, value in patch.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out += changed_members(value, f"{path}.")
        else:
            out.append((path, value))
    return out
