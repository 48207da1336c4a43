"""The autoscaler loop of one ModelDeployment: scrape the engines, decide (pure), act.

Every tick: scrape ``/metrics`` of each Ready replica (or the URL of the annotation
``dockyard.dev/metrics-url``, for a deployment whose load is reported elsewhere, e.g. by a gateway),
feed :func:`autoscaler.decide` with the state kept in ``status.autoscaler``, and when it asks for
another replica count, write ``spec.replicas`` (what ``kubectl scale`` writes too); the reconciler then
resizes the Deployment within [minReplicas, maxReplicas].
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import httpx

from dockyard_core.resources.v1alpha1 import ModelDeployment
from dockyard_operator import monitoring
from dockyard_operator.assess import pod_ready
from dockyard_operator.autoscaler import AutoscalerState, Observation, decide
from dockyard_operator.context import Context, Key, Views
from dockyard_operator.engine_load import LoadSample, parse_load
from dockyard_operator.runtimes import select_runtime
from dockyard_operator.workqueue import Event, ObjectKey, PostEvent, WorkQueue

METRICS_URL_ANNOTATION = "dockyard.dev/metrics-url"
logger = logging.getLogger(__name__)


def autoscaling_enabled(spec: Mapping[str, Any], **_: Any) -> bool:
    scaling = spec.get("scalingParameters") or {}
    low, high = scaling.get("minReplicas", 1), scaling.get("maxReplicas")
    return high is not None and high > low


async def _scrape(http: httpx.AsyncClient, url: str) -> LoadSample | None:
    try:
        resp = await http.get(url)
    except httpx.HTTPError:
        return None
    return parse_load(resp.text) if resp.status_code == 200 else None


def scrape_targets(mdep: ModelDeployment, views: Views, ctx: Context) -> list[str]:
    override = (mdep.metadata.annotations or {}).get(METRICS_URL_ANNOTATION)
    if override:
        return [override]
    try:
        _, runtime = select_runtime(mdep.spec, ctx.catalog)
    except ValueError:
        return []
    key: Key = (mdep.metadata.namespace or "", "model-server", mdep.metadata.name or "")
    return [
        f"http://{pod['status']['podIP']}:{runtime.port}{runtime.metrics_path}"
        for pod in views.many(views.pods, key)
        if pod_ready(pod) and pod.get("status", {}).get("podIP")
    ]


async def autoscale(ctx: Context, http: httpx.AsyncClient, body: Mapping[str, Any], views: Views) -> tuple[Event, ...]:
    """One tick; the Events it returns (a new replica count) are for the caller's poster."""
    mdep = ModelDeployment.model_validate(
        {
            "apiVersion": body["apiVersion"],
            "kind": body["kind"],
            "metadata": dict(body["metadata"]),
            "spec": dict(body["spec"]),
        }
    )
    status = body.get("status") or {}
    try:
        state = AutoscalerState.from_dict(status.get("autoscaler"))
    except ValueError:
        state = AutoscalerState()  # a malformed state only restarts a pending wait
    samples = await asyncio.gather(*(_scrape(http, url) for url in scrape_targets(mdep, views, ctx)))
    params = mdep.spec.scaling_parameters
    current = mdep.spec.replicas if mdep.spec.replicas is not None else params.min_replicas
    decision = decide(params, current, Observation.from_samples(samples, int(time.time() * 1000)), state)
    monitoring.autoscaler_decision(decision.reason)
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    events: tuple[Event, ...] = ()
    if decision.replicas != current:
        patch = {"spec": {"replicas": decision.replicas}}
        await ctx.kube.patch_object("modeldeployments", namespace, name, patch)
        events = (Event("Normal", decision.reason, decision.message),)
    new_state = decision.new_state.to_dict()
    if new_state != (status.get("autoscaler") or {}):
        await ctx.kube.patch_status("modeldeployments", namespace, name, {"autoscaler": new_state})
    return events


async def autoscaler_loop(
    queue: WorkQueue, key: ObjectKey, ctx: Context, http: httpx.AsyncClient, post: PostEvent
) -> None:
    """One ModelDeployment's autoscaler: a tick every ``AUTOSCALE_INTERVAL_SECONDS`` while the object
    exists and its scaling parameters allow more than one replica count. It takes the object's
    reconcile lock, so a tick and a reconcile of the same object never interleave; ``post`` (the
    handlers' poster) posts the Events of each tick."""
    interval = ctx.settings.autoscale_interval_seconds
    while True:
        await asyncio.sleep(interval)
        body = queue.body(key)
        if body is None or not autoscaling_enabled(body.get("spec") or {}) or ctx.views is None:
            return
        try:
            async with queue.lock(key):
                events = await autoscale(ctx, http, body, ctx.views)
            for event in events:
                post(body, event)
        except Exception:
            logger.exception("autoscaling ModelDeployment %s/%s failed; next tick in %ss", *key, interval)
