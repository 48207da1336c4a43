"""kopf handlers for Apps, AppVersions and Environments, and the admission webhooks guarding them.

- An App gets its ``draft`` Environment (``<app>-draft``) when it appears; a change of the App (its
  draft edited or restored) reconciles the environments serving the draft at once.
- An Environment is reconciled level-based: its deployment history (one entry per change of the
  linked version, identified by the deployed-at stamp the mutating webhook writes), generated URLs
  and cURL script, the ToolDeployments of the tool versions it deploys, the pre-production checklist,
  the AppVersions' ``deployedIn``, and an audit record (ConfigMap) that outlives it.
- Webhooks: a Tool used by a deployed version cannot be deleted; an AppVersion is validated on
  create and cannot be deleted while deployed; an Environment can only link an existing version;
  who deployed (and when) comes from the admission request's userInfo, never from the client.
"""

from __future__ import annotations

import contextlib
import json
import logging
from datetime import UTC, datetime
from typing import Any, cast

import kopf

from dockyard_core import apikeys, audit
from dockyard_core.clock import now
from dockyard_core.conditions import transition
from dockyard_core.kubeclient import APPLY, FIELD_MANAGER, MERGE, AsyncKube, KubeError, guarded
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import (
    API_KEY_LABEL,
    API_VERSION,
    DEPLOY_ACTION_ANNOTATION,
    DEPLOY_REQUEST_ANNOTATION,
    DEPLOYED_AT_ANNOTATION,
    DEPLOYED_BY_ANNOTATION,
    ENVIRONMENT_LABEL,
    READY,
    VERSION,
    HistoryEntry,
)
from dockyard_operator import environments as envs
from dockyard_operator.reconcile import Context, snapshot
from dockyard_operator.settings import operator_settings

SETTINGS = operator_settings()
log = logging.getLogger(__name__)


# --- indexes -----------------------------------------------------------------------------------------


@kopf.index(GROUP, VERSION, "appversions")
def appversions(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    return {(namespace or "", name): snapshot(body)}


@kopf.index(GROUP, VERSION, "environments")
def environment_index(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    return {(namespace or "", name): snapshot(body)}


def _in_namespace(index: kopf.Index[Any, Any], namespace: str) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for (ns, name), store in index.items():
        if ns == namespace:
            out.extend((name, obj) for obj in store)
    return out


# --- API calls (the operator's one async client) ----------------------------------------------------


class Api:
    """The calls of the App, AppVersion and Environment handlers, on the operator's :class:`AsyncKube`."""

    def __init__(self, http: AsyncKube) -> None:
        self.http = http

    async def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self.http.request("GET", AsyncKube.custom_path(namespace, plural, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def create(self, plural: str, namespace: str, obj: dict[str, Any]) -> bool:
        try:
            await self.http.request("POST", AsyncKube.custom_path(namespace, plural), json=obj)
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def list_objects(self, plural: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        params = {"labelSelector": selector} if selector else None
        found = await self.http.request("GET", AsyncKube.custom_path(namespace, plural), params=params)
        items: list[dict[str, Any]] = found.get("items", [])
        return items

    async def apply_custom(self, plural: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        path = AsyncKube.custom_path(meta["namespace"], plural, meta["name"])
        params = {"fieldManager": FIELD_MANAGER, "force": "true"}
        await self.http.request("PATCH", path, json=obj, params=params, content_type=APPLY)

    async def delete_custom(self, plural: str, namespace: str, name: str) -> None:
        with contextlib.suppress(KubeError):
            await self.http.request("DELETE", AsyncKube.custom_path(namespace, plural, name))

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> bool:
        """Merge-patch the status; with ``resource_version``, only if the object is still at it (False if
        not: a newer version exists and its own event reconciles it)."""
        body = guarded({"status": status}, resource_version or None)
        path = AsyncKube.custom_path(namespace, plural, name, "status")
        try:
            await self.http.request("PATCH", path, json=body, content_type=MERGE)
        except KubeError as exc:
            if exc.status == 409 and resource_version:
                return False
            raise
        return True

    async def key_secrets(self, namespace: str, environment: str) -> list[dict[str, Any]]:
        params = {"labelSelector": f"{API_KEY_LABEL}=true,{ENVIRONMENT_LABEL}={environment}"}
        found = await self.http.request("GET", AsyncKube.core_path(namespace, "secrets"), params=params)
        items: list[dict[str, Any]] = found.get("items", [])
        return items

    async def delete_secret(self, namespace: str, name: str) -> None:
        with contextlib.suppress(KubeError):
            await self.http.request("DELETE", AsyncKube.core_path(namespace, "secrets", name))

    async def apply_config_map(self, obj: dict[str, Any], manager: str = FIELD_MANAGER) -> None:
        meta = obj["metadata"]
        path = AsyncKube.core_path(meta["namespace"], "configmaps", meta["name"])
        await self.http.request(
            "PATCH", path, json=obj, params={"fieldManager": manager, "force": "true"}, content_type=APPLY
        )

    async def _config_map_data(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            found = await self.http.request("GET", AsyncKube.core_path(namespace, "configmaps", name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        data: dict[str, str] = found.get("data") or {}
        return data

    async def recorded_keys(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The keys the environment's audit record already lists (none when there is no record yet)."""
        data = await self._config_map_data(namespace, name)
        return [] if data is None else audit.recorded_keys(data)

    async def deletion_stamped(self, namespace: str, name: str) -> bool:
        """Whether the facade already wrote who deleted the environment (it knows; kubectl deletes do not tell)."""
        data = await self._config_map_data(namespace, name)
        return data is not None and "deletion.json" in data


def _api(memo: kopf.Memo) -> Api:
    ctx: Context = memo.ctx
    return Api(ctx.kube.http)


# --- Apps: the draft environment ---------------------------------------------------------------------


@kopf.on.create(GROUP, VERSION, "apps")
@kopf.on.resume(GROUP, VERSION, "apps")
async def ensure_draft_environment(name: str, namespace: str | None, body: kopf.Body, memo: Any, **_: Any) -> None:
    """Every App has a default environment named draft, for development and testing."""
    env = {
        "apiVersion": API_VERSION,
        "kind": "Environment",
        "metadata": {
            "name": f"{name}-draft",
            "ownerReferences": [
                {"apiVersion": API_VERSION, "kind": "App", "name": name, "uid": body["metadata"]["uid"],
                 "blockOwnerDeletion": True}
            ],
        },
        "spec": {"appRef": name, "displayName": "draft", "description": "Development and testing (the App's draft)"},
    }  # fmt: skip
    if await _api(memo).create("environments", namespace or "", env):
        kopf.info(body, reason="DraftEnvironment", message=f"created the draft environment {name}-draft")


# --- Environments ------------------------------------------------------------------------------------


@kopf.on.event(GROUP, VERSION, "environments")
async def environment_changed(type: str | None, body: kopf.Body, memo: kopf.Memo, **kw: Any) -> None:
    if type == "DELETED" or body["metadata"].get("deletionTimestamp"):
        return
    await reconcile_environment(memo, snapshot(body), kw)


@kopf.timer(GROUP, VERSION, "environments", interval=SETTINGS.environment_interval_seconds)
async def environment_timer(body: kopf.Body, memo: kopf.Memo, **kw: Any) -> None:
    if not body["metadata"].get("deletionTimestamp"):
        await reconcile_environment(memo, snapshot(body), kw)


@kopf.on.event(GROUP, VERSION, "apps")
async def app_changed(type: str | None, namespace: str | None, name: str, memo: kopf.Memo, **kw: Any) -> None:
    """An edited or restored draft reaches the environments that serve the draft at once (the watch
    event), not at their next periodic re-check."""
    if type not in ("MODIFIED", "ADDED"):
        return  # the initial listing: every environment is reconciled by its own events anyway
    for env_name, env in _in_namespace(kw["environment_index"], namespace or ""):
        spec = env.get("spec") or {}
        if spec.get("appRef") == name and not spec.get("appVersion"):
            log.debug("app %s/%s changed: reconciling %s", namespace, name, env_name)
            await reconcile_environment(memo, env, kw)


@kopf.on.event(GROUP, VERSION, "tooldeployments", labels={ENVIRONMENT_LABEL: kopf.PRESENT})
async def environment_tool_changed(namespace: str | None, labels: kopf.Labels, memo: Any, **kw: Any) -> None:
    for env in kw["environment_index"].get((namespace, labels[ENVIRONMENT_LABEL]), []):
        await reconcile_environment(memo, env, kw)


async def reconcile_environment(memo: kopf.Memo, env: dict[str, Any], kw: dict[str, Any]) -> None:
    ctx: Context = memo.ctx
    api = _api(memo)
    meta, spec = env["metadata"], env["spec"]
    namespace, name, app = meta["namespace"], meta["name"], spec["appRef"]
    if meta.get("deletionTimestamp") or meta["uid"] in ctx.deleted_environments:
        return  # an index or timer may still hold the object: its last word is the deletion record
    async with ctx.lock(meta["uid"]):
        version = envs.desired_version(spec)
        app_obj = await api.get("apps", namespace, app)
        content: dict[str, Any] | None = None
        problem: tuple[str, str] | None = None
        if app_obj is None:
            problem = ("AppNotFound", f"app {app!r} does not exist")
        elif version == envs.DRAFT:
            content = app_obj.get("spec") or {}
        else:
            found = await api.get("appversions", namespace, envs.version_object(app, version))
            if found is None:
                problem = ("VersionNotFound", f"app {app!r} has no version {version}")
            else:
                content = found["spec"]

        status = env.get("status") or {}
        history = [HistoryEntry.model_validate(h) for h in status.get("history") or []]
        notes = meta.get("annotations") or {}
        deployed_at = _parse_time(notes.get(DEPLOYED_AT_ANNOTATION)) or _parse_time(meta.get("creationTimestamp"))
        deployed_by = notes.get(DEPLOYED_BY_ANNOTATION) or "unknown (no admission record)"
        action = notes.get(DEPLOY_ACTION_ANNOTATION) or "Deploy"
        new_history = history
        if content is not None and deployed_at is not None:
            new_history = envs.next_history(history, version, deployed_at, deployed_by, action)

        tool_jobs: dict[str, str | None] = {}
        if content is not None:
            wanted = envs.tool_deployments(env, content)
            for tdep in wanted:
                try:
                    await api.apply_custom("tooldeployments", tdep)
                except KubeError as exc:
                    problem = ("ToolDeploymentRejected", f"{tdep['metadata']['name']}: {exc.message}")
            wanted_names = {t["metadata"]["name"] for t in wanted}
            for tdep in await api.list_objects("tooldeployments", namespace, f"{ENVIRONMENT_LABEL}={name}"):
                tname = tdep["metadata"]["name"]
                if tname not in wanted_names:
                    await api.delete_custom("tooldeployments", namespace, tname)
                else:
                    tool_jobs[tname] = ((tdep.get("status") or {}).get("job") or {}).get("status")
        keys = await api.key_secrets(namespace, name)
        items = envs.checklist(
            content=content,
            tool_jobs=tool_jobs,
            key_count=len(keys),
            version_found=content is not None,
            rate_limits=spec.get("rateLimits"),
        )
        urls = envs.urls(ctx.settings.public_url, namespace, name)
        if problem:
            phase, reason, message = "Failed", problem[0], problem[1]
        elif any(s == "FAILED" for s in tool_jobs.values()):
            phase, reason, message = "Failed", "ToolDeploymentFailed", "a tool deployment FAILED: see its dock status"
        elif any(s != "SUCCESS" for s in tool_jobs.values()):
            phase, reason, message = "Deploying", "ToolsDeploying", f"version {version}: tools are being deployed"
        else:
            phase, reason, message = "Active", "Deployed", f"version {version} is deployed"
        added = new_history is not history
        new_history = envs.record_health(new_history, version, phase)
        new_status = {
            "observedGeneration": meta.get("generation"),
            "phase": phase,
            "activeVersion": version if content is not None else status.get("activeVersion"),
            "appId": app,
            "urls": {
                "webClientUrl": urls.web_client,
                "apiBaseUrl": urls.api_base,
                "widgetScriptUrl": urls.widget_script,
            },
            "curlScript": envs.curl_script(urls.api_base, app),
            "embedCode": envs.embed_code(urls.widget_script, app),
            "history": [h.model_dump(mode="json", by_alias=True) for h in new_history],
            "checklist": [c.model_dump(mode="json", by_alias=True) for c in items],
            "conditions": _conditions(status.get("conditions") or [], phase, reason, message, meta.get("generation")),
        }
        if _differs(status, new_status):
            # guarded: a reconcile from an older snapshot (an index may lag) must not roll history back
            if not await api.patch_status("environments", namespace, name, new_status, meta.get("resourceVersion")):
                return
            if added:
                verb = {"Redeploy": "redeployed", "Rollback": "rolled back to"}.get(action, "deployed")
                what = f"version {version} {verb}" if action != "Rollback" else f"{verb} version {version}"
                kopf.info(cast(Any, env), reason="Deployed", message=f"{what} by {deployed_by}")
            if problem and status.get("phase") != "Failed":
                kopf.warn(cast(Any, env), reason=problem[0], message=problem[1])
        await _sync_deployed_in(
            ctx, api, namespace, app, kw.get("appversions"), kw.get("environment_index"), env, new_status
        )
        await _keep_audit_record(ctx, api, env, new_status, keys)


def _conditions(
    current: list[dict[str, Any]], phase: str, reason: str, message: str, generation: int | None
) -> list[dict[str, Any]]:
    return [transition(current, READY, phase == "Active", reason, message, now(), generation)]


def _differs(current: dict[str, Any], new: dict[str, Any]) -> bool:
    return any(json.dumps(current.get(k), sort_keys=True) != json.dumps(v, sort_keys=True) for k, v in new.items())


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


async def _sync_deployed_in(
    ctx: Context,
    api: Api,
    namespace: str,
    app: str,
    versions_index: kopf.Index[Any, Any] | None,
    env_index: kopf.Index[Any, Any] | None,
    env: dict[str, Any],
    new_status: dict[str, Any],
) -> None:
    """Each AppVersion of the App lists the environments where it is Active (level-based)."""
    if versions_index is None or env_index is None:
        return
    name = env["metadata"]["name"]
    current = {n: o for n, o in _in_namespace(env_index, namespace)}
    current[name] = {**env, "status": new_status}
    for vname, version in _in_namespace(versions_index, namespace):
        vspec = version.get("spec") or {}
        if vspec.get("appRef") != app:
            continue
        active = sorted(
            n
            for n, e in current.items()
            if (e.get("spec") or {}).get("appRef") == app
            and (e.get("status") or {}).get("activeVersion") == vspec.get("version")
        )
        if sorted((version.get("status") or {}).get("deployedIn") or []) != active:
            with contextlib.suppress(KubeError):
                await api.patch_status("appversions", namespace, vname, {"deployedIn": active})


async def _keep_audit_record(
    ctx: Context, api: Api, env: dict[str, Any], status: dict[str, Any], keys: list[dict[str, Any]]
) -> None:
    """The record that outlives the environment: kept current, never owned by it."""
    infos = [i.__dict__ for i in map(apikeys.key_info, keys) if i is not None]
    record = audit.audit_record({**env, "status": status}, infos)
    digest = json.dumps(record, sort_keys=True)
    cache = ctx.audit_digests
    if cache.get(env["metadata"]["uid"]) != digest:
        await api.apply_config_map(record)
        cache[env["metadata"]["uid"]] = digest


@kopf.on.delete(GROUP, VERSION, "environments", optional=True)
async def environment_deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Best effort on top of garbage collection: revoke the keys now and stamp the audit record."""
    ctx: Context = memo.ctx
    api = _api(memo)
    env = snapshot(body)
    meta = env["metadata"]
    ctx.deleted_environments.add(meta["uid"])
    ctx.forget(meta["uid"])
    keys: list[dict[str, Any]] = await api.key_secrets(meta["namespace"], meta["name"])
    infos = [i.__dict__ for i in map(apikeys.key_info, keys) if i is not None]
    try:
        # the facade may have revoked keys already: what the record listed stays part of the usage
        recorded = await api.recorded_keys(meta["namespace"], audit.audit_record_name(meta))
        await api.apply_config_map(audit.audit_record(env, audit.merged_keys(recorded, infos)))
        if not await api.deletion_stamped(meta["namespace"], audit.audit_record_name(meta)):
            stamp = audit.deletion_record(meta, env["spec"].get("appRef", ""), now(), None)
            await api.apply_config_map(stamp, audit.DELETION_MANAGER)
    except KubeError as exc:  # e.g. the namespace is going: the record kept by the reconciles stays as it was
        log.warning("audit record of %s/%s not stamped: %s", meta["namespace"], meta["name"], exc.message)
    for key in keys:
        await api.delete_secret(meta["namespace"], key["metadata"]["name"])
    for tdep in await api.list_objects("tooldeployments", meta["namespace"], f"{ENVIRONMENT_LABEL}={meta['name']}"):
        await api.delete_custom("tooldeployments", meta["namespace"], tdep["metadata"]["name"])


# --- admission webhooks ------------------------------------------------------------------------------

IGNORE_FAILURES = False
"""failurePolicy Fail, locally (the configurations the operator writes itself) as in the chart's default:
while no operator answers, the writes the webhooks check are refused rather than let through unchecked.
The trade-off is documented in docs/reliability.md ("Admission webhooks fail closed")."""


async def _read_from_api(memo: Any, namespace: str) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """AppVersions and Environments as the API server has them now (not the indexes, which may lag
    behind a status change by a moment: a refusal or a permission must not depend on that)."""
    api = _api(memo)
    versions = await api.list_objects("appversions", namespace, "")
    environments = await api.list_objects("environments", namespace, "")
    return versions, [(e["metadata"]["name"], e) for e in environments]


@kopf.on.validate(GROUP, VERSION, "tools", id="validate-tool", operations=["DELETE"], ignore_failures=IGNORE_FAILURES)
async def validate_tool(body: kopf.Body, memo: Any, **kw: Any) -> None:
    tool = kw.get("old") or body
    namespace, spec = tool["metadata"]["namespace"], tool.get("spec") or {}
    versions, environments = await _read_from_api(memo, namespace)
    apps = await _api(memo).list_objects("apps", namespace, "")
    holders = envs.tool_holders(spec.get("name", ""), spec.get("version", ""), versions, environments, apps)
    if holders:
        used = "; ".join(
            f"{v if v.startswith('draft of') else f'app version {v}'} (deployed in {', '.join(e)})"
            for v, e in sorted(holders.items())
        )
        raise kopf.AdmissionError(
            f"tool {tool['metadata']['name']} is linked to an active version and cannot be deleted: used by {used}",
            code=409,
        )


@kopf.on.validate(
    GROUP, VERSION, "appversions", id="validate-appversion", operations=["CREATE", "DELETE"],
    ignore_failures=IGNORE_FAILURES,
)  # fmt: skip
async def validate_appversion(body: kopf.Body, memo: Any, **kw: Any) -> None:
    if kw.get("operation") == "DELETE":
        version = kw.get("old") or body
        namespace, spec = version["metadata"]["namespace"], version.get("spec") or {}
        _, environments = await _read_from_api(memo, namespace)
        held = envs.environments_deploying(spec.get("appRef", ""), spec.get("version", ""), environments)
        if held:
            raise kopf.AdmissionError(
                f"app version {version['metadata']['name']} is deployed in environment(s) {', '.join(held)}: "
                "deploy another version there (or delete those environments) first",
                code=409,
            )
        return
    api = _api(memo)
    namespace, spec = body["metadata"]["namespace"], dict(body.get("spec") or {})
    tools = {f"{t['name']}-{t['version']}" for t in spec.get("toolVersions") or []}
    models = {a["model"] for a in spec.get("agents") or [] if a.get("model")}
    tool_exists = {t: await api.get("tools", namespace, t) is not None for t in tools}
    model_exists = {m: await api.get("modeldeployments", namespace, m) is not None for m in models}
    app_exists = await api.get("apps", namespace, spec.get("appRef", "")) is not None
    problems = envs.version_problems(spec, tool_exists=tool_exists, model_exists=model_exists, app_exists=app_exists)
    if problems:
        raise kopf.AdmissionError("the version is not valid: " + "; ".join(problems), code=422)


@kopf.on.validate(
    GROUP, VERSION, "environments", id="validate-environment", operations=["CREATE", "UPDATE"],
    ignore_failures=IGNORE_FAILURES,
)  # fmt: skip
async def validate_environment(body: kopf.Body, memo: Any, **kw: Any) -> None:
    spec = body.get("spec") or {}
    version = spec.get("appVersion")
    old = kw.get("old")
    if not version or (old is not None and (old.get("spec") or {}).get("appVersion") == version):
        return
    found = await _api(memo).get("appversions", body["metadata"]["namespace"], f"{spec['appRef']}-{version}")
    if found is None:
        raise kopf.AdmissionError(
            f"spec.appVersion: app {spec['appRef']!r} has no version {version} (create the AppVersion first)", code=422
        )


@kopf.on.mutate(
    GROUP, VERSION, "environments", id="mutate-environment", operations=["CREATE", "UPDATE"],
    ignore_failures=IGNORE_FAILURES,
)  # fmt: skip
def stamp_deployment(body: kopf.Body, userinfo: kopf.UserInfo, patch: kopf.Patch, **kw: Any) -> None:
    """Who deployed, when, and what it was: from the request's userInfo when the linked version changes
    or a new deploy request comes (a redeploy of the same version); otherwise the recorded values are
    kept (a client cannot rewrite them)."""
    old = kw.get("old")
    notes = dict(body["metadata"].get("annotations") or {})
    old_notes: dict[str, Any] = dict(old["metadata"].get("annotations") or {}) if old is not None else {}
    for key, value in deployment_stamp(
        operation=str(kw.get("operation") or ""),
        old=old,
        body=body,
        notes=notes,
        old_notes=old_notes,
        username=str(userinfo.get("username") or ""),
        now=datetime.now(UTC),
    ).items():
        patch.metadata.annotations[key] = value


STAMPED = (DEPLOYED_BY_ANNOTATION, DEPLOYED_AT_ANNOTATION, DEPLOY_ACTION_ANNOTATION)


def deployment_stamp(
    *,
    operation: str,
    old: Any,
    body: Any,
    notes: dict[str, Any],
    old_notes: dict[str, Any],
    username: str,
    now: datetime,
) -> dict[str, Any]:
    """The annotations the mutating webhook sets (pure: unit-tested)."""
    version = (body.get("spec") or {}).get("appVersion")
    created = operation == "CREATE" or old is None
    version_changed = created or (old.get("spec") or {}).get("appVersion") != version
    request = notes.get(DEPLOY_REQUEST_ANNOTATION)
    requested = bool(request) and request != old_notes.get(DEPLOY_REQUEST_ANNOTATION)
    if version_changed or requested:
        if not version_changed:
            action = "Redeploy"
        elif requested and str(request).split(" ", 1)[0] == "Rollback":
            action = "Rollback"
        else:
            action = "Deploy"
        return {
            DEPLOYED_BY_ANNOTATION: username,
            # microseconds: two deployments in one second are two history entries
            DEPLOYED_AT_ANNOTATION: now.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            DEPLOY_ACTION_ANNOTATION: action,
        }
    return {key: old_notes.get(key) for key in STAMPED if notes.get(key) != old_notes.get(key)}
