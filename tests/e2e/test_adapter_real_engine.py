"""The README's adapter example end to end, on a REAL engine (llama.cpp on the CPU), through the ``dockyard``
command against the facade and the operator on the local control plane.

The tiny GGUF base model (``dockyard-tiny-llama.gguf``, the name ``make run``'s demo imports it under) and
its tiny LoRA (``tinymodel.tiny_lora_tar``: adapter_config.json naming ``dockyard-dev/dockyard-tiny-llama``
+ a GGUF LoRA whose output.weight delta makes the model say ``LORA_TARGET``) are imported with
``dockyard import`` (the public chunked import; the LoRA with ``--adapter``), then
``dockyard deploy model <lora> --model-type fineTune`` deploys the adapter WITHOUT naming its base: the
facade resolves adapter_config.json's value to the base Model and sets the adapter's spec.baseModel, the
operator gives llama-server ``--lora``, and the local engine runner serves the base file with the LoRA
file — with the runner's default engine (llama-cpp-python's server) and with llama.cpp's own llama-server,
whose ``/lora-adapters`` lists the adapter. At temperature 0 the adapted model answers differently from the
base model served alone.

Also: an adapter whose adapter_config.json names no imported Model is refused 422 naming baseModel (no
deployment made, nothing stored changed), and ``--base-model`` chooses the base explicitly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from dockyard_api.settings import ApiSettings
from dockyard_localcluster.engines import LOCAL_ENDPOINT_ANNOTATION, EngineRunner
from dockyard_localcluster.images.inputs import llama_server_context
from dockyard_localcluster.tinymodel import LORA_BASE, LORA_TARGET, tiny_lora_tar, write_tiny_gguf
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create, get, model_deployment, wait_job
from tests.support.engines import engine_runner, llama_server
from tests.support.publicapi import ImportClient, api_key
from tests.support.runners import RunningFacade, run_facade, run_operator

from .test_local_engines import import_file, pods_of, ready

ENV = "dev"
DOCKYARD = str(Path(sys.executable).parent / "dockyard")
QUESTION = [{"role": "user", "content": "Say something."}]


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


@pytest.fixture(scope="module", params=["llama-cpp-python", "llama-server"])
def runner(
    api: client.ApiClient, store: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[EngineRunner]:
    """The local engine runner with its default GGUF engine (llama-cpp-python's server, ``--lora_path``), and
    with llama.cpp's own llama-server, the cluster's engine (the pod's ``--lora``; build-llama-server.sh's
    binary, built on first use)."""
    binary = llama_server_context() / "llama-server" if request.param == "llama-server" else None
    with engine_runner(api, store, tmp_path_factory.mktemp("engines"), llama_server=binary) as engines:
        yield engines


pytestmark = pytest.mark.usefixtures("operator", "runner")


def dockyard(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKYARD, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def imported(env: dict[str, str], cwd: Path, *args: str) -> str:
    """``dockyard import ... --json``: the modelId of the Model the import job made ready."""
    done = dockyard(env, cwd, "import", *args, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads(done.stdout)
    assert record["status"] == "SUCCESS", record
    return str(record["modelId"])


def chat(endpoint: str, model: str) -> str:
    answer = httpx.post(
        f"{endpoint}/v1/chat/completions",
        json={"model": model, "messages": QUESTION, "max_tokens": 16, "temperature": 0},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["choices"][0]["message"]["content"])


def test_the_readme_adapter_example_serves_the_lora_on_its_base_from_adapter_config(
    api: client.ApiClient, namespace: str, facade: RunningFacade, runner: EngineRunner, tmp_path: Path
) -> None:
    create(api, namespace, "environments", "Environment", ENV, {"appRef": "app"})
    key = api_key(api, namespace, ENV)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DOCKYARD_")},
        "DOCKYARD_URL": f"{facade.url}/e/{namespace}/{ENV}",
        "DOCKYARD_API_KEY": key,
    }
    (tmp_path / "tiny-lora.tar").write_bytes(tiny_lora_tar(tmp_path / "lora"))
    lora = imported(env, tmp_path, "tiny-lora.tar", "--adapter")
    adapter = get(api, namespace, "models", lora)
    assert adapter["spec"]["isAdapter"] is True
    assert adapter["status"]["adapter"] == {"baseModelNameOrPath": LORA_BASE}  # read from adapter_config.json
    assert (adapter["status"]["storage"]["format"], adapter["status"]["storage"]["file"]) == ("gguf", "tiny-lora.gguf")

    # no Model is the base yet: refused at once, naming baseModel and what adapter_config.json said
    refused = facade.client.post(
        f"/e/{namespace}/{ENV}/api/public/models/{lora}/deploy",
        params={"modelType": "fineTune"},
        json={"name": lora, "deviceType": "g5.xlarge"},
        headers={"x-api-key": key},
    )
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["details"][0]["field"] == "body.baseModel"
    assert LORA_BASE in error["message"]
    assert "baseModel" in error["message"]
    assert "baseModel" not in get(api, namespace, "models", lora)["spec"]
    assert (
        client.CustomObjectsApi(api).list_namespaced_custom_object(
            "dockyard.dev", "v1alpha1", namespace, "modeldeployments"
        )["items"]
        == []
    )

    # the README's commands: the base imported, then the adapter deployed without naming it
    write_tiny_gguf(tmp_path / "dockyard-tiny-llama.gguf")
    base = imported(env, tmp_path, "dockyard-tiny-llama.gguf")
    deployed = dockyard(
        env, tmp_path, "deploy", "model", lora, "--model-type", "fineTune", "--device", "g5.xlarge", "--json"
    )
    assert deployed.returncode == 0, deployed.stdout + deployed.stderr
    assert json.loads(deployed.stdout)["status"] == "SUCCESS"
    assert get(api, namespace, "models", lora)["spec"]["baseModel"] == base  # kubectl describe shows it

    [pod] = pods_of(api, namespace, lora)
    assert ready(pod)
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--lora") + 1] == f"/adapters/models/{namespace}/{lora}/tiny-lora.gguf"
    assert args[args.index("--model") + 1] == f"/models/models/{namespace}/{base}/dockyard-tiny-llama.gguf"
    endpoint = pod["metadata"]["annotations"][LOCAL_ENDPOINT_ANNOTATION]
    if runner.settings.llama_server is not None:  # llama-server says which adapter it loaded
        [loaded] = httpx.get(f"{endpoint}/lora-adapters", timeout=10).json()
        assert loaded["path"].endswith(f"models/{namespace}/{lora}/tiny-lora.gguf")
        assert loaded["scale"] == 1.0
    adapted = chat(endpoint, lora)
    with llama_server(tmp_path / "dockyard-tiny-llama.gguf", alias="base") as url:
        plain = chat(url, "base")
    assert adapted.strip().startswith(LORA_TARGET), adapted
    assert not plain.strip().startswith(LORA_TARGET), plain  # the LoRA, not the base, says it

    # --base-model names the base explicitly: an adapter whose adapter_config.json names nothing known
    (tmp_path / "other-lora.tar").write_bytes(tiny_lora_tar(tmp_path / "other", base="someone/unknown-model"))
    other = imported(env, tmp_path, "other-lora.tar", "--adapter")
    unresolved = dockyard(env, tmp_path, "deploy", "model", other, "--model-type", "fineTune", "--device", "g5.xlarge")
    assert unresolved.returncode == 2, unresolved.stdout + unresolved.stderr  # 422
    assert "someone/unknown-model" in unresolved.stderr
    assert "baseModel" in unresolved.stderr
    explicit = dockyard(
        env, tmp_path, "deploy", "model", other, "--model-type", "fineTune", "--device", "g5.xlarge",
        "--base-model", base, "--no-wait", "--json",
    )  # fmt: skip
    assert explicit.returncode == 0, explicit.stdout + explicit.stderr
    assert get(api, namespace, "models", other)["spec"]["baseModel"] == base
    # once set, another base is a conflict (409: exit 5), not a silent change
    conflict = dockyard(
        env, tmp_path, "deploy", "model", other, "--model-type", "fineTune", "--device", "g5.xlarge",
        "--base-model", lora,
    )  # fmt: skip
    assert conflict.returncode == 5, conflict.stdout + conflict.stderr


def test_a_kubectl_deployment_of_an_adapter_finds_its_base_or_says_what_to_do(
    api: client.ApiClient, namespace: str, facade: RunningFacade, tmp_path: Path
) -> None:
    """A ModelDeployment made with kubectl for an adapter without spec.baseModel: FAILED AdapterWithoutBase
    naming what adapter_config.json named and the fixes while no Model matches; once the base is imported,
    the operator serves the adapter on it (without writing spec.baseModel: that is the deploy's or a person's)."""
    create(api, namespace, "environments", "Environment", ENV, {"appRef": "app"})
    imports = ImportClient(facade.client, namespace, ENV, api_key(api, namespace, ENV))
    lora = import_file(imports, "tiny-lora.tar", "tar", tiny_lora_tar(tmp_path / "lora"), is_adapter=True)
    model_deployment(api, namespace, "first", model=lora, modelType="fineTune")
    failed = wait_job(api, namespace, "modeldeployments", "first", "FAILED")
    assert failed["reason"] == "AdapterWithoutBase"
    assert f"names base model '{LORA_BASE}'" in failed["message"]
    assert "--base-model" in failed["message"]
    assert f"kubectl patch models.dockyard.dev {lora}" in failed["message"]

    write_tiny_gguf(tmp_path / "dockyard-tiny-llama.gguf")
    base = import_file(
        imports, "dockyard-tiny-llama.gguf", "gguf", (tmp_path / "dockyard-tiny-llama.gguf").read_bytes()
    )
    model_deployment(api, namespace, "second", model=lora, modelType="fineTune")
    wait_job(api, namespace, "modeldeployments", "second", "SUCCESS", timeout=120)
    [pod] = pods_of(api, namespace, "second")
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--model") + 1] == f"/models/models/{namespace}/{base}/dockyard-tiny-llama.gguf"
    assert "--lora" in args
    assert "baseModel" not in get(api, namespace, "models", lora)["spec"]
