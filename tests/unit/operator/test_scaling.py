"""The autoscaler tick (scaling.py) with its engine's load signal: which URLs it scrapes, which gauges it
reads for each engine, what it writes to status.autoscaler and which Events it posts. The engine's page is
the real llama-server exposition of fixtures/llama_server_metrics.txt, served through httpx's
MockTransport; the Kubernetes writes are recorded."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest

from dockyard_core.resources.v1alpha1 import ModelDeployment
from dockyard_operator.context import Context, Views
from dockyard_operator.engine_load import LLAMA_CPP_METRICS, VLLM_METRICS
from dockyard_operator.runtimes import DEFAULT_CATALOG
from dockyard_operator.scaling import LOCAL_ENDPOINT_ANNOTATION, METRICS_URL_ANNOTATION, autoscale, scrape_plan
from dockyard_operator.workqueue import Event

LLAMA_PAGE = (Path(__file__).parent / "fixtures" / "llama_server_metrics.txt").read_text()  # 1 running, 5 deferred
VLLM_PAGE = "vllm:num_requests_running 1\nvllm:num_requests_waiting 5\n"


def body(runtime: str | None, annotations: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "dockyard.dev/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "tiny", "namespace": "ns", "annotations": annotations or {}},
        "spec": {
            "modelRef": "tiny-model",
            "modelType": "openSource",
            "name": "tiny",
            "deviceType": "g5.xlarge",
            "scalingParameters": {"minReplicas": 1, "maxReplicas": 2, "maxBatchSize": 1, "scaleUpDelay": 1000},
        },
        "status": {**({"runtime": runtime} if runtime else {}), **status},
    }


def pod(ip: str, ready: bool = True, local: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": f"pod-{ip}", "annotations": {LOCAL_ENDPOINT_ANNOTATION: local} if local else {}},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def views(*pods: dict[str, Any]) -> Views:
    return Views(deployments={}, pods={("ns", "model-server", "tiny"): list(pods)}, nodes={}, models={}, tools={})


class Kube:
    def __init__(self) -> None:
        self.objects: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []

    async def patch_object(self, plural: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.objects.append(patch)
        return {}

    async def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        self.statuses.append(status)
        return {}


def context(local_engines: bool = False) -> tuple[Context, Kube]:
    kube = Kube()
    ctx = SimpleNamespace(catalog=DEFAULT_CATALOG, settings=SimpleNamespace(local_engines=local_engines), kube=kube)
    return cast(Context, ctx), kube


def mdep(data: dict[str, Any]) -> ModelDeployment:
    return ModelDeployment.model_validate({k: v for k, v in data.items() if k != "status"})


def test_a_llama_cpp_deployment_reads_llama_servers_gauges_from_its_ready_pods() -> None:
    ctx, _ = context()
    plan = scrape_plan(mdep(body("llama-cpp")), "llama-cpp", views(pod("10.0.0.1"), pod("10.0.0.2", ready=False)), ctx)
    assert plan.urls == ["http://10.0.0.1:8080/metrics"]  # the catalog's llama-cpp port, ready pods only
    assert plan.names == LLAMA_CPP_METRICS
    assert plan.signal == "llama-cpp: llamacpp:requests_processing + llamacpp:requests_deferred"


@pytest.mark.parametrize("runtime", ["vllm", "ctranslate2"])
def test_vllm_and_ctranslate2_deployments_read_the_vllm_gauges(runtime: str) -> None:
    ctx, _ = context()
    plan = scrape_plan(mdep(body(runtime)), runtime, views(pod("10.0.0.1")), ctx)
    assert plan.urls == ["http://10.0.0.1:8000/metrics"]
    assert plan.names == VLLM_METRICS
    assert plan.signal == f"{runtime}: vllm:num_requests_running + vllm:num_requests_waiting"


def test_the_local_engines_endpoint_is_scraped_on_the_local_control_plane_only() -> None:
    replica = pod("10.244.0.9", local="http://127.0.0.1:41234/")
    local, _ = context(local_engines=True)
    assert scrape_plan(mdep(body("llama-cpp")), "llama-cpp", views(replica), local).urls == [
        "http://127.0.0.1:41234/metrics"
    ]
    cluster, _ = context(local_engines=False)  # an annotation cannot redirect the operator in a cluster
    assert scrape_plan(mdep(body("llama-cpp")), "llama-cpp", views(replica), cluster).urls == [
        "http://10.244.0.9:8080/metrics"
    ]


def test_the_metrics_url_annotation_wins_and_an_unknown_runtime_scrapes_nothing_else() -> None:
    ctx, _ = context()
    annotated = body("llama-cpp", {METRICS_URL_ANNOTATION: "http://gw/metrics"})
    assert scrape_plan(mdep(annotated), "llama-cpp", views(pod("10.0.0.1")), ctx).urls == ["http://gw/metrics"]
    assert scrape_plan(mdep(body(None)), None, views(pod("10.0.0.1")), ctx).urls == []


def tick(data: dict[str, Any], page: str, ctx: Context) -> tuple[Event, ...]:
    async def run() -> tuple[Event, ...]:
        transport = httpx.MockTransport(lambda request: httpx.Response(200, text=page))
        async with httpx.AsyncClient(transport=transport) as http:
            return await autoscale(ctx, http, data, views(pod("10.0.0.1")))

    return asyncio.run(run())


def test_a_loaded_llama_server_scales_the_deployment_up_naming_the_signal() -> None:
    ctx, kube = context()
    assert tick(body("llama-cpp"), LLAMA_PAGE, ctx) == ()  # scaleUpDelay 1000 ms: the wait starts
    [status] = kube.statuses
    assert status["autoscaler"]["reason"] == "Holding"
    assert status["autoscaler"]["pending"]["toReplicas"] == 2
    now = int(time.time() * 1000)
    held = {**status["autoscaler"], "pending": {**status["autoscaler"]["pending"], "sinceMs": now - 2000}}
    kube.statuses.clear()
    events = tick(body("llama-cpp", autoscaler=held), LLAMA_PAGE, ctx)
    assert kube.objects == [{"spec": {"replicas": 2}}]  # load 6 on maxBatchSize 1: maxReplicas
    [event] = events
    assert (event.type, event.reason) == ("Normal", "ScaleUp")
    assert "load 6 on 1 replica(s)" in event.message
    assert "signal llama-cpp: llamacpp:requests_processing + llamacpp:requests_deferred" in event.message
    assert kube.statuses == [
        {
            "autoscaler": {
                "pending": None,
                "signal": "llama-cpp: llamacpp:requests_processing + llamacpp:requests_deferred",
                "reason": "ScaleUp",
                "scraped": 1,
                "reporting": 1,
            }
        }
    ]


def test_an_engine_without_its_gauges_is_no_metrics_with_one_warning() -> None:
    # a vLLM page where llama.cpp's gauges are expected (e.g. llama-server without --metrics answers 404,
    # or a server exporting other names): NoMetrics, a Warning Event once, the status says why
    ctx, kube = context()
    [event] = tick(body("llama-cpp"), VLLM_PAGE, ctx)
    assert (event.type, event.reason) == ("Warning", "NoMetrics")
    assert "none of the 1 ready replica(s) exported llama-cpp: llamacpp:requests_processing" in event.message
    assert kube.objects == []
    [status] = kube.statuses
    assert status["autoscaler"]["reason"] == "NoMetrics"
    assert (status["autoscaler"]["scraped"], status["autoscaler"]["reporting"]) == (1, 0)
    # the next tick: the same status, no new Event, no write
    again, kube_again = context()
    assert tick(body("llama-cpp", **status), VLLM_PAGE, again) == ()
    assert kube_again.statuses == []


def test_a_finished_wait_is_removed_from_the_status() -> None:
    ctx, kube = context()
    waiting = {"pending": {"fromReplicas": 1, "toReplicas": 2, "sinceMs": 1, "lastMs": 1}, "reason": "Holding"}
    idle = "llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n"
    tick(body("llama-cpp", autoscaler=waiting), idle, ctx)
    [status] = kube.statuses
    assert status["autoscaler"]["pending"] is None  # merge patch: null deletes it
    assert status["autoscaler"]["reason"] == "WithinBounds"
