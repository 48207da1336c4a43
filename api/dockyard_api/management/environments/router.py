"""Management: Environments (deploy, rollback, history, delete) and their API keys.

Deploying and rolling back both set the Environment's ``spec.appVersion`` as the calling user; the
operator's mutating webhook records who and when from the request's userInfo, and the operator
appends the history entry. API keys are Secrets no user touches directly: the facade checks
``environments/apikeys`` permissions with a SubjectAccessReview and writes them itself.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status

from dockyard_api.deps import AppName, Auth, EnvName, KeyId, Kube, KubeUser, NamespaceParam
from dockyard_api.events import record_event
from dockyard_api.management.schemas import Deploy, EnvironmentCreate, KeyCreate, KeyView, NewKeyView, Rollback
from dockyard_core import apikeys, audit, requestid
from dockyard_core.errors import ConflictError, InvalidError, NotFoundError
from dockyard_core.kubeclient import AsyncKube, KubeError, User
from dockyard_core.resources.v1alpha1 import API_KEY_LABEL, API_VERSION, DEPLOY_REQUEST_ANNOTATION, ENVIRONMENT_LABEL

router = APIRouter(prefix="/api/v1/namespaces/{namespace}", tags=["environments and API keys"])

KEYS_CHANGED_ANNOTATION = "dockyard.dev/api-keys-changed-at"


def environment_view(obj: dict[str, Any]) -> dict[str, Any]:
    meta, spec, st = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    urls = st.get("urls") or {}
    return {
        "name": spec.get("displayName") or meta["name"],
        "objectName": meta["name"],
        "namespace": meta["namespace"],
        "app": spec.get("appRef"),
        "description": spec.get("description", ""),
        "appVersion": spec.get("appVersion") or "draft",
        "activeVersion": st.get("activeVersion"),
        "phase": st.get("phase"),
        "webClientUrl": urls.get("webClientUrl"),
        "apiBaseUrl": urls.get("apiBaseUrl"),
        "widgetScriptUrl": urls.get("widgetScriptUrl"),
        "appId": st.get("appId"),
        "curlScript": st.get("curlScript"),
        "embedCode": st.get("embedCode"),
        "access": spec.get("access") or {"webClient": "signIn"},
        "widget": spec.get("widget") or {"allowedOrigins": []},
        "history": st.get("history", []),
        "checklist": st.get("checklist", []),
        "conditions": st.get("conditions", []),
        "configuration": spec.get("configuration", {}),
        "deletingSince": meta.get("deletionTimestamp"),
    }


@router.post(
    "/apps/{app}/environments",
    status_code=status.HTTP_201_CREATED,
    summary="Create an environment (name, description, app version)",
)
async def create_environment(
    namespace: NamespaceParam, app: AppName, body: EnvironmentCreate, user: KubeUser, kube: Kube
) -> dict[str, Any]:
    spec: dict[str, Any] = {"appRef": app, "displayName": body.name, "description": body.description}
    if body.app_version:
        spec["appVersion"] = body.app_version
    if body.configuration:
        spec["configuration"] = body.configuration
    metadata = {"name": f"{app}-{body.name}", "annotations": requestid.as_annotation()}
    obj = {"apiVersion": API_VERSION, "kind": "Environment", "metadata": metadata, "spec": spec}
    created = await kube.request("POST", kube.custom_path(namespace, "environments"), json=obj, as_user=user)
    return environment_view(created)


@router.get("/apps/{app}/environments", summary="List an App's environments (draft and all created ones)")
async def list_environments(namespace: NamespaceParam, app: AppName, user: KubeUser, kube: Kube) -> dict[str, Any]:
    found = await kube.request(
        "GET", kube.custom_path(namespace, "environments"), params={"fieldSelector": f"spec.appRef={app}"}, as_user=user
    )
    return {"items": [environment_view(o) for o in found.get("items", [])]}


@router.get(
    "/environments/{environment}",
    summary="An environment: linked version, URLs, cURL script, deployment history, pre-production checklist",
)
async def get_environment(
    namespace: NamespaceParam, environment: EnvName, user: KubeUser, kube: Kube
) -> dict[str, Any]:
    return environment_view(await _environment(kube, user, namespace, environment))


@router.post(
    "/environments/{environment}/deploy",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Deploy a version to the environment (recorded in its history)",
    description="202: another version is being deployed (a history entry with action Deploy). 200: the version is "
    "the one already linked: it is deployed again (a history entry with action Redeploy) and `message` says so.",
)
async def deploy(
    namespace: NamespaceParam,
    environment: EnvName,
    body: Deploy,
    user: KubeUser,
    kube: Kube,
    auth: Auth,
    response: Response,
) -> dict[str, Any]:
    await auth.require(user, verb="create", namespace=namespace, resource="environments", subresource="deploy")
    env = await _environment(kube, user, namespace, environment)
    spec, st = env.get("spec") or {}, env.get("status") or {}
    if spec.get("appVersion") == body.version:
        response.status_code = status.HTTP_200_OK
        state = (
            "is already the active version"
            if st.get("activeVersion") == body.version
            else f"is already linked (phase {st.get('phase') or 'Pending'})"
        )
        view = environment_view(await _set_version(kube, user, namespace, environment, body.version, "Redeploy"))
        view["message"] = (
            f"version {body.version} {state} of {environment}: it is deployed again "
            "(a new history entry with action Redeploy)"
        )
        return view
    view = environment_view(await _set_version(kube, user, namespace, environment, body.version, "Deploy"))
    view["message"] = f"deploying version {body.version} to {environment} (a new history entry with action Deploy)"
    return view


@router.post(
    "/environments/{environment}/rollback",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Roll back to a previous working version from the history (a new history entry)",
    description="409 when the version is the active one, is not in the history as Previous, or none of its "
    "deployments to this environment became healthy (not a working version).",
)
async def rollback(
    namespace: NamespaceParam, environment: EnvName, body: Rollback, user: KubeUser, kube: Kube, auth: Auth
) -> dict[str, Any]:
    await auth.require(user, verb="create", namespace=namespace, resource="environments", subresource="deploy")
    if not body.confirm:
        raise InvalidError("a rollback must be confirmed: send confirm: true", [{"field": "confirm"}])
    env = await _environment(kube, user, namespace, environment)
    spec, st = env.get("spec") or {}, env.get("status") or {}
    history = st.get("history", [])
    working = sorted({h["version"] for h in history if h.get("status") == "Previous" and h.get("healthy") is not False})
    current = st.get("activeVersion") or spec.get("appVersion") or "draft"
    if body.version in (current, spec.get("appVersion")):
        raise ConflictError(
            f"version {body.version} is the active version of {environment}: there is nothing to roll back; "
            "to deploy it again, use deploy (a redeploy)",
            {"activeVersion": current, "previousWorkingVersions": working},
        )
    earlier = [h for h in history if h.get("status") == "Previous" and h["version"] == body.version]
    if not earlier:
        raise ConflictError(
            f"version {body.version} is not a previous deployment of {environment}",
            {"previousWorkingVersions": working},
        )
    if all(h.get("healthy") is False for h in earlier):
        raise ConflictError(
            f"version {body.version} never became healthy in {environment} (deployed at "
            f"{', '.join(str(h.get('deployedAt')) for h in earlier)}): roll back to a previous working version",
            {"previousWorkingVersions": working},
        )
    view = environment_view(await _set_version(kube, user, namespace, environment, body.version, "Rollback"))
    view["message"] = (
        f"rolling back {environment} from {current} to version {body.version} "
        "(a new history entry with action Rollback)"
    )
    return view


@router.delete(
    "/environments/{environment}",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Delete an environment (confirm with its name): endpoints off, keys revoked, workloads released",
)
async def delete_environment(
    namespace: NamespaceParam,
    environment: EnvName,
    user: KubeUser,
    kube: Kube,
    auth: Auth,
    confirm: Annotated[str | None, Query(description="the environment's name, echoed back to confirm")] = None,
) -> dict[str, Any]:
    env = await _environment(kube, user, namespace, environment)
    names = {environment, (env.get("spec") or {}).get("displayName")}
    if confirm not in names:
        raise InvalidError(
            f"deleting an environment cannot be undone: confirm by sending ?confirm={environment}",
            [{"field": "confirm", "message": f"must be {environment!r}"}],
        )
    if (env.get("spec") or {}).get("displayName") == "draft":
        raise ConflictError("the draft environment exists as long as its App; delete the App instead")
    # revoke the keys first: from now on nothing authenticates at this environment
    keys = await _key_secrets(kube, namespace, environment)
    await kube.request("DELETE", kube.custom_path(namespace, "environments", environment), as_user=user)
    for secret in keys:
        with contextlib.suppress(KubeError):
            await kube.request("DELETE", kube.core_path(namespace, "secrets", secret["metadata"]["name"]))
        stored = apikeys.stored_key(secret)
        if stored:
            auth.forget_key(namespace, stored.key_id)
    stamp = audit.deletion_record(env["metadata"], env["spec"]["appRef"], datetime.now(UTC), user.username)
    with contextlib.suppress(KubeError):
        await kube.request(
            "PATCH",
            kube.core_path(namespace, "configmaps", stamp["metadata"]["name"]),
            json=stamp,
            params={"fieldManager": audit.DELETION_MANAGER, "force": "true"},
            content_type="application/apply-patch+yaml",
        )
    return {
        "deleted": environment,
        "auditRecord": f"ConfigMap {namespace}/{audit.audit_record_name(env['metadata'])}",
        "message": "endpoints deactivated and API keys revoked; the model and tool deployments made through its "
        "public API are released (imported Models stay: they belong to the namespace); the audit log and usage "
        "statistics are kept",
    }


# --- API keys ----------------------------------------------------------------------------------------


@router.post(
    "/environments/{environment}/apikeys",
    status_code=status.HTTP_201_CREATED,
    summary="Generate an API key (the key is in this answer only: it cannot be viewed again)",
)
async def create_key(
    namespace: NamespaceParam, environment: EnvName, body: KeyCreate, user: KubeUser, kube: Kube, auth: Auth
) -> NewKeyView:
    await auth.require(user, verb="create", namespace=namespace, resource="environments", subresource="apikeys")
    env = await _environment(kube, user, namespace, environment)
    key = apikeys.generate()
    secret = apikeys.key_secret(
        key=key, name=body.name, environment=env, created_by=user.username, created_at=datetime.now(UTC)
    )
    created = await kube.request("POST", kube.core_path(namespace, "secrets"), json=secret)
    await _keys_changed(kube, env, f'API key "{body.name}" ({key.prefix}) generated by {user.username}')
    info = apikeys.key_info(created)
    assert info is not None
    return NewKeyView(key=key.value, **info.__dict__)


@router.get("/environments/{environment}/apikeys", summary="List API keys (name, prefix, created, last used)")
async def list_keys(
    namespace: NamespaceParam, environment: EnvName, user: KubeUser, kube: Kube, auth: Auth
) -> dict[str, list[KeyView]]:
    await auth.require(user, verb="list", namespace=namespace, resource="environments", subresource="apikeys")
    await _environment(kube, user, namespace, environment)
    infos = [i for i in map(apikeys.key_info, await _key_secrets(kube, namespace, environment)) if i is not None]
    return {"items": [KeyView(**i.__dict__) for i in sorted(infos, key=lambda i: i.created_at or "")]}


@router.delete(
    "/environments/{environment}/apikeys/{key_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Revoke an API key",
)
async def revoke_key(
    namespace: NamespaceParam, environment: EnvName, key_id: KeyId, user: KubeUser, kube: Kube, auth: Auth
) -> None:
    await auth.require(user, verb="delete", namespace=namespace, resource="environments", subresource="apikeys")
    env = await _environment(kube, user, namespace, environment)
    path = kube.core_path(namespace, "secrets", apikeys.secret_name(key_id))
    try:
        secret = await kube.request("GET", path)
    except KubeError as exc:
        if exc.status == 404:
            raise NotFoundError(f"environment {environment!r} has no API key {key_id!r}") from exc
        raise
    stored = apikeys.stored_key(secret)
    if stored is None or stored.environment != environment:
        raise NotFoundError(f"environment {environment!r} has no API key {key_id!r}")
    await kube.request("DELETE", path)
    auth.forget_key(namespace, key_id)
    await _keys_changed(kube, env, f"API key {apikeys.display_prefix(key_id)} revoked by {user.username}")


# --- helpers -----------------------------------------------------------------------------------------


async def _environment(kube: AsyncKube, user: User, namespace: str, name: str) -> dict[str, Any]:
    try:
        env: dict[str, Any] = await kube.request("GET", kube.custom_path(namespace, "environments", name), as_user=user)
    except KubeError as exc:
        if exc.status == 404:
            raise NotFoundError(f"environment {name!r} not found in namespace {namespace!r}") from exc
        raise
    return env


async def _key_secrets(kube: AsyncKube, namespace: str, environment: str) -> list[dict[str, Any]]:
    found = await kube.request(
        "GET",
        kube.core_path(namespace, "secrets"),
        params={"labelSelector": f"{API_KEY_LABEL}=true,{ENVIRONMENT_LABEL}={environment}"},
    )
    items: list[dict[str, Any]] = found.get("items", [])
    return items


async def _set_version(
    kube: AsyncKube, user: User, namespace: str, name: str, version: str, action: str
) -> dict[str, Any]:
    """Link ``version``; the deploy request annotation makes it a new deployment even when the version
    stays (a redeploy), and tells the admission webhook what was asked (it records the action)."""
    request = f"{action} {uuid.uuid4().hex}"
    patched: dict[str, Any] = await kube.request(
        "PATCH",
        kube.custom_path(namespace, "environments", name),
        json={
            "metadata": {"annotations": {DEPLOY_REQUEST_ANNOTATION: request, **requestid.as_annotation()}},
            "spec": {"appVersion": version},
        },
        content_type="application/merge-patch+json",
        as_user=user,
    )
    return patched


async def _keys_changed(kube: AsyncKube, env: dict[str, Any], message: str) -> None:
    """Tell the operator (which recomputes the checklist) and kubectl describe that the keys changed."""
    meta = env["metadata"]
    stamp = datetime.now(UTC).isoformat(timespec="microseconds")
    await kube.request(
        "PATCH",
        kube.custom_path(meta["namespace"], "environments", meta["name"]),
        json={"metadata": {"annotations": {KEYS_CHANGED_ANNOTATION: stamp}}},
        content_type="application/merge-patch+json",
    )
    await record_event(kube, env, reason="ApiKeysChanged", message=message)
