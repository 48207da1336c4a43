"""Level-based reconciliation of ModelDeployments and ToolDeployments.

One function per kind, run by the object's :class:`workqueue.WorkQueue` whenever a watch event may
change its outcome (the object itself, its Deployment or Pods, its Model or Tool) and when the
reconcile asked to be re-run (a deadline, the periodic re-check). Each call reads the current state
(the object, and kopf's in-memory indexes of Models, Tools, Deployments, Pods and Nodes, which kopf
rebuilds from the API after a restart), computes what should exist with the pure builders, applies
it only where it differs, assesses the dock job with :func:`assess.assess`, and patches the status
only when it changed, guarded by the object's resourceVersion.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar, cast

import httpx

from dockyard_core import downloadtokens
from dockyard_core.clock import now
from dockyard_core.devices import Device
from dockyard_core.kubeclient import KubeError
from dockyard_core.resources.v1alpha1 import (
    DOCK_STATUS_ID_LABEL,
    DockJob,
    JobType,
    Model,
    ModelDeployment,
    ModelDeploymentStatus,
    Tool,
    ToolDeployment,
)
from dockyard_operator import kube, monitoring
from dockyard_operator.assess import (
    NodeFit,
    Verdict,
    assess,
    conditions_for,
    mount_pending,
    rolled_out,
    seconds_to_deadline,
)
from dockyard_operator.builders import (
    APPLIED_HASH_ANNOTATION,
    TEMPLATE_HASH_ANNOTATION,
    Delivery,
    ModelNotDeployable,
    ModelWorkload,
    child_name,
    download_secret,
    endpoint_of,
    hash_of,
    model_workload,
    pod_resources,
    resolve_served_model,
    selector_labels,
    tool_selector_labels,
    tool_workload,
)
from dockyard_operator.locks import KeyedLocks
from dockyard_operator.runtimes import InvalidRuntimeChoice, RuntimeCatalog, select_runtime
from dockyard_operator.settings import OperatorSettings
from dockyard_operator.workqueue import Event, Outcome

T = TypeVar("T")
API_CONCURRENCY = 32
SECRET_REAPPLY_SECONDS = 600.0
"""The download-token Secret is applied again at least this often (it comes back if someone deleted it)."""
"""Concurrent API calls (threads, and connections in the client's pool)."""

Body = Mapping[str, Any]
"""A custom resource as kopf hands it over, or its indexed snapshot."""

Key = tuple[str, str, str]
"""(namespace, component, owner name) — how workload Deployments and Pods are indexed."""


@dataclass
class Context:
    """What every reconcile needs: settings, the API client, the catalog, kopf's indexes (``views``, set
    by the first handler call: kopf hands its indexes to handlers only), per-object caches of derived
    values, and the threads blocking work runs in (a tool endpoint's reachability probe)."""

    settings: OperatorSettings
    kube: kube.Kube
    catalog: RuntimeCatalog
    devices: Mapping[str, Device]
    """The device catalog, read once from the settings (``device_catalog``)."""
    views: Views | None = None
    builds: dict[str, ModelBuild] = field(default_factory=dict)
    """Per ModelDeployment uid, its last :class:`ModelBuild`."""
    statuses: dict[str, tuple[str | None, ModelDeploymentStatus]] = field(default_factory=dict)
    """Per ModelDeployment uid, its status as validated for a resourceVersion."""
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(API_CONCURRENCY, thread_name_prefix="kube")
    )
    locks: KeyedLocks = field(default_factory=KeyedLocks)
    """Per object uid, for handlers that kopf runs outside a work queue (apps.py); each goes with its
    last holder."""
    download_secrets: dict[str, tuple[int, str, float]] = field(default_factory=dict)
    """Per ModelDeployment uid, the expiry and template hash of the download tokens last applied, and when."""
    token_key: bytes | None = None
    deleted_environments: set[str] = field(default_factory=set)
    """UIDs of Environments whose deletion was handled (kept for the operator's lifetime; tiny): a late
    event of a deleted Environment is not reconciled."""
    audit_digests: dict[str, str] = field(default_factory=dict)
    """Per Environment uid, the digest of the audit record last applied."""

    def lock(self, uid: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self.locks.hold(uid)

    def forget(self, uid: str) -> None:
        """Drop the caches of a deleted object."""
        self.builds.pop(uid, None)
        self.statuses.pop(uid, None)
        self.download_secrets.pop(uid, None)
        self.audit_digests.pop(uid, None)

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking work (an HTTP probe) in the threads."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, partial(fn, *args, **kwargs))


@dataclass(frozen=True)
class Views:
    """Read-only snapshots of kopf's indexes for one reconcile."""

    deployments: Mapping[Key, Any]
    pods: Mapping[Key, Any]
    nodes: Mapping[str, Any]
    models: Mapping[tuple[str, str], Any]
    tools: Mapping[tuple[str, str], Any]

    def one(self, index: Mapping[Any, Any], key: Any) -> dict[str, Any] | None:
        store = index.get(key)
        return next(iter(store), None) if store else None

    def many(self, index: Mapping[Any, Any], key: Any) -> list[dict[str, Any]]:
        store = index.get(key)
        return list(store) if store else []

    def node_fit(self, device_type: str) -> NodeFit:
        nodes = self.many(self.nodes, device_type)
        largest: dict[str, float] = {}
        for node in nodes:
            for resource, amount in node.items():
                largest[resource] = max(largest.get(resource, 0.0), amount)
        return NodeFit(device_type, len(nodes), largest)


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _owned(objects: Sequence[dict[str, Any]], owner_kind: str, meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Children with the controller owner reference and the hash of the whole set."""
    applied = hash_of(objects)
    out = []
    for obj in objects:
        obj = {**obj, "metadata": {**obj["metadata"]}}
        obj["metadata"]["ownerReferences"] = [kube.owner_reference(owner_kind, dict(meta))]
        obj["metadata"]["annotations"] = {**obj["metadata"].get("annotations", {}), APPLIED_HASH_ANNOTATION: applied}
        out.append(obj)
    return out


async def _apply_if_changed(ctx: Context, objects: list[dict[str, Any]], current: dict[str, Any] | None) -> bool:
    """Server-side apply unless the live Deployment says the same set was applied already.

    The Deployment is applied last: an operator killed half-way leaves no Deployment with the new
    hash, so the next reconcile applies the whole set again (server-side apply is idempotent)."""
    applied = objects[0]["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
    if current is not None and current["metadata"].get("annotations", {}).get(APPLIED_HASH_ANNOTATION) == applied:
        return False
    for obj in objects:
        await ctx.kube.apply_async(obj)
    return True


def _job_for(
    current: DockJob | None, requested: str | None, template_hash: str, generation: int, job_type: JobType
) -> tuple[DockJob, bool]:
    """The job this reconcile works on, and whether it is new.

    A new job starts when the facade asked for one (a new dock-status-id label), or when the
    workload changed (template hash) — e.g. a kubectl edit of the spec.
    """
    same_request = current is not None and (not requested or requested == current.dock_status_id)
    if current is not None and same_request and current.template_hash == template_hash:
        return current, False
    job_id = requested if requested and (current is None or requested != current.dock_status_id) else None
    job = DockJob(
        dock_status_id=job_id or str(uuid.uuid4()),
        job_type=job_type,
        action="DEPLOY",
        status="IN_PROGRESS",
        reason="Deploying",
        message="deployment started",
        start_time=now(),
        generation=generation,
        template_hash=template_hash,
    )
    return job, True


def _finish(job: DockJob, verdict: Verdict) -> DockJob:
    if (job.status, job.reason, job.message) == (verdict.status, verdict.reason, verdict.message):
        return job
    done = verdict.status != "IN_PROGRESS"
    return job.model_copy(
        update={
            "status": verdict.status,
            "reason": verdict.reason,
            "message": verdict.message,
            "completion_time": now() if done else None,
        }
    )


def _job_events(body: Body, before: DockJob | None, after: DockJob, new: bool) -> tuple[Event, ...]:
    """The job's Event (the handler posts it) and its metrics. One Event per job, at its end (Deployed,
    or a Warning with the failure): the start is in the status and the log, and an Event is one more
    write to the API server per rollout."""
    events: list[Event] = []
    if new:
        monitoring.job_started(body, after.dock_status_id, after.job_type, after.action)
    if after.status == "IN_PROGRESS" or (before is not None and not new and before.status == after.status):
        return tuple(events)
    monitoring.job_finished(
        body,
        dock_status_id=after.dock_status_id,
        job_type=after.job_type,
        action=after.action,
        status=after.status,
        reason=after.reason,
        device_type=(body.get("spec") or {}).get("deviceType"),
        start=after.start_time,
        end=after.completion_time,
    )
    if after.status == "SUCCESS":
        events.append(Event("Normal", "Deployed", f"dock job {after.dock_status_id}: {after.message}"))
    else:
        events.append(Event("Warning", after.reason, f"dock job {after.dock_status_id} FAILED: {after.message}"))
    return tuple(events)


def _in_flight(before: DockJob | None, job: DockJob) -> bool:
    """The same job, still IN_PROGRESS for the same reason: its status is not written again (one status
    write per job transition). What changes meanwhile (replica counts, conditions, the message's
    counts and seconds) is written with the next transition; a new reason (e.g. RollingOut to
    Unschedulable) is a transition."""
    return (
        before is not None
        and before.dock_status_id == job.dock_status_id
        and before.status == job.status == "IN_PROGRESS"
        and before.reason == job.reason
    )


def _changed(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    return any(current.get(k) != v for k, v in desired.items())


async def _write(
    ctx: Context,
    body: Body,
    plural: str,
    status: dict[str, Any],
    job: DockJob,
    before: DockJob | None,
    new_job: bool,
    requested: str | None,
) -> tuple[Body | None, tuple[str, ...], tuple[Event, ...]]:
    """Write the job label (a new job the facade did not label) and the status, when they changed.

    Returns the object as the API server has it after the last write (None when nothing was written)
    and the resourceVersions the writes replaced, so the work queue can use the written object until
    the watch delivers it; and the Events the write calls for."""
    meta = body["metadata"]
    version = meta["resourceVersion"]
    passed = [version]
    if new_job and requested != job.dock_status_id:
        # The lookup of a dockStatusId is one labelled list: keep the label in step with the job.
        labels = {DOCK_STATUS_ID_LABEL: job.dock_status_id}
        labelled = await ctx.kube.patch_object_async(
            plural, meta["namespace"], meta["name"], {"metadata": {"labels": labels}}, version
        )
        version = labelled["metadata"]["resourceVersion"]
        passed.append(version)
    elif not _changed(body.get("status") or {}, status) or _in_flight(before, job):
        return None, (), ()
    written = await ctx.kube.patch_status_async(plural, meta["namespace"], meta["name"], status, version)
    return written, tuple(passed), _job_events(body, before, job, new_job)


def _outcome(
    ctx: Context,
    job: DockJob,
    pods: Sequence[Mapping[str, Any]],
    written: tuple[Body | None, tuple[str, ...], tuple[Event, ...]],
) -> Outcome:
    """When to look again with no event: at the unschedulable deadline of a job in flight, else after
    the observe interval while the job is in flight, and the settled interval afterwards."""
    settings = ctx.settings
    if job.status == "IN_PROGRESS":
        deadline = seconds_to_deadline(
            job, pods, now=now(), unschedulable_deadline_seconds=settings.unschedulable_deadline_seconds
        )
        # a second past the deadline: the assessment's clock has whole seconds
        after = settings.observe_interval_seconds if deadline is None else min(settings.observe_interval_seconds,
                                                                               deadline + 1.0)  # fmt: skip
    else:
        after = settings.settled_interval_seconds
    return Outcome(requeue_after=after, written=written[0], passed=written[1], events=written[2])


def snapshot(body: Body) -> dict[str, Any]:
    """The parts of a custom resource the reconcilers read, as plain dicts."""
    meta = body["metadata"]
    keep = ("name", "namespace", "uid", "generation", "labels", "annotations", "resourceVersion", "creationTimestamp")
    return {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": {k: meta[k] for k in keep if k in meta},
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }


def _counts(deployment: dict[str, Any] | None) -> tuple[int, int]:
    status = (deployment or {}).get("status", {})
    return int(status.get("replicas", 0) or 0), int(status.get("readyReplicas", 0) or 0)


async def _model(ctx: Context, views: Views, namespace: str, name: str) -> dict[str, Any] | None:
    """A Model from the index; on a miss, from the API server: a Model created a moment before its
    ModelDeployment may not be indexed yet, and "not found" is a terminal verdict."""
    found = views.one(views.models, (namespace, name))
    if (found or {}).get("status", {}).get("phase") == "ReadyToDeploy":
        return found
    # the index may lag behind a Model just created or just ready: a job fails on the API server's word only
    fetched = await ctx.kube.get_custom_async("models", namespace, name)
    return snapshot(cast(Any, fetched)) if fetched else None


@dataclass(frozen=True)
class ModelBuild:
    """What a ModelDeployment's reconcile derives from its spec, labels and Model(s) with the pure
    builders: the costliest part of a reconcile, so it is kept per object until one of them changes."""

    inputs: tuple[Any, ...]
    mdep: ModelDeployment
    """The object as validated (its status left out: that is read afresh on every reconcile)."""
    runtime_name: str | None
    workload: ModelWorkload | None
    children: list[dict[str, Any]]
    """The workload's objects with owner reference and applied hash, in apply order."""
    problem: Verdict | None
    template_hash: str


def _version(body: Body | None) -> str | None:
    return None if body is None else body["metadata"].get("resourceVersion")


async def _model_build(ctx: Context, body: Body, views: Views) -> ModelBuild:
    meta = body["metadata"]
    namespace = meta["namespace"]
    model_ref = (body.get("spec") or {}).get("modelRef", "")
    model_body = await _model(ctx, views, namespace, model_ref)
    base_ref = ((model_body or {}).get("spec") or {}).get("baseModel")
    base_body = await _model(ctx, views, namespace, base_ref) if base_ref else None
    inputs = (
        meta.get("generation"),
        tuple(sorted((meta.get("labels") or {}).items())),
        _version(model_body),
        _version(base_body),
    )
    cached = ctx.builds.get(meta["uid"])
    if cached is not None and cached.inputs == inputs:
        return cached

    mdep = ModelDeployment.model_validate({**snapshot(body), "status": {}})
    model = Model.model_validate(model_body) if model_body else None
    base = Model.model_validate(base_body) if base_body else None
    workload = None
    runtime_name = None
    problem: Verdict | None = None
    try:
        served = resolve_served_model(mdep.spec.model_ref, model, base)
        runtime_name, runtime = select_runtime(mdep.spec, ctx.catalog, served.model_format)
        delivery = Delivery(
            ctx.settings.download_url or ctx.settings.public_url, ctx.settings.storage_initializer_image
        )
        workload = model_workload(
            mdep,
            served,
            runtime_name,
            runtime,
            progress_deadline_seconds=ctx.settings.progress_deadline_seconds,
            delivery=delivery,
            local_engine=ctx.settings.local_engines,
            devices=ctx.devices,
        )
    except ModelNotDeployable as exc:
        problem = Verdict("FAILED", exc.reason, exc.message)
    except InvalidRuntimeChoice as exc:
        problem = Verdict("FAILED", "InvalidOptimization", str(exc))
    template_hash = (
        workload.template_hash if workload else hash_of([problem.reason, problem.message] if problem else "")
    )
    children = _owned(workload.objects(), "ModelDeployment", meta) if workload is not None else []
    build = ModelBuild(inputs, mdep, runtime_name, workload, children, problem, template_hash)
    ctx.builds[meta["uid"]] = build
    return build


def _status_of(ctx: Context, body: Body) -> ModelDeploymentStatus:
    """The object's status, validated once per resourceVersion (most reconciles are triggered by the
    object's Deployment or Pods, and read the same version of it again)."""
    meta = body["metadata"]
    cached = ctx.statuses.get(meta["uid"])
    if cached is not None and cached[0] == meta.get("resourceVersion"):
        return cached[1]
    status = ModelDeploymentStatus.model_validate(body.get("status") or {})
    ctx.statuses[meta["uid"]] = (meta.get("resourceVersion"), status)
    return status


async def _mount_events(ctx: Context, namespace: str, pods: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The FailedMount Events of the pods that sit scheduled but not started (assess.mount_pending): one
    list call, only while such a pod exists (the scheduler does not check Secret and ConfigMap volumes;
    only the kubelet's Events say why such a pod never starts)."""
    waiting = set(mount_pending(pods, now()))
    if not waiting:
        return []
    try:
        listed = await ctx.kube.http.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/events",
            params={"fieldSelector": "involvedObject.kind=Pod,reason=FailedMount"},
        )
    except KubeError as exc:
        if exc.status in (401, 403, 404):  # no right to read Events: the deadline decides, as before
            return []
        raise
    items: list[dict[str, Any]] = listed.get("items") or []
    return [e for e in items if (e.get("involvedObject") or {}).get("name") in waiting]


async def reconcile_model_deployment(ctx: Context, body: Body, views: Views) -> Outcome:
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    build = await _model_build(ctx, body, views)
    mdep_status = _status_of(ctx, body)
    spec = build.mdep.spec
    workload, runtime_name, problem, template_hash = (
        build.workload,
        build.runtime_name,
        build.problem,
        build.template_hash,
    )
    requested = (meta.get("labels") or {}).get(DOCK_STATUS_ID_LABEL)
    before = mdep_status.job
    job, new_job = _job_for(before, requested, template_hash, meta.get("generation", 0), "MODELS")

    key: Key = (namespace, "model-server", name)
    deployment = views.one(views.deployments, key)
    min_ready = spec.scaling_parameters.min_replicas
    pods: list[dict[str, Any]] = []
    if workload is not None:
        await _ensure_download_tokens(ctx, build, meta)
        if await _apply_if_changed(ctx, build.children, deployment):
            deployment = None  # what the index holds is older than what was just applied
        current = deployment if _is_template(deployment, job) else None
        pods = [p for p in views.many(views.pods, key) if _is_template(p, job)]
        if job.status != "IN_PROGRESS":
            verdict = Verdict(job.status, job.reason, job.message)  # a finished job keeps its verdict
        else:
            verdict = assess(
                job,
                current,
                pods,
                min_ready=min_ready,
                requests=pod_resources(ctx.devices[spec.device_type])["requests"],
                fit=views.node_fit(spec.device_type),
                now=now(),
                unschedulable_deadline_seconds=ctx.settings.unschedulable_deadline_seconds,
                node_autoscaling=ctx.settings.node_autoscaling,
                events=await _mount_events(ctx, namespace, pods),
            )
    else:
        assert problem is not None
        verdict = problem if job.status == "IN_PROGRESS" else Verdict(job.status, job.reason, job.message)
    job = _finish(job, verdict)

    replicas, ready = _counts(deployment)
    is_ready = rolled_out(deployment, min_ready)
    resource_name = child_name("model", name)
    status: dict[str, Any] = {
        "observedGeneration": meta.get("generation"),
        "job": _dump(job),
        "replicas": replicas,
        "readyReplicas": ready,
        "selector": ",".join(f"{k}={v}" for k, v in selector_labels(name).items()),
        "runtime": runtime_name,
        "conditions": [
            _dump(c)
            for c in conditions_for(
                verdict,
                is_ready,
                f"{ready} of {min_ready} required replica(s) ready",
                meta.get("generation", 0),
                now(),
                mdep_status.conditions,
            )
        ],
    }
    if workload is not None:
        status["serviceName"] = resource_name
        status["endpoint"] = endpoint_of(workload.service)
    written = await _write(ctx, body, "modeldeployments", status, job, before, new_job, requested)
    return _outcome(ctx, job, pods, written)


async def _ensure_download_tokens(ctx: Context, build: ModelBuild, meta: Mapping[str, Any]) -> None:
    """Apply the Secret with the download tokens of the workload's models (before the Deployment whose
    storage initializers read it), and renew the tokens while half of their lifetime is left: the expiry
    is deterministic per half period (:func:`downloadtokens.expiry_for`), so the Secret is applied once
    per half period, and pods started later (restarts, scale-up) read the current token."""
    workload = build.workload
    if workload is None or workload.served is None or not workload.served.downloads:
        return
    at_now = time.time()
    expires = downloadtokens.expiry_for(at_now, ctx.settings.download_token_seconds)
    last = ctx.download_secrets.get(meta["uid"])
    if last is not None and last[:2] == (expires, build.template_hash) and at_now - last[2] < SECRET_REAPPLY_SECONDS:
        return
    if ctx.token_key is None:
        ctx.token_key = ctx.settings.token_key()
    tokens = {
        d.role: downloadtokens.mint(ctx.token_key, d.namespace, d.model, expires) for d in workload.served.downloads
    }
    at = datetime.fromtimestamp(expires, UTC).isoformat().replace("+00:00", "Z")
    secret = download_secret(build.mdep, workload.served, tokens, at)
    secret["metadata"]["ownerReferences"] = [kube.owner_reference("ModelDeployment", dict(meta))]
    await ctx.kube.apply_async(secret)
    ctx.download_secrets[meta["uid"]] = (expires, build.template_hash, at_now)


def _is_template(obj: dict[str, Any] | None, job: DockJob) -> bool:
    if obj is None:
        return False
    return bool(obj.get("metadata", {}).get("annotations", {}).get(TEMPLATE_HASH_ANNOTATION) == job.template_hash)


ReachabilityCheck = Callable[[str, float], str | None]


def check_endpoint(url: str, timeout: float) -> str | None:
    """None when the endpoint answers HTTP at all (any status: it is reachable), else why not."""
    try:
        httpx.get(url, timeout=timeout, follow_redirects=False)
    except httpx.HTTPError as exc:
        return f"{url} is not reachable: {exc.__class__.__name__}: {exc}"
    return None


async def reconcile_tool_deployment(
    ctx: Context, body: Body, views: Views, reach: ReachabilityCheck = check_endpoint
) -> Outcome:
    tdep = ToolDeployment.model_validate(snapshot(body))
    meta = body["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    tool_body = views.one(views.tools, (namespace, tdep.spec.tool_ref))
    if tool_body is None:  # the index may lag behind a Tool just created: ToolNotFound on the API server's word only
        tool_body = await ctx.kube.get_custom_async("tools", namespace, tdep.spec.tool_ref)
    tool = Tool.model_validate(tool_body) if tool_body else None
    requested = (meta.get("labels") or {}).get(DOCK_STATUS_ID_LABEL)
    before = tdep.status.job
    key: Key = (namespace, "tool", name)
    deployment = views.one(views.deployments, key)
    status: dict[str, Any] = {"observedGeneration": meta.get("generation")}
    pods: list[dict[str, Any]] = []

    if tool is None:
        problem = Verdict("FAILED", "ToolNotFound", f"Tool {tdep.spec.tool_ref} does not exist in this namespace")
        job, new_job = _job_for(before, requested, hash_of(problem.reason), meta.get("generation", 0), "TOOLS")
        verdict = problem if job.status == "IN_PROGRESS" else Verdict(job.status, job.reason, job.message)
        ready = False
    elif tool.spec.endpoint is not None:
        job, new_job = _job_for(
            before, requested, hash_of(["endpoint", tool.spec.endpoint]), meta.get("generation", 0), "TOOLS"
        )
        verdict = Verdict(job.status, job.reason, job.message)
        if job.status == "IN_PROGRESS":
            failure = await ctx.call(reach, tool.spec.endpoint, ctx.settings.endpoint_timeout_seconds)
            verdict = (
                Verdict("FAILED", "EndpointUnreachable", failure)
                if failure
                else Verdict("SUCCESS", "Reachable", f"{tool.spec.endpoint} answers")
            )
        ready = verdict.status == "SUCCESS"
        status["endpoint"] = tool.spec.endpoint
    else:
        workload = tool_workload(tdep, tool, progress_deadline_seconds=ctx.settings.progress_deadline_seconds)
        job, new_job = _job_for(before, requested, workload.template_hash, meta.get("generation", 0), "TOOLS")
        children = _owned(workload.objects(), "ToolDeployment", meta)
        if await _apply_if_changed(ctx, children, deployment):
            deployment = None
        current = deployment if _is_template(deployment, job) else None
        pods = [p for p in views.many(views.pods, key) if _is_template(p, job)]
        requests = workload.deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]
        verdict = assess(
            job,
            current,
            pods,
            min_ready=tdep.spec.replicas,
            requests=requests,
            fit=NodeFit("general-purpose", 0, {}),
            now=now(),
            unschedulable_deadline_seconds=ctx.settings.unschedulable_deadline_seconds,
            events=await _mount_events(ctx, namespace, pods) if job.status == "IN_PROGRESS" else (),
        )
        ready = rolled_out(deployment, tdep.spec.replicas)
        status["serviceName"] = workload.service["metadata"]["name"]
        status["endpoint"] = endpoint_of(workload.service)
        status["selector"] = ",".join(f"{k}={v}" for k, v in tool_selector_labels(name).items())

    job = _finish(job, verdict)
    replicas, ready_count = _counts(deployment)
    status |= {
        "job": _dump(job),
        "replicas": replicas,
        "readyReplicas": ready_count,
        "conditions": [
            _dump(c)
            for c in conditions_for(
                verdict,
                ready,
                "the tool is reachable" if ready else "the tool is not reachable yet",
                meta.get("generation", 0),
                now(),
                tdep.status.conditions,
            )
        ],
    }
    written = await _write(ctx, body, "tooldeployments", status, job, before, new_job, requested)
    return _outcome(ctx, job, pods, written)
