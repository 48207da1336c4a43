"""A GGUF ModelDeployment autoscales on the load llama.cpp's real server reports, end to end.

Nothing is scripted: the tiny random-weight GGUF model is imported through the public import API, a
ModelDeployment (minReplicas 1, maxReplicas 2, maxBatchSize 1: one llama-server slot) is created, and
the local engine runner starts llama.cpp's own ``llama-server`` (build-llama-server.sh's binary, with
the operator's arguments: ``--parallel 1 --metrics``) for each of its pods. Client threads send
chat completions to the engine until told to stop (or their own deadline passes): one request in the
slot, the others deferred. The operator reads ``llamacpp:requests_processing`` and
``llamacpp:requests_deferred`` from the engine's ``/metrics`` and scales to 2 replicas after
scaleUpDelay; when the load stops it scales back to 1 after scaleDownDelay. Replica counts are read
through the Kubernetes API (the Deployment and the ModelDeployment), and the Events and
status.autoscaler name the signal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from dockyard_api.settings import ApiSettings
from dockyard_localcluster.engines import LOCAL_ENDPOINT_ANNOTATION, EngineRunner
from dockyard_localcluster.images.inputs import llama_server_context
from dockyard_operator.builders.common import MODEL_DEPLOYMENT_LABEL
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create, get, model_deployment, wait_job
from tests.support.engines import engine_runner
from tests.support.publicapi import ImportClient, api_key
from tests.support.runners import RunningFacade, run_facade, run_operator
from tests.support.waiting import wait_for

from .test_local_engines import import_tiny_model, pods_of, ready

ENV = "dev"
MDEP = "busy"
SIGNAL = "llama-cpp: llamacpp:requests_processing + llamacpp:requests_deferred"
SCALE_UP_DELAY_MS = 1_000
SCALE_DOWN_DELAY_MS = 2_000
CLIENTS = 6
"""Concurrent chat completions: with one slot, 1 processing and up to 5 deferred."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-store")


@pytest.fixture(scope="module")
def operator(cluster: E2ECluster, crds: None, store: Path) -> Iterator[None]:
    env = {
        "DOCKYARD_OPERATOR_MODEL_STORE": str(store),
        "DOCKYARD_OPERATOR_LOCAL_ENGINES": "true",
        # a shared CI machine: a scrape that takes longer than the default 0.5 s would count as no metrics
        "DOCKYARD_OPERATOR_METRICS_TIMEOUT_SECONDS": "2",
    }
    with run_operator(env=env):
        yield


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, crds: None, store: Path) -> Iterator[RunningFacade]:
    with run_facade(ApiSettings(model_store=store, sweep_interval_seconds=0)) as running:
        yield running


@pytest.fixture(scope="module")
def runner(api: client.ApiClient, store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineRunner]:
    """The local engine runner with llama.cpp's own server for GGUF pods (compiled on first use)."""
    binary = llama_server_context() / "llama-server"
    with engine_runner(api, store, tmp_path_factory.mktemp("engines"), llama_server=binary) as engines:
        yield engines


pytestmark = pytest.mark.usefixtures("operator", "runner")


class ChatLoad:
    """``CLIENTS`` threads, each sending chat completions one after another to ``url`` until
    :meth:`stop` or ``seconds`` have passed (they stop by themselves)."""

    def __init__(self, url: str, seconds: float) -> None:
        self.url, self.deadline = url, time.monotonic() + seconds
        self.stopping = threading.Event()
        self.answered = 0
        self.failures: list[str] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(CLIENTS)]
        for thread in self.threads:
            thread.start()

    def _client(self) -> None:
        # ignore_eos: the random-weight model would stop after a few tokens; 1,500 keep the slot busy
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1500, "ignore_eos": True}
        with httpx.Client(timeout=120) as http:
            while not self.stopping.is_set() and time.monotonic() < self.deadline:
                try:
                    resp = http.post(f"{self.url}/v1/chat/completions", json=body)
                    ok, why = resp.status_code == 200, f"{resp.status_code} {resp.text[:200]}"
                except httpx.HTTPError as exc:
                    ok, why = False, repr(exc)
                with self.lock:
                    self.answered += ok
                    if not ok:
                        self.failures.append(why)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=150)
        assert not any(t.is_alive() for t in self.threads)


def mdep_events(api: client.ApiClient, namespace: str) -> list[tuple[str, str, str]]:
    listed = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind=ModelDeployment,involvedObject.name={MDEP}"
    )
    return [(str(e.type), str(e.reason), str(e.message)) for e in listed.items]


def test_a_gguf_deployment_scales_on_llama_servers_load(
    api: client.ApiClient, namespace: str, facade: RunningFacade, tmp_path: Path
) -> None:
    create(api, namespace, "environments", "Environment", ENV, {"appRef": "app"})
    model_id = import_tiny_model(ImportClient(facade.client, namespace, ENV, api_key(api, namespace, ENV)), tmp_path)
    model_deployment(
        api, namespace, MDEP, model=model_id,
        scalingParameters={"minReplicas": 1, "maxReplicas": 2, "maxBatchSize": 1,
                           "scaleUpDelay": SCALE_UP_DELAY_MS, "scaleDownDelay": SCALE_DOWN_DELAY_MS},
    )  # fmt: skip
    wait_job(api, namespace, "modeldeployments", MDEP, "SUCCESS", timeout=180)
    assert get(api, namespace, "modeldeployments", MDEP)["status"]["runtime"] == "llama-cpp"
    [pod] = pods_of(api, namespace, MDEP)
    assert ready(pod)
    engine = pod["metadata"]["annotations"][LOCAL_ENDPOINT_ANNOTATION]
    page = httpx.get(f"{engine}/metrics", timeout=10)
    assert page.status_code == 200, page.text  # llama-server with --metrics, not llama-cpp-python's server
    assert "llamacpp:requests_deferred" in page.text

    apps = client.AppsV1Api(api)

    def replicas() -> int:
        [deployment] = apps.list_namespaced_deployment(
            namespace, label_selector=f"{MODEL_DEPLOYMENT_LABEL}={MDEP}"
        ).items
        return int(deployment.spec.replicas or 0)

    def autoscaler() -> dict[str, Any]:
        found: dict[str, Any] = get(api, namespace, "modeldeployments", MDEP).get("status", {}).get("autoscaler") or {}
        return found

    def wait_replicas(count: int, timeout: float, what: str) -> None:
        try:
            wait_for(lambda: replicas() == count, timeout=timeout, what=what)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; Deployment replicas {replicas()}, status.autoscaler {autoscaler()}, "
                f"Events {mdep_events(api, namespace)}"
            ) from None

    # idle: the engine reports load 0, which minReplicas covers
    state = wait_for(lambda: autoscaler() if autoscaler().get("reporting") == 1 else None, timeout=30, what="a scrape")
    assert (state["signal"], state["reason"]) == (SIGNAL, "WithinBounds")
    assert replicas() == 1

    load = ChatLoad(engine, seconds=120)
    try:
        wait_replicas(2, timeout=60, what="the autoscaler to scale up to 2 replicas under load")
        # the second replica gets its own engine; both report (the load stays on the first one's engine)
        wait_for(lambda: get(api, namespace, "modeldeployments", MDEP)["status"].get("readyReplicas") == 2,
                 timeout=120, what="2 ready replicas")  # fmt: skip
        assert all(LOCAL_ENDPOINT_ANNOTATION in p["metadata"]["annotations"] for p in pods_of(api, namespace, MDEP))
        assert replicas() == 2
    finally:
        load.stop()
    stopped = time.monotonic()
    assert load.answered > 0
    assert not load.failures, load.failures[:3]

    wait_replicas(1, timeout=60, what="the autoscaler to scale down to 1 replica once the load stopped")
    # not before scaleDownDelay (0.5 s for the last answer's way from the engine's slot to its thread)
    assert time.monotonic() - stopped >= SCALE_DOWN_DELAY_MS / 1000 - 0.5
    assert get(api, namespace, "modeldeployments", MDEP)["spec"]["replicas"] == 1

    events = mdep_events(api, namespace)
    [up] = [message for _, reason, message in events if reason == "ScaleUp"]
    [down] = [message for _, reason, message in events if reason == "ScaleDown"]
    assert f"signal {SIGNAL}" in up
    assert "scaling up from 1 to 2" in up
    load_seen = float(up.split("load ", 1)[1].split(" ", 1)[0])
    assert load_seen > 1  # requests deferred behind the one slot were counted, not only the one processing
    assert f"signal {SIGNAL}" in down
    assert "scaling down from 2 to 1" in down
    held_ms = int(down.split("wanted for ", 1)[1].split(" ms", 1)[0])
    assert held_ms >= SCALE_DOWN_DELAY_MS
    assert not [e for e in events if e[1] == "NoMetrics"]
