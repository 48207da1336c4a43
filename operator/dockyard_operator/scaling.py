"""The autoscaler loop of one ModelDeployment: scrape the engines, decide (pure), act.

Every tick: scrape ``/metrics`` of each Ready replica (or the URL of the annotation
``dockyard.dev/metrics-url``, for a deployment whose load is reported elsewhere, e.g. by a gateway;
on the local control plane, ``DOCKYARD_OPERATOR_LOCAL_ENGINES``, the engine the local engine runner
started for the pod, at the pod's ``dockyard.dev/local-endpoint``), read the load gauges of the
deployment's engine (``status.runtime`` in the runtime catalog, :data:`engine_load.ENGINE_METRICS`),
feed :func:`autoscaler.decide` with the state kept in ``status.autoscaler``, and when it asks for
another replica count, write ``spec.replicas`` (what ``kubectl scale`` writes too); the reconciler then
resizes the Deployment within [minReplicas, maxReplicas].

``status.autoscaler`` says which signal is read (``signal``, e.g. ``llama-cpp:
llamacpp:requests_processing + llamacpp:requests_deferred``) and the latest decision's ``reason``;
scaling Events name the signal too, and a Warning Event ``NoMetrics`` says when ready replicas
answered but none exported the engine's gauges.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from dockyard_core.resources.v1alpha1 import ModelDeployment
from dockyard_operator import monitoring
from dockyard_operator.assess import pod_ready
from dockyard_operator.autoscaler import AutoscalerState, Observation, decide
from dockyard_operator.context import Context, Key, Views
from dockyard_operator.engine_load import ENGINE_METRICS, VLLM_METRICS, LoadMetricNames, LoadSample, parse_load
from dockyard_operator.workqueue import Event, ObjectKey, PostEvent, WorkQueue

METRICS_URL_ANNOTATION = "dockyard.dev/metrics-url"
LOCAL_ENDPOINT_ANNOTATION = "dockyard.dev/local-endpoint"
"""Set by the local engine runner on a model pod whose engine runs on the host (docs/runtimes.md)."""
logger = logging.getLogger(__name__)


def autoscaling_enabled(spec: Mapping[str, Any], **_: Any) -> bool:
    scaling = spec.get("scalingParameters") or {}
    low, high = scaling.get("minReplicas", 1), scaling.get("maxReplicas")
    return high is not None and high > low


@dataclass(frozen=True)
class ScrapePlan:
    """Where one tick reads the load, and which gauges."""

    urls: list[str]
    names: LoadMetricNames
    signal: str
    """The signal in words for status and Events, e.g. ``llama-cpp: llamacpp:requests_processing + ...``."""


async def _scrape(http: httpx.AsyncClient, url: str, names: LoadMetricNames) -> LoadSample | None:
    try:
        resp = await http.get(url)
    except httpx.HTTPError:
        return None
    return parse_load(resp.text, names) if resp.status_code == 200 else None


def scrape_plan(mdep: ModelDeployment, runtime_name: str | None, views: Views, ctx: Context) -> ScrapePlan:
    """The URLs to scrape and the gauges of the engine of ``runtime_name`` (``status.runtime``: the
    runtime the reconciler chose; None before the first reconcile: nothing to scrape but an override)."""
    runtime = ctx.catalog.runtimes.get(runtime_name or "")
    names = ENGINE_METRICS[runtime.engine] if runtime is not None else VLLM_METRICS
    signal = f"{runtime.engine if runtime is not None else 'unknown engine'}: {names.describe()}"
    override = (mdep.metadata.annotations or {}).get(METRICS_URL_ANNOTATION)
    if override:
        return ScrapePlan([override], names, signal)
    if runtime is None:
        return ScrapePlan([], names, signal)
    key: Key = (mdep.metadata.namespace or "", "model-server", mdep.metadata.name or "")
    urls = []
    for pod in views.many(views.pods, key):
        if not pod_ready(pod):
            continue
        local = ((pod.get("metadata") or {}).get("annotations") or {}).get(LOCAL_ENDPOINT_ANNOTATION)
        ip = (pod.get("status") or {}).get("podIP")
        if ctx.settings.local_engines and local:
            urls.append(f"{str(local).rstrip('/')}{runtime.metrics_path}")
        elif ip:
            urls.append(f"http://{ip}:{runtime.port}{runtime.metrics_path}")
    return ScrapePlan(urls, names, signal)


def _status(state: Mapping[str, Any], signal: str, reason: str, scraped: int, reporting: int) -> dict[str, Any]:
    # pending: None removes a finished wait (status is merge-patched)
    return {
        "pending": state.get("pending"),
        "signal": signal,
        "reason": reason,
        "scraped": scraped,
        "reporting": reporting,
    }


async def autoscale(ctx: Context, http: httpx.AsyncClient, body: Mapping[str, Any], views: Views) -> tuple[Event, ...]:
    """One tick; the Events it returns (a new replica count, metrics gone) are for the caller's poster."""
    mdep = ModelDeployment.model_validate(
        {
            "apiVersion": body["apiVersion"],
            "kind": body["kind"],
            "metadata": dict(body["metadata"]),
            "spec": dict(body["spec"]),
        }
    )
    status = body.get("status") or {}
    stored = status.get("autoscaler") or {}
    try:
        state = AutoscalerState.from_dict({"pending": stored["pending"]} if stored.get("pending") else None)
    except ValueError:
        state = AutoscalerState()  # a malformed state only restarts a pending wait
    plan = scrape_plan(mdep, status.get("runtime"), views, ctx)
    samples = await asyncio.gather(*(_scrape(http, url, plan.names) for url in plan.urls))
    params = mdep.spec.scaling_parameters
    current = mdep.spec.replicas if mdep.spec.replicas is not None else params.min_replicas
    decision = decide(params, current, Observation.from_samples(samples, int(time.time() * 1000)), state)
    monitoring.autoscaler_decision(decision.reason)
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    events: tuple[Event, ...] = ()
    if decision.replicas != current:
        patch = {"spec": {"replicas": decision.replicas}}
        await ctx.kube.patch_object("modeldeployments", namespace, name, patch)
        events = (Event("Normal", decision.reason, f"{decision.message} (signal {plan.signal})"),)
    elif (
        decision.reason == "NoMetrics"
        and plan.urls
        and not (stored.get("reason") == "NoMetrics" and stored.get("scraped"))
    ):
        events = (
            Event(
                "Warning",
                "NoMetrics",
                f"none of the {len(plan.urls)} ready replica(s) exported {plan.signal} at /metrics "
                f"(is the engine's metrics endpoint on?); holding {current} replica(s)",
            ),
        )
    reporting = sum(sample is not None for sample in samples)
    new_status = _status(decision.new_state.to_dict(), plan.signal, decision.reason, len(plan.urls), reporting)
    old_status = _status(
        stored,
        stored.get("signal", ""),
        stored.get("reason", ""),
        stored.get("scraped", -1),
        stored.get("reporting", -1),
    )
    if new_status != old_status:
        await ctx.kube.patch_status("modeldeployments", namespace, name, {"autoscaler": new_status})
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
