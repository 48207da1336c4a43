"""The reconcile of a ModelDeployment: its workload (model server Deployment, Service, download-token
Secret) built from its spec and Model(s), applied, and its dock job assessed (see :mod:`.workload`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from dockyard_core import downloadtokens
from dockyard_core.adapters import BaseNotResolved, resolve_base
from dockyard_core.clock import now
from dockyard_core.resources.v1alpha1 import DOCK_STATUS_ID_LABEL, Model, ModelDeployment, ModelDeploymentStatus
from dockyard_operator.assess import Verdict, assess, conditions_for, rolled_out
from dockyard_operator.builders.common import child_name, endpoint_of, hash_of
from dockyard_operator.builders.model import (
    Delivery,
    ModelNotDeployable,
    ModelWorkload,
    download_secret,
    model_workload,
    pod_resources,
    resolve_served_model,
    selector_labels,
)
from dockyard_operator.context import Body, Context, Key, Views, snapshot
from dockyard_operator.kube import owner_reference
from dockyard_operator.reconcile import workload as shared
from dockyard_operator.runtimes import InvalidRuntimeChoice, select_runtime
from dockyard_operator.workqueue import Outcome

SECRET_REAPPLY_SECONDS = 600.0
"""The download-token Secret is applied again at least this often (it comes back if someone deleted it)."""


async def _model(ctx: Context, views: Views, namespace: str, name: str) -> dict[str, Any] | None:
    """A Model from the index; on a miss, from the API server: a Model created a moment before its
    ModelDeployment may not be indexed yet, and "not found" is a terminal verdict."""
    found = views.one(views.models, (namespace, name))
    if (found or {}).get("status", {}).get("phase") == "ReadyToDeploy":
        return found
    # the index may lag behind a Model just created or just ready: a job fails on the API server's word only
    fetched = await ctx.kube.get("models", namespace, name)
    return snapshot(cast(Any, fetched)) if fetched else None


def _base_of(views: Views, namespace: str, model_body: Body | None) -> tuple[str | None, str | None]:
    """An adapter's base Model: spec.baseModel, else the one Model of the namespace that its
    adapter_config.json's base_model_name_or_path names (a ModelDeployment made with kubectl; the public
    deploy sets spec.baseModel); with the reason when there is none (None, None: not an adapter)."""
    spec = (model_body or {}).get("spec") or {}
    if not spec.get("isAdapter"):
        return None, None
    if spec.get("baseModel"):
        return str(spec["baseModel"]), None
    named = (((model_body or {}).get("status") or {}).get("adapter") or {}).get("baseModelNameOrPath")
    if not named:
        return None, None
    indexed = (views.one(views.models, key) for key in list(views.models) if key[0] == namespace)
    models = [Model.model_validate(m) for m in indexed if m is not None]
    try:
        return resolve_base(str(named), models), None
    except BaseNotResolved as exc:
        return None, exc.message


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


@dataclass
class ModelDeploymentState:
    """What the ModelDeployment reconcile keeps between its runs (:meth:`Context.state`)."""

    builds: dict[str, ModelBuild] = field(default_factory=dict)
    """Per ModelDeployment uid, its last :class:`ModelBuild`."""
    statuses: dict[str, tuple[str | None, ModelDeploymentStatus]] = field(default_factory=dict)
    """Per ModelDeployment uid, its status as validated for a resourceVersion."""
    download_secrets: dict[str, tuple[int, str, float]] = field(default_factory=dict)
    """Per ModelDeployment uid, the expiry and template hash of the download tokens last applied, and when."""
    token_key: bytes | None = None
    """The key the download tokens are minted with (read from the settings on first use)."""

    def forget(self, uid: str) -> None:
        self.builds.pop(uid, None)
        self.statuses.pop(uid, None)
        self.download_secrets.pop(uid, None)


def _version(body: Body | None) -> str | None:
    return None if body is None else body["metadata"].get("resourceVersion")


async def _model_build(ctx: Context, body: Body, views: Views) -> ModelBuild:
    meta = body["metadata"]
    namespace = meta["namespace"]
    model_ref = (body.get("spec") or {}).get("modelRef", "")
    model_body = await _model(ctx, views, namespace, model_ref)
    base_ref, base_error = _base_of(views, namespace, model_body)
    base_body = await _model(ctx, views, namespace, base_ref) if base_ref else None
    inputs = (
        meta.get("generation"),
        tuple(sorted((meta.get("labels") or {}).items())),
        _version(model_body),
        _version(base_body),
        base_error,
    )
    builds = ctx.state(ModelDeploymentState).builds
    cached = builds.get(meta["uid"])
    if cached is not None and cached.inputs == inputs:
        return cached

    mdep = ModelDeployment.model_validate({**snapshot(body), "status": {}})
    model = Model.model_validate(model_body) if model_body else None
    base = Model.model_validate(base_body) if base_body else None
    workload = None
    runtime_name = None
    problem: Verdict | None = None
    try:
        served = resolve_served_model(mdep.spec.model_ref, model, base, base_error=base_error)
        runtime_name, runtime = select_runtime(
            mdep.spec,
            ctx.catalog,
            served.model_format,
            adapter=served.adapter is not None,
            adapter_format=served.adapter_format,
        )
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
    children = shared.owned(workload.objects(), "ModelDeployment", meta) if workload is not None else []
    build = ModelBuild(inputs, mdep, runtime_name, workload, children, problem, template_hash)
    builds[meta["uid"]] = build
    return build


def _status_of(ctx: Context, body: Body) -> ModelDeploymentStatus:
    """The object's status, validated once per resourceVersion (most reconciles are triggered by the
    object's Deployment or Pods, and read the same version of it again)."""
    meta = body["metadata"]
    statuses = ctx.state(ModelDeploymentState).statuses
    cached = statuses.get(meta["uid"])
    if cached is not None and cached[0] == meta.get("resourceVersion"):
        return cached[1]
    status = ModelDeploymentStatus.model_validate(body.get("status") or {})
    statuses[meta["uid"]] = (meta.get("resourceVersion"), status)
    return status


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
    job, new_job = shared.job_for(
        before, requested, template_hash, meta.get("generation", 0), "MODELS", shared.created_at(body)
    )

    key: Key = (namespace, "model-server", name)
    deployment = views.one(views.deployments, key)
    min_ready = spec.scaling_parameters.min_replicas
    pods: list[dict[str, Any]] = []
    if workload is not None:
        await _ensure_download_tokens(ctx, build, meta)
        if await shared.apply_if_changed(ctx, build.children, deployment):
            deployment = None  # what the index holds is older than what was just applied
        current = deployment if shared.is_template(deployment, job) else None
        pods = [p for p in views.many(views.pods, key) if shared.is_template(p, job)]
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
                events=await shared.mount_events(ctx, namespace, pods),
            )
    else:
        assert problem is not None
        verdict = problem if job.status == "IN_PROGRESS" else Verdict(job.status, job.reason, job.message)
    job = shared.finish(job, verdict)

    replicas, ready = shared.counts(deployment)
    is_ready = rolled_out(deployment, min_ready)
    resource_name = child_name("model", name)
    status: dict[str, Any] = {
        "observedGeneration": meta.get("generation"),
        "job": shared.dump(job),
        "replicas": replicas,
        "readyReplicas": ready,
        "selector": ",".join(f"{k}={v}" for k, v in selector_labels(name).items()),
        "runtime": runtime_name,
        "conditions": [
            shared.dump(c)
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
    hold = shared.held_back(body, before, job, requested, ctx.settings.status_settle_seconds)
    written = await shared.write_status(ctx, body, "modeldeployments", status, job, before, new_job, requested, hold)
    return shared.outcome_of(ctx, job, pods, written, hold)


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
    state = ctx.state(ModelDeploymentState)
    last = state.download_secrets.get(meta["uid"])
    if last is not None and last[:2] == (expires, build.template_hash) and at_now - last[2] < SECRET_REAPPLY_SECONDS:
        return
    if state.token_key is None:
        state.token_key = ctx.settings.token_key()
    tokens = {
        d.role: downloadtokens.mint(state.token_key, d.namespace, d.model, expires) for d in workload.served.downloads
    }
    at = datetime.fromtimestamp(expires, UTC).isoformat().replace("+00:00", "Z")
    secret = download_secret(build.mdep, workload.served, tokens, at)
    secret["metadata"]["ownerReferences"] = [owner_reference("ModelDeployment", dict(meta))]
    await ctx.kube.apply(secret)
    state.download_secrets[meta["uid"]] = (expires, build.template_hash, at_now)
