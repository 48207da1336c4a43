"""Model pods that answer on the local control plane (Contract 1), end to end.

A tiny random-weight CTranslate2 model (directory tar) takes the same path through Dockyard's own
CTranslate2 server, and its chat completion goes through the facade's local endpoint resolver.

The tiny random-weight GGUF model is imported through the PUBLIC import API, deployed through the
public deploy API on g5.xlarge, and the local engine runner starts llama.cpp's server for its pod:
the pod turns Ready only once the engine answers, carries ``dockyard.dev/local-endpoint``, and a chat
completion through that endpoint answers. Impossible runtime pairs are refused (422 naming the field;
FAILED for a kubectl-created deployment), the engine stops with the pod, and a pod beyond the cap of
local engines stays simulated with an Event that says so.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from dockyard_api.cache import Informer
from dockyard_api.runtime.endpoints import MODEL_DEPLOYMENT_LABEL, EndpointResolver
from dockyard_api.runtime.model import Completion, ModelClient
from dockyard_api.settings import ApiSettings
from dockyard_core.kubeclient import AsyncKube
from dockyard_localcluster.engines import LOCAL_ENDPOINT_ANNOTATION, EngineRunner
from tests.support.cluster import E2ECluster
from tests.support.ct2_model import build as build_ct2
from tests.support.dockyard import condition, create, get, model_deployment, wait_job
from tests.support.engines import CLOCK_TOOL, engine_runner, tiny_gguf
from tests.support.publicapi import ImportClient, api_key
from tests.support.runners import RunningFacade, run_facade, run_operator
from tests.support.waiting import wait_for

ENV = "dev"
MAX_ENGINES = 1
DEPLOY_BODY: dict[str, Any] = {
    "name": "tiny",
    "deviceType": "g5.xlarge",
    "hyperParameters": {"temperature": 0.0, "maxTokens": 32, "topP": 1.0, "topK": 40},
    "scalingParameters": {"maxBatchSize": 2, "minReplicas": 1},
    "optimizationInfo": {"optimizationType": "", "quantizationType": ""},
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-store")


@pytest.fixture(scope="module")
def operator(cluster: E2ECluster, crds: None, store: Path) -> Iterator[None]:
    env = {"DOCKYARD_OPERATOR_MODEL_STORE": str(store), "DOCKYARD_OPERATOR_LOCAL_ENGINES": "true"}
    with run_operator(env=env):
        yield


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, crds: None, store: Path) -> Iterator[RunningFacade]:
    with run_facade(ApiSettings(model_store=store, sweep_interval_seconds=0)) as running:
        yield running


@pytest.fixture(scope="module")
def runner(api: client.ApiClient, store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineRunner]:
    """The local engine runner, in a thread of the test process (``make run`` runs it as a process)."""
    with engine_runner(api, store, tmp_path_factory.mktemp("engines"), max_engines=MAX_ENGINES) as engines:
        yield engines


pytestmark = pytest.mark.usefixtures("operator", "runner")


def import_tiny_model(imports: ImportClient, directory: Path) -> str:
    """The chunked import (docs/public-api.md) of the tiny GGUF; returns the modelId once the import job is SUCCESS."""
    path = tiny_gguf(directory)
    return import_file(imports, path.name, "gguf", path.read_bytes())


def import_tiny_ct2_model(imports: ImportClient, directory: Path) -> str:
    """The tiny random-weight CTranslate2 model (tests/support/ct2_model.py, tokenizer trained here) as a
    tar of its directory, through the same public chunked import; returns the modelId."""
    model = build_ct2(directory / "tiny-ct2")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(model.path, arcname="tiny-ct2")
    return import_file(imports, "tiny-ct2.tar", "tar", buf.getvalue())


def import_file(imports: ImportClient, name: str, extension: str, data: bytes, *, is_adapter: bool = False) -> str:
    chunk = 200 * 1024
    parts = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    start = imports.start(
        fileContext="model",
        totalChunks=len(parts),
        fileExtension=extension,
        fileName=name,
        fileSize=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        isAdapter=is_adapter,
    )
    assert start.status_code == 200, start.text
    session = start.json()
    for number, part in enumerate(parts):
        assert imports.chunk(session["sessionId"], number, part).status_code == 200
    done = imports.complete(session["sessionId"])
    assert done.status_code == 200, done.text
    job_id = done.json()["dockStatusId"]

    def finished() -> dict[str, Any] | None:
        record: dict[str, Any] = imports.dock_status(job_id).json()
        return record if record["status"] != "IN_PROGRESS" else None

    record = wait_for(finished, timeout=60, what="the import job")
    assert record["status"] == "SUCCESS", record
    return str(session["modelId"])


def pods_of(api: client.ApiClient, namespace: str, mdep: str) -> list[dict[str, Any]]:
    listed = client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"dockyard.dev/model-deployment={mdep}"
    )
    pods: list[dict[str, Any]] = api.sanitize_for_serialization(listed)["items"]
    return pods


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def events_of(api: client.ApiClient, namespace: str, pod: str) -> list[str]:
    listed = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}")
    return [f"{e.reason}: {e.message}" for e in listed.items]


def test_an_imported_gguf_model_answers_through_its_pods_local_endpoint(
    api: client.ApiClient, namespace: str, facade: RunningFacade, tmp_path: Path
) -> None:
    # the public deploy API makes the caller's Environment own the deployment: it must exist
    create(api, namespace, "environments", "Environment", ENV, {"appRef": "app"})
    imports = ImportClient(facade.client, namespace, ENV, api_key(api, namespace, ENV))
    model_id = import_tiny_model(imports, tmp_path)
    storage = get(api, namespace, "models", model_id)["status"]["storage"]
    assert (storage["format"], storage["file"]) == ("gguf", "tiny.gguf")

    # impossible pairs are refused at the public API, naming the field
    for info, field in (
        ({"optimizationType": "ctranslate2", "quantizationType": ""}, "body.optimizationInfo.optimizationType"),
        ({"optimizationType": "", "quantizationType": "int8_float16"}, "body.optimizationInfo.quantizationType"),
    ):
        refused = facade.client.post(
            f"{imports.root}/models/{model_id}/deploy",
            params={"modelType": "openSource"},
            json={**DEPLOY_BODY, "optimizationInfo": info},
            headers=imports.headers,
        )
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert field in error["message"]
        assert error["details"][0]["field"] == field

    resp = facade.client.post(
        f"{imports.root}/models/{model_id}/deploy",
        params={"modelType": "openSource"},
        json=DEPLOY_BODY,
        headers=imports.headers,
    )
    assert resp.status_code == 200, resp.text
    job = wait_job(api, namespace, "modeldeployments", "tiny", "SUCCESS", timeout=180)
    assert job["dockStatusId"] == resp.json()["dockStatusId"]
    mdep = get(api, namespace, "modeldeployments", "tiny")
    assert mdep["status"]["runtime"] == "llama-cpp"

    [pod] = pods_of(api, namespace, "tiny")
    assert ready(pod)
    assert pod["metadata"]["labels"]["dockyard.dev/local-engine"] == "true"
    assert condition(pod, "dockyard.dev/local-engine")["status"] == "True"
    endpoint = pod["metadata"]["annotations"][LOCAL_ENDPOINT_ANNOTATION]
    assert endpoint.startswith("http://127.0.0.1:")
    assert not endpoint.endswith("/")
    assert any(e.startswith("LocalEngineReady") for e in events_of(api, namespace, pod["metadata"]["name"]))

    # the OpenAI-compatible API under /v1, served by llama.cpp, with the deployment's name as the model
    answer = httpx.post(
        f"{endpoint}/v1/chat/completions",
        json={"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16, "temperature": 0},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["choices"][0]["message"]["content"].strip()
    assert body["usage"]["completion_tokens"] > 0
    forced = httpx.post(
        f"{endpoint}/v1/chat/completions",
        json={
            "model": "tiny",
            "messages": [{"role": "user", "content": "What time is it in Tokyo?"}],
            "tools": [CLOCK_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "clock"}},
            "max_tokens": 48,
        },
        timeout=60,
    )
    assert forced.status_code == 200, forced.text
    [call] = forced.json()["choices"][0]["message"]["tool_calls"]
    assert "timezone" in json.loads(call["function"]["arguments"])

    # the engine stops with the pod
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "dockyard.dev", "v1alpha1", namespace, "modeldeployments", "tiny"
    )
    wait_for(lambda: not pods_of(api, namespace, "tiny"), timeout=60, what="the pod to go")

    def engine_gone() -> bool:
        try:
            httpx.get(f"{endpoint}/v1/models", timeout=1)
        except httpx.HTTPError:
            return True
        return False

    wait_for(engine_gone, timeout=30, what="the engine process to stop")


def resolve_and_complete(kubeconfig: str, namespace: str, mdep: str) -> tuple[str, Completion, Completion, str]:
    """The facade's path to a model (endpoint mode ``local``): the resolver over live informers of the
    ModelDeployments and of their pods, then the runtime's model client, once whole and once streamed."""

    async def go() -> tuple[str, Completion, Completion, str]:
        kube = AsyncKube(kubeconfig)
        deployments = Informer(kube, "modeldeployments")
        pods = Informer(kube, "pods", label_selector=MODEL_DEPLOYMENT_LABEL, index_label=MODEL_DEPLOYMENT_LABEL)
        deployments.start()
        pods.start()
        models = ModelClient()
        try:
            base = await EndpointResolver("local", deployments, pods).base_url(namespace, mdep)
            body = {"model": mdep, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "min_tokens": 4}
            whole = await models.complete(base, body, what=mdep)
            pieces: list[str] = []

            async def on_delta(text: str) -> None:
                pieces.append(text)

            streamed = await models.complete(base, body, what=mdep, on_delta=on_delta)
            return base, whole, streamed, "".join(pieces)
        finally:
            await models.aclose()
            await deployments.stop()
            await pods.stop()
            await kube.aclose()

    return asyncio.run(go())


def test_an_imported_ctranslate2_model_answers_through_dockyards_ct2_server(
    api: client.ApiClient, cluster: E2ECluster, namespace: str, facade: RunningFacade, tmp_path: Path
) -> None:
    """The same path for a CTranslate2 model: public import of its directory (tar), public deploy with
    optimizationType ctranslate2 and int8_float16 on a GPU type; the runner starts Dockyard's CT2 server
    (CPU fallback compute type) and the facade's local resolver reaches it."""
    create(api, namespace, "environments", "Environment", ENV, {"appRef": "app"})
    imports = ImportClient(facade.client, namespace, ENV, api_key(api, namespace, ENV))
    model_id = import_tiny_ct2_model(imports, tmp_path)
    storage = get(api, namespace, "models", model_id)["status"]["storage"]
    assert storage["format"] == "ctranslate2"
    assert 0 < storage["filesBytes"] <= storage["sizeBytes"]  # a tar: headers and padding on top

    body = {
        **DEPLOY_BODY,
        "name": "tiny-ct2",
        "optimizationInfo": {"optimizationType": "ctranslate2", "quantizationType": "int8_float16"},
    }
    resp = facade.client.post(
        f"{imports.root}/models/{model_id}/deploy",
        params={"modelType": "openSource"},
        json=body,
        headers=imports.headers,
    )
    assert resp.status_code == 200, resp.text
    wait_job(api, namespace, "modeldeployments", "tiny-ct2", "SUCCESS", timeout=180)
    assert get(api, namespace, "modeldeployments", "tiny-ct2")["status"]["runtime"] == "ctranslate2"
    [pod] = pods_of(api, namespace, "tiny-ct2")
    assert ready(pod)
    [weights] = [v for v in pod["spec"]["volumes"] if v["name"] == "model-store"]
    limit_mib = -(-(storage["filesBytes"] * 110 // 100 + 256 * 2**20) // 2**20)  # files + 10 % + 256 MiB
    assert abs(int(weights["emptyDir"]["sizeLimit"].removesuffix("Mi")) - limit_mib) <= 1
    endpoint = pod["metadata"]["annotations"][LOCAL_ENDPOINT_ANNOTATION]

    health = httpx.get(f"{endpoint}/health", timeout=10).json()
    assert health["model"] == "tiny-ct2"
    assert health["device"] == "cpu"
    assert health["compute_type"] == "int8_float32"  # int8_float16 asked, the CPU fallback
    assert health["max_batch_size"] == 2

    base, whole, streamed, text = resolve_and_complete(str(cluster.kubeconfig), namespace, "tiny-ct2")
    assert base == endpoint
    assert whole.content
    assert whole.tokens_in > 0
    assert 4 <= whole.tokens_out <= 12
    assert whole.finish_reason in ("stop", "length")
    # greedy (hyperParameters temperature 0 as the server's default): the stream says the same
    assert text == streamed.content == whole.content
    assert (streamed.tokens_in, streamed.tokens_out) == (whole.tokens_in, whole.tokens_out)

    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "dockyard.dev", "v1alpha1", namespace, "modeldeployments", "tiny-ct2"
    )
    wait_for(lambda: not pods_of(api, namespace, "tiny-ct2"), timeout=60, what="the pod to go")

    def engine_gone() -> bool:
        try:
            httpx.get(f"{endpoint}/health", timeout=1)
        except httpx.HTTPError:
            return True
        return False

    wait_for(engine_gone, timeout=30, what="the CT2 server to stop")


def test_a_gguf_model_deployed_with_kubectl_for_ctranslate2_fails_with_the_reason(
    api: client.ApiClient, namespace: str, facade: RunningFacade, tmp_path: Path
) -> None:
    imports = ImportClient(facade.client, namespace, ENV, api_key(api, namespace, ENV))
    model_id = import_tiny_model(imports, tmp_path)
    model_deployment(
        api,
        namespace,
        "wrong",
        model=model_id,
        optimizationInfo={"optimizationType": "ctranslate2", "quantizationType": ""},
    )
    job = wait_job(api, namespace, "modeldeployments", "wrong", "FAILED", timeout=60)
    assert job["reason"] == "InvalidOptimization"
    assert "optimizationInfo.optimizationType" in job["message"]
    assert "GGUF" in job["message"]


def test_pods_beyond_the_cap_stay_simulated_and_say_so(
    api: client.ApiClient, namespace: str, facade: RunningFacade, tmp_path: Path
) -> None:
    imports = ImportClient(facade.client, namespace, ENV, api_key(api, namespace, ENV))
    model_id = import_tiny_model(imports, tmp_path)
    model_deployment(api, namespace, "first", model=model_id, scalingParameters={"maxBatchSize": 1})
    wait_job(api, namespace, "modeldeployments", "first", "SUCCESS", timeout=180)
    [first] = pods_of(api, namespace, "first")
    assert LOCAL_ENDPOINT_ANNOTATION in first["metadata"]["annotations"]

    model_deployment(
        api, namespace, "second", model=model_id, device_type="g4dn.xlarge", scalingParameters={"maxBatchSize": 1}
    )
    wait_job(api, namespace, "modeldeployments", "second", "SUCCESS", timeout=120)
    [second] = pods_of(api, namespace, "second")
    assert ready(second)
    assert LOCAL_ENDPOINT_ANNOTATION not in (second["metadata"].get("annotations") or {})
    name = second["metadata"]["name"]
    simulated = wait_for(
        lambda: [e for e in events_of(api, namespace, name) if e.startswith("LocalEngineSimulated")],
        timeout=30,
        what="the LocalEngineSimulated event",
    )
    assert f"cap {MAX_ENGINES}" in simulated[0]
