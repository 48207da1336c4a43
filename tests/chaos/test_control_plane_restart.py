"""The control plane restarted under load, with the operator and the facade left running:

- kube-apiserver killed and started again while 100 ModelDeployments are deployed through the public
  API and a chunked upload is in progress: every deployment reaches its final dock status, the upload
  completes with the right SHA-256, nothing is duplicated or orphaned, nothing is restarted;
- etcd killed for ~10 s: public calls during the outage answer 503 in the JSON error shape with
  Retry-After within their deadline (never hang), and succeed after it.

Every request loop is bounded; every operation is counted as tried, recovered (needed a retry) or lost.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from dockyard_api.settings import ApiSettings
from dockyard_localcluster.nodes import POOL_LABEL, gpu_node
from dockyard_operator.builders.common import MODEL_DEPLOYMENT_LABEL
from tests.chaos.conftest import ControlPlane, Figures, OperatorProcess
from tests.support.dockyard import get, hub_model
from tests.support.public import PublicEnvironment, environment_with_key, ready_model_status, wait_model_ready
from tests.support.runners import RunningFacade, run_facade
from tests.support.waiting import wait_for

DEPLOYMENTS = 100
DEADLINE = 5.0
"""The facade's deadline per Kubernetes call in these scenarios (DOCKYARD_API_KUBE_TIMEOUT_SECONDS)."""
RETRIES = 40
CHUNK = 1024 * 1024
CHUNKS = 6


@pytest.fixture
def facade(cluster: Any) -> Iterator[RunningFacade]:
    settings = ApiSettings(kube_timeout_seconds=DEADLINE, api_key_cache_seconds=0, last_used_interval_seconds=3600,
                           sweep_interval_seconds=0)  # fmt: skip
    with run_facade(settings) as running:
        yield running


class Caller:
    """A public-API client with a bounded retry loop: 503 (with Retry-After) and connection failures are
    retried, anything else is the answer. Counts what it did."""

    def __init__(self, http: httpx.Client, figures: Figures) -> None:
        self.http = http
        self.figures = figures
        self.lock = threading.Lock()

    def call(self, send: Callable[[], httpx.Response], ok: tuple[int, ...] = (200,)) -> httpx.Response:
        with self.lock:
            self.figures.count("operations_tried")
        for attempt in range(RETRIES):
            try:
                response = send()
            except httpx.TransportError:
                response = None
            if response is not None and response.status_code in ok:
                if attempt:
                    with self.lock:
                        self.figures.count("recovered")
                return response
            if response is not None and response.status_code != 503:
                raise AssertionError(f"unexpected answer {response.status_code}: {response.text}")
            if response is not None:
                assert response.json()["error"]["code"] == "upstream_unavailable", response.text
                assert int(response.headers["retry-after"]) >= 1
            with self.lock:
                self.figures.count("retries")
            time.sleep(1.0)
        with self.lock:
            self.figures.count("lost")
        raise AssertionError(f"no success after {RETRIES} attempts")


@pytest.fixture
def chaos_nodes(api: client.ApiClient) -> Iterator[None]:
    """100 more g5.xlarge nodes for the 100 deployments (outside the node pools, removed afterwards)."""
    core = client.CoreV1Api(api)
    names = []
    for i in range(DEPLOYMENTS):
        node = gpu_node("g5.xlarge", i)
        node["metadata"]["name"] = name = f"chaos-g5-xlarge-{i}"
        node["metadata"]["labels"].pop(POOL_LABEL, None)
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        node["metadata"]["labels"]["dockyard.dev/chaos"] = "true"
        try:
            core.create_node(node)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        names.append(name)
    wait_for(
        lambda: (
            sum(
                1
                for n in core.list_node(label_selector="dockyard.dev/chaos=true").items
                if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
            )
            >= DEPLOYMENTS
        ),
        timeout=120,
        what="the chaos nodes Ready",
    )
    yield
    core.delete_collection_node(label_selector="dockyard.dev/chaos=true")


def body(name: str) -> dict[str, Any]:
    return {"name": name, "deviceType": "g5.xlarge",
            "hyperParameters": {"temperature": 0.7, "maxTokens": 256, "topP": 0.9, "topK": 40},
            "scalingParameters": {"minReplicas": 1, "maxReplicas": 1}}  # fmt: skip


@pytest.mark.timeout(900)  # 100 rollouts on a loaded 2-core machine: minutes, not the suite's 300 s default
def test_kube_apiserver_restart_while_100_deployments_roll_out_and_an_upload_runs(
    api: client.ApiClient,
    namespace: str,
    control_plane: ControlPlane,
    operator_process: OperatorProcess,
    chaos_nodes: None,
    facade: RunningFacade,
    figures: Figures,
) -> None:
    operator_process.start()
    hub_model(api, namespace, "model")
    wait_model_ready(api, namespace, "model", timeout=60)
    env = environment_with_key(api, namespace)
    caller = Caller(facade.client, figures)
    data = b"GGUF" + os.urandom(CHUNK * CHUNKS - 4)
    upload_halfway = threading.Event()
    outage_begun = threading.Event()
    upload: dict[str, Any] = {}

    def send_chunk(session_id: str, n: int, piece: bytes) -> httpx.Response:
        return facade.client.post(
            f"{env.base}/api/public/files/session/{session_id}",
            data={"chunkNumber": str(n)},
            files={"file": ("blob", piece, "application/octet-stream")},
            headers=env.headers,
        )

    def run_upload() -> None:
        root = f"{env.base}/api/public/files/session"
        start = {"fileContext": "model", "totalChunks": CHUNKS, "fileExtension": "gguf", "fileName": "chaos.gguf",
                 "fileSize": len(data), "sha256": hashlib.sha256(data).hexdigest()}  # fmt: skip
        session = caller.call(lambda: facade.client.post(f"{root}/start", json=start, headers=env.headers)).json()
        upload["session"] = session
        for n in range(CHUNKS):
            piece = data[n * CHUNK : (n + 1) * CHUNK]
            caller.call(lambda n=n, piece=piece: send_chunk(session["sessionId"], n, piece))
            if n == CHUNKS // 2:
                upload_halfway.set()
                outage_begun.wait(timeout=120)  # the rest of the upload meets the outage and the restart
        upload["job"] = caller.call(
            lambda: facade.client.post(f"{root}/{session['sessionId']}/complete", headers=env.headers)
        ).json()

    deployed: dict[str, str] = {}
    started_deploys = threading.Semaphore(0)

    def deploy(i: int) -> None:
        name = f"chaos-{i:03d}"
        url = f"{env.base}/api/public/models/model/deploy"
        response = caller.call(
            lambda: facade.client.post(url, params={"modelType": "openSource"}, json=body(name), headers=env.headers)
        )
        deployed[name] = response.json()["dockStatusId"]
        started_deploys.release()

    def restart() -> None:
        upload_halfway.wait(timeout=120)
        for _ in range(20):  # some deployments are on their way first
            started_deploys.acquire(timeout=120)
        outage = time.monotonic()
        control_plane.stop("kube-apiserver")
        outage_begun.set()
        figures.add("apiserver_killed_after_deploys", len(deployed))
        time.sleep(3)  # the API server stays down a moment: calls in flight fail, new ones are refused
        control_plane.start()
        figures.add("apiserver_outage_seconds", round(time.monotonic() - outage, 1))

    with ThreadPoolExecutor(max_workers=10) as pool:
        chaos = [pool.submit(run_upload), pool.submit(restart)]
        deploys = [pool.submit(deploy, i) for i in range(DEPLOYMENTS)]
        for future in [*chaos, *deploys]:
            future.result(timeout=600)

    # every deployment reaches its final dock status (SUCCESS: each has a node)
    def finished() -> bool:
        pending = [n for n, job_id in deployed.items() if _dock_status(facade.client, env, job_id) != "SUCCESS"]
        return not pending

    wait_for(finished, timeout=400, interval=2, what="all 100 deployments SUCCESS")
    figures.add("deployments_success", len(deployed))
    # the upload completed with the right SHA-256
    job_id = upload["job"]["dockStatusId"]
    wait_for(lambda: _dock_status(facade.client, env, job_id) in ("SUCCESS", "FAILED"), timeout=120,
             what="the import job")  # fmt: skip
    assert _dock_status(facade.client, env, job_id) == "SUCCESS"
    model = get(api, namespace, "models", upload["job"]["modelId"])
    assert model["status"]["storage"]["sha256"] == hashlib.sha256(data).hexdigest()
    figures.add("upload_sha256_ok", True)
    # no duplicates, no orphans; nothing was restarted but the API server
    mdeps = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "dockyard.dev", "v1alpha1", namespace, "modeldeployments"
    )["items"]
    assert sorted(m["metadata"]["name"] for m in mdeps) == sorted(deployed)
    workloads = client.AppsV1Api(api).list_namespaced_deployment(namespace, label_selector=MODEL_DEPLOYMENT_LABEL)
    per_mdep = Counter(d.metadata.labels[MODEL_DEPLOYMENT_LABEL] for d in workloads.items)
    assert set(per_mdep) == set(deployed)
    assert set(per_mdep.values()) == {1}, "a ModelDeployment with more than one Deployment"
    uids = {m["metadata"]["uid"] for m in mdeps}
    orphans = [
        d.metadata.name for d in workloads.items if not {o.uid for o in d.metadata.owner_references or []} & uids
    ]
    assert orphans == []
    assert operator_process.starts == 1
    assert operator_process.proc is not None
    assert operator_process.proc.poll() is None
    assert facade.client.get("/readyz").status_code == 200
    figures.add("lost", figures.numbers.get("lost", 0))
    assert figures.numbers["lost"] == 0


def _dock_status(http: httpx.Client, env: PublicEnvironment, job_id: str) -> str | None:
    response = http.get(f"{env.base}/api/public/dock-status/{job_id}", headers=env.headers)
    if response.status_code != 200:
        return None
    status: str = response.json()["status"]
    return status


def test_etcd_restart_public_calls_answer_503_with_retry_after_within_their_deadline_then_succeed(
    api: client.ApiClient, namespace: str, control_plane: ControlPlane, facade: RunningFacade, figures: Figures
) -> None:
    hub_model(api, namespace, "model")
    ready_model_status(api, namespace, "model")
    env = environment_with_key(api, namespace)
    http = facade.client
    start = {"fileContext": "model", "totalChunks": 1, "fileExtension": "gguf", "fileName": "m.gguf", "fileSize": 8}
    deploy_url = f"{env.base}/api/public/models/model/deploy"
    calls: dict[str, Callable[[], httpx.Response]] = {
        "model deploy": lambda: http.post(deploy_url, params={"modelType": "openSource"}, json=body("during-outage"),
                                          headers=env.headers),
        "import start": lambda: http.post(f"{env.base}/api/public/files/session/start", json=start,
                                          headers=env.headers),
        "dock status": lambda: http.get(f"{env.base}/api/public/dock-status/{'0' * 8}-0000-0000-0000-{'0' * 12}",
                                        headers=env.headers),
    }  # fmt: skip
    healthy = {"model deploy": 200, "import start": 200, "dock status": 404}
    for name, send in calls.items():
        assert send().status_code == healthy[name], name

    problems: list[str] = []
    durations: list[float] = []
    answers: Counter[str] = Counter()
    outage = threading.Event()
    lock = threading.Lock()

    def keep_calling(name: str, send: Callable[[], httpx.Response]) -> None:
        """Call again and again while the outage lasts (bounded by it); record and check every answer."""
        while outage.is_set():
            began = time.monotonic()
            try:
                response = send()
            except httpx.TimeoutException:
                with lock:
                    problems.append(f"{name} hung past the client's timeout")
                return
            took = time.monotonic() - began
            with lock:
                durations.append(took)
                answers[f"{name}: {response.status_code}"] += 1
                figures.count("calls_during_outage")
                if took > DEADLINE * 2 + 2:
                    problems.append(f"{name} took {took:.1f}s (deadline {DEADLINE}s per Kubernetes call)")
                if response.status_code == healthy[name]:
                    continue  # served (the API server answered from its cache, or etcd is back)
                if response.status_code != 503:
                    problems.append(f"{name}: {response.status_code} {response.text}")
                elif response.json().get("error", {}).get("code") != "upstream_unavailable" or set(
                    response.json()["error"]
                ) != {"code", "message", "details"}:
                    problems.append(f"{name}: not the error shape: {response.text}")
                elif int(response.headers.get("retry-after", "0")) < 1:
                    problems.append(f"{name}: 503 without Retry-After")
                else:
                    figures.count("answered_503_with_retry_after")

    control_plane.stop("etcd")
    outage_started = time.monotonic()
    outage.set()
    callers = [threading.Thread(target=keep_calling, args=item) for item in calls.items()]
    for thread in callers:
        thread.start()
    time.sleep(10)  # etcd stays down about 10 s; the callers keep calling meanwhile
    outage.clear()  # calls started from now on may meet etcd starting again: they are not counted
    for thread in callers:
        thread.join(timeout=60)
    control_plane.start()
    figures.add("etcd_outage_seconds", round(time.monotonic() - outage_started, 1))
    assert problems == []
    assert figures.numbers.get("answered_503_with_retry_after", 0) > 0, "the outage was not observed"
    slowest = max(durations)
    figures.add("slowest_call_seconds", round(slowest, 2))
    figures.add("answers", dict(answers))

    recovered_after = time.monotonic()
    for name, send in calls.items():
        wait_for(lambda s=send, n=name: s().status_code == healthy[n], timeout=60, interval=0.5,
                 what=f"{name} to succeed after the restart")  # fmt: skip
        figures.count("recovered")
    figures.add("recovery_seconds", round(time.monotonic() - recovered_after, 1))
    figures.add("lost", len(calls) - figures.numbers["recovered"])
    assert figures.numbers["lost"] == 0
    assert yaml.safe_dump(figures.numbers)  # recorded as plain data
