"""The reconcile of an Environment, level-based, and what its deletion leaves behind (kopf-free).

An Environment's reconcile writes its deployment history (one entry per change of the linked version,
identified by the deployed-at stamp the mutating webhook writes), generated URLs and cURL script, the
ToolDeployments of the tool versions it deploys, its phase from every ModelDeployment and ToolDeployment
the version uses, the pre-production checklist, the AppVersions' ``deployedIn``, and an audit record
(ConfigMap) that outlives it. The pure parts are :mod:`dockyard_operator.environments` (history, URLs,
checklist, ToolDeployments) and :mod:`dockyard_operator.environment_health` (the phase); the handlers in
``handlers/environments.py`` call :func:`reconcile_environment` and post the Events it returns, also when
a ModelDeployment an environment uses changes its health (:func:`environments_using`).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from dockyard_core import apikeys, audit, tooltests
from dockyard_core.clock import now, utcnow
from dockyard_core.conditions import transition
from dockyard_core.kubeclient import KubeError
from dockyard_core.modelrefs import resolve_model
from dockyard_core.resources.v1alpha1 import (
    API_KEY_LABEL,
    DEPLOY_ACTION_ANNOTATION,
    DEPLOYED_AT_ANNOTATION,
    DEPLOYED_BY_ANNOTATION,
    ENVIRONMENT_LABEL,
    READY,
    HistoryEntry,
)
from dockyard_operator import canary, observability
from dockyard_operator import environment_health as health
from dockyard_operator import environments as envs
from dockyard_operator.context import Context
from dockyard_operator.evaluation_items import evaluation_run_at
from dockyard_operator.knowledge_items import pinned_knowledge_bases
from dockyard_operator.kube import Conflict, KubeApi
from dockyard_operator.workqueue import Event, Outcome

log = logging.getLogger(__name__)

Index = Mapping[Any, Any]
"""A kopf index of AppVersions or Environments: (namespace, name) → the snapshots stored under it."""


@dataclass
class EnvironmentState:
    """What the Environment reconcile keeps between its runs (:meth:`Context.state`)."""

    audit_digests: dict[str, str] = field(default_factory=dict)
    """Per Environment uid, the digest of the audit record last applied."""
    deleted: set[str] = field(default_factory=set)
    """UIDs of Environments whose deletion was handled (kept for the operator's lifetime; tiny): a late
    event of a deleted Environment is not reconciled."""
    models: dict[str, frozenset[str]] = field(default_factory=dict)
    """Per Environment uid, the ModelDeployments its version's agents call (as of its last reconcile)."""
    model_signals: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Per ModelDeployment uid, what of it the environments' health depended on when last seen."""
    tool_tests: dict[str, str] = field(default_factory=dict)
    """Per App or AppVersion uid, its status.toolTests when last seen (as JSON)."""

    def forget(self, uid: str) -> None:
        self.audit_digests.pop(uid, None)  # ``deleted`` keeps the uid
        self.models.pop(uid, None)
        self.model_signals.pop(uid, None)


def environments_using(
    ctx: Context, environments: Index, mdep: Mapping[str, Any], deleted: bool = False
) -> list[dict[str, Any]]:
    """The environments to reconcile after a watch event of ModelDeployment ``mdep``: those whose version's
    agents call it, when what their health depends on (its state and reason) changed or it was deleted;
    none when it did not change (its status is written often: replicas, autoscaler)."""
    state = ctx.state(EnvironmentState)
    meta = mdep["metadata"]
    if deleted:
        state.model_signals.pop(meta["uid"], None)
    else:
        signal = health.model_signal(mdep)
        if state.model_signals.get(meta["uid"]) == signal:
            return []
        state.model_signals[meta["uid"]] = signal
    return [
        env
        for _, env in in_namespace(environments, meta["namespace"])
        if meta["name"] in state.models.get(env["metadata"]["uid"], frozenset())
    ]


def environments_tested(
    ctx: Context, environments: Index, holder: Mapping[str, Any], deleted: bool = False
) -> list[dict[str, Any]]:
    """The environments to reconcile after a watch event of App or AppVersion ``holder``: those of its app
    (its checklist item "Tools deployed and tested" reads them), when its recorded tool test calls
    (status.toolTests) or evaluation runs (status.evaluations: the Testing items) changed since last seen;
    none otherwise."""
    state = ctx.state(EnvironmentState)
    meta = holder["metadata"]
    if deleted:
        state.tool_tests.pop(meta["uid"], None)
        return []
    status = holder.get("status") or {}
    seen = json.dumps(status.get("toolTests") or [], sort_keys=True)
    if status.get("evaluations"):
        seen += json.dumps(status["evaluations"], sort_keys=True)
    if state.tool_tests.get(meta["uid"], "[]") == seen:
        state.tool_tests[meta["uid"]] = seen
        return []
    state.tool_tests[meta["uid"]] = seen
    app = meta["name"] if holder.get("kind") == "App" else (holder.get("spec") or {}).get("appRef")
    return [
        env for _, env in in_namespace(environments, meta["namespace"]) if (env.get("spec") or {}).get("appRef") == app
    ]


def in_namespace(index: Index, namespace: str) -> list[tuple[str, dict[str, Any]]]:
    """The (name, snapshot) pairs of an index in one namespace."""
    out: list[tuple[str, dict[str, Any]]] = []
    for (ns, name), store in index.items():
        if ns == namespace:
            out.extend((name, obj) for obj in store)
    return out


async def key_secrets(kube: KubeApi, namespace: str, environment: str) -> list[dict[str, Any]]:
    """The Secrets of the environment's API keys."""
    return await kube.list_objects(
        "secrets", namespace, labels=f"{API_KEY_LABEL}=true,{ENVIRONMENT_LABEL}={environment}"
    )


async def reconcile_environment(
    ctx: Context, env: dict[str, Any], versions: Index | None, environments: Index | None
) -> Outcome:
    """Reconcile one Environment (a snapshot); ``versions`` and ``environments`` are kopf's indexes of
    AppVersions and Environments (for the AppVersions' ``deployedIn``). The Outcome's Events are for the
    handler to post: the deployment of a version, and a newly failed one."""
    kube = ctx.kube
    meta, spec = env["metadata"], env["spec"]
    namespace, name, app = meta["namespace"], meta["name"], spec["appRef"]
    if meta.get("deletionTimestamp") or meta["uid"] in ctx.state(EnvironmentState).deleted:
        return Outcome(
            result="gone"
        )  # an index or timer may still hold the object: its last word is the deletion record
    events: list[Event] = []
    async with ctx.lock(meta["uid"]):
        version = envs.desired_version(spec)
        app_obj = await kube.get("apps", namespace, app)
        content: dict[str, Any] | None = None
        holder: dict[str, Any] | None = None  # the App or AppVersion: its status.toolTests
        problem: tuple[str, str] | None = None
        if app_obj is None:
            problem = ("AppNotFound", f"app {app!r} does not exist")
        elif version == envs.DRAFT:
            content, holder = app_obj.get("spec") or {}, app_obj
        else:
            found = await kube.get("appversions", namespace, envs.version_object(app, version))
            if found is None:
                problem = ("VersionNotFound", f"app {app!r} has no version {version}")
            else:
                content, holder = found["spec"], found

        status = env.get("status") or {}
        history = [HistoryEntry.model_validate(h) for h in status.get("history") or []]
        history, canaries = canary.split_history(history)  # a canary is no deployment (docs/promotion.md)
        notes = meta.get("annotations") or {}
        deployed_at = _parse_time(notes.get(DEPLOYED_AT_ANNOTATION)) or _parse_time(meta.get("creationTimestamp"))
        deployed_by = notes.get(DEPLOYED_BY_ANNOTATION) or "unknown (no admission record)"
        action = notes.get(DEPLOY_ACTION_ANNOTATION) or "Deploy"
        new_history = history
        if content is not None and deployed_at is not None:
            run = evaluation_run_at(((holder or {}).get("status") or {}).get("evaluations") or [], name)
            new_history = envs.next_history(history, version, deployed_at, deployed_by, action, run)

        tool_jobs: dict[str, str | None] = {}
        revisions: dict[str, str] = {}
        if content is not None:
            wanted = envs.tool_deployments(env, content)
            if (spec.get("canary") or {}).get("appVersion"):  # the canary's sessions call its tool versions
                other = await kube.get("appversions", namespace, envs.version_object(app, spec["canary"]["appVersion"]))
                have = {t["metadata"]["name"] for t in wanted}
                more = envs.tool_deployments(env, (other or {}).get("spec") or {})
                wanted += [t for t in more if t["metadata"]["name"] not in have]
            for tdep in wanted:
                try:
                    await kube.apply(tdep)
                except KubeError as exc:
                    problem = ("ToolDeploymentRejected", f"{tdep['metadata']['name']}: {exc.message}")
            wanted_names = {t["metadata"]["name"] for t in wanted}
            for tdep in await kube.list_objects("tooldeployments", namespace, labels=f"{ENVIRONMENT_LABEL}={name}"):
                tname = tdep["metadata"]["name"]
                if tname not in wanted_names:
                    await kube.delete("tooldeployments", namespace, tname)
                else:
                    tool_jobs[tname] = ((tdep.get("status") or {}).get("job") or {}).get("status")
                    revisions[tname] = tooltests.revision(tdep)
        users, found = await _agent_models(kube, namespace, content)
        ctx.state(EnvironmentState).models[meta["uid"]] = frozenset(users)
        models = {m: health.model_state(found.get(m)) for m in users}
        keys = await key_secrets(kube, namespace, name)
        knowledge = {kb: await kube.get("knowledgebases", namespace, kb) for kb in pinned_knowledge_bases(content)}
        items = envs.checklist(
            content=content,
            tool_jobs=tool_jobs,
            key_count=len(keys),
            version_found=content is not None,
            rate_limits=spec.get("rateLimits"),
            pii=spec.get("pii"),
            evaluations=((holder or {}).get("status") or {}).get("evaluations") or [],
            knowledge_bases=knowledge,
            tested=envs.ToolTesting(
                name, version, ((holder or {}).get("status") or {}).get("toolTests") or [], revisions
            ),
            observed=observability.Observed(
                facts=await ctx.state(observability.MonitoringState).facts(ctx.settings),
                namespace=namespace,
                environment=name,
                version=version if content is not None else None,
                live_since=new_history[0].deployed_at if new_history and new_history[0].version == version else None,
                usage=status.get("usage"),
            ),
        )
        urls = envs.urls(ctx.settings.public_url, namespace, name)
        judged = health.environment_health(
            version=version, problem=problem, models=models, model_users=users, tool_jobs=tool_jobs
        )
        phase, reason, message = judged.phase, judged.reason, judged.message
        added = new_history is not history
        new_history = envs.record_health(new_history, version, phase)
        # with microseconds: a canary entry is ordered among deployments stamped to the microsecond
        new_history, canary_state = canary.with_canaries(new_history, canaries, spec, notes, action, utcnow())
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
            **({"canary": canary_state} if canary_state is not None else {}),
            "checklist": [c.model_dump(mode="json", by_alias=True) for c in items],
            "conditions": _conditions(status.get("conditions") or [], phase, reason, message, meta.get("generation")),
        }
        if _differs(status, new_status):
            # guarded: a reconcile from an older snapshot (an index may lag) must not roll history back
            try:
                await kube.patch_status("environments", namespace, name, new_status, meta.get("resourceVersion"))
            except Conflict:  # a newer version exists and its own event reconciles it
                return Outcome(result="conflict")
            if added:
                verb = {"Redeploy": "redeployed", "Rollback": "rolled back to"}.get(action, "deployed")
                what = f"version {version} {verb}" if action != "Rollback" else f"{verb} version {version}"
                events.append(Event("Normal", "Deployed", f"{what} by {deployed_by}"))
            if phase == "Failed" and (status.get("phase") != "Failed" or _reason(status) != reason):
                events.append(Event("Warning", reason, message))
        await _sync_deployed_in(kube, namespace, app, versions, environments, env, new_status)
        await _keep_audit_record(ctx, env, new_status, keys)
    return Outcome(events=tuple(events))


async def _agent_models(
    kube: KubeApi, namespace: str, content: Mapping[str, Any] | None
) -> tuple[dict[str, list[str]], dict[str, dict[str, Any] | None]]:
    """The ModelDeployments the agents call (object name -> agents) and each as read: an agent's model names
    the object or its display name (dockyard_core.modelrefs; the namespace's list is read only when a name
    is not an object's); one that resolves to none stays as written (Missing)."""
    users = health.agent_models(content)
    found = {m: await kube.get("modeldeployments", namespace, m) for m in users}
    if all(found.values()):
        return users, found
    listed = {m["metadata"]["name"]: m for m in await kube.list_objects("modeldeployments", namespace)}
    names = {n: str((m.get("spec") or {}).get("name") or "") for n, m in listed.items()}
    resolved: dict[str, list[str]] = {}
    for model, agents in users.items():
        target = model if found[model] is not None else (resolve_model(model, names).name or model)
        resolved[target] = sorted({*resolved.get(target, []), *agents})
        found[target] = found.get(target) or listed.get(target)
    return resolved, {m: found.get(m) for m in resolved}


def _conditions(
    current: list[dict[str, Any]], phase: str, reason: str, message: str, generation: int | None
) -> list[dict[str, Any]]:
    return [transition(current, READY, phase == "Active", reason, message, now(), generation)]


def _reason(status: Mapping[str, Any]) -> str | None:
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == READY), None)
    return None if ready is None else ready.get("reason")


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
    kube: KubeApi,
    namespace: str,
    app: str,
    versions_index: Index | None,
    env_index: Index | None,
    env: dict[str, Any],
    new_status: dict[str, Any],
) -> None:
    """Each AppVersion of the App lists the environments where it is Active (level-based)."""
    if versions_index is None or env_index is None:
        return
    name = env["metadata"]["name"]
    current = {n: o for n, o in in_namespace(env_index, namespace)}
    current[name] = {**env, "status": new_status}
    for vname, version in in_namespace(versions_index, namespace):
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
            with contextlib.suppress(KubeError, Conflict):
                await kube.patch_status("appversions", namespace, vname, {"deployedIn": active})


async def _keep_audit_record(
    ctx: Context, env: dict[str, Any], status: dict[str, Any], keys: list[dict[str, Any]]
) -> None:
    """The record that outlives the environment: kept current, never owned by it."""
    infos = [i.__dict__ for i in map(apikeys.key_info, keys) if i is not None]
    record = audit.audit_record({**env, "status": status}, infos)
    digest = json.dumps(record, sort_keys=True)
    cache = ctx.state(EnvironmentState).audit_digests
    if cache.get(env["metadata"]["uid"]) != digest:
        await ctx.kube.apply(record)
        cache[env["metadata"]["uid"]] = digest


async def _audit_data(kube: KubeApi, namespace: str, name: str) -> dict[str, str] | None:
    found = await kube.get("configmaps", namespace, name)
    if found is None:
        return None
    data: dict[str, str] = found.get("data") or {}
    return data


async def environment_deleted(ctx: Context, env: dict[str, Any]) -> None:
    """Best effort on top of garbage collection: revoke the keys now and stamp the audit record."""
    kube = ctx.kube
    meta = env["metadata"]
    ctx.state(EnvironmentState).deleted.add(meta["uid"])
    ctx.forget(meta["uid"])
    keys = await key_secrets(kube, meta["namespace"], meta["name"])
    infos = [i.__dict__ for i in map(apikeys.key_info, keys) if i is not None]
    record_name = audit.audit_record_name(meta)
    try:
        # the facade may have revoked keys already: what the record listed stays part of the usage
        data = await _audit_data(kube, meta["namespace"], record_name)
        recorded = [] if data is None else audit.recorded_keys(data)
        await kube.apply(audit.audit_record(env, audit.merged_keys(recorded, infos)))
        # the facade may have written who deleted the environment already (it knows; kubectl deletes do not tell)
        data = await _audit_data(kube, meta["namespace"], record_name)
        if data is None or "deletion.json" not in data:
            stamp = audit.deletion_record(meta, env["spec"].get("appRef", ""), now(), None)
            await kube.apply(stamp, audit.DELETION_MANAGER)
    except KubeError as exc:  # e.g. the namespace is going: the record kept by the reconciles stays as it was
        log.warning("audit record of %s/%s not stamped: %s", meta["namespace"], meta["name"], exc.message)
    for key in keys:
        await kube.delete("secrets", meta["namespace"], key["metadata"]["name"])
    for tdep in await kube.list_objects(
        "tooldeployments", meta["namespace"], labels=f"{ENVIRONMENT_LABEL}={meta['name']}"
    ):
        await kube.delete("tooldeployments", meta["namespace"], tdep["metadata"]["name"])
