"""Weight delivery and truthful failures on the local control plane (issue 13, gap 1): a tar imported
through the public API and deployed with SPEC §4's sample body gets a storage-initializer init
container, a download-token Secret and no claim; the initializer's entry point, run here against the
running facade with the args and token of that pod spec, fetches and verifies the files (resume,
SHA-256 mismatch refused). A pod that mounts a claim that does not exist FAILS at once, naming it."""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dockyard_api.settings import ApiSettings
from dockyard_core import downloadtokens
from dockyard_operator.builders.common import child_name
from dockyard_operator.builders.model import download_secret_name
from tests.e2e.test_import import MAX_CHUNK, model_tar, split, start_body, wait_phase
from tests.e2e.test_public_deploy import SPEC_SAMPLE, deploy_model, ok
from tests.support.cluster import E2ECluster
from tests.support.dockyard import get, hub_model, job, model_deployment, wait_job
from tests.support.public import PublicEnvironment, environment_with_key, wait_dock_status, wait_model_ready
from tests.support.publicapi import ImportClient
from tests.support.runners import RunningFacade, run_facade, run_operator

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("delivery") / "model-store"


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, crds: None, store: Path) -> Iterator[RunningFacade]:
    settings = ApiSettings(model_store=store, max_chunk_bytes=MAX_CHUNK, sweep_interval_seconds=0)
    with run_facade(settings) as running:
        yield running


@pytest.fixture(scope="module")
def operator(facade: RunningFacade, store: Path) -> Iterator[None]:
    env = {
        "DOCKYARD_OPERATOR_MODEL_STORE": str(store),
        "DOCKYARD_OPERATOR_DOWNLOAD_URL": "http://dockyard-api.dockyard-system.svc:80",
        "DOCKYARD_OPERATOR_UNSCHEDULABLE_DEADLINE_SECONDS": "600",  # a FAILED verdict below is not the deadline
    }
    with run_operator(env=env):
        yield


pytestmark = pytest.mark.usefixtures("operator")


@pytest.fixture
def env(api: client.ApiClient, namespace: str) -> PublicEnvironment:
    return environment_with_key(api, namespace)


def import_tar(facade: RunningFacade, env: PublicEnvironment, data: bytes) -> str:
    imports = ImportClient(facade.client, env.namespace, env.environment, env.key)
    chunks = split(data, MAX_CHUNK)
    session = imports.start(**start_body(data, len(chunks))).json()
    for number, chunk in enumerate(chunks):
        assert imports.chunk(session["sessionId"], number, chunk).status_code == 200
    assert imports.complete(session["sessionId"]).status_code == 200
    model_id: str = session["modelId"]
    return model_id


def initializer_command(init: dict[str, Any], url: str, dest: Path) -> list[str]:
    """The init container's command and args, run on this machine: the facade's local URL and a local
    directory in place of the in-cluster ones."""
    args = [a for a in init["args"] if not a.startswith(("--url=", "--dest="))]
    return [sys.executable, *init["command"][1:], *args, f"--url={url}", f"--dest={dest}"]


def test_imported_model_is_delivered_by_a_storage_initializer(
    api: client.ApiClient, namespace: str, env: PublicEnvironment, facade: RunningFacade, store: Path, tmp_path: Path
) -> None:
    model_id = import_tar(facade, env, model_tar())
    wait_phase(api, namespace, model_id, "ReadyToDeploy")
    started = ok(deploy_model(facade.client, env, model_id, SPEC_SAMPLE))
    done = wait_dock_status(facade.client, env, started["dockStatusId"])
    assert done["status"] == "SUCCESS", done

    deployment = client.AppsV1Api(api).read_namespaced_deployment(child_name("model", SPEC_SAMPLE["name"]), namespace)
    pod = api.sanitize_for_serialization(deployment)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "g5.xlarge"}
    assert not [v for v in pod["volumes"] if "persistentVolumeClaim" in v], "model pods mount no claim"
    (init,) = pod["initContainers"]
    assert init["name"] == "storage-initializer"
    assert f"--model={model_id}" in init["args"]
    assert f"--namespace={namespace}" in init["args"]
    ref = init["env"][0]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": download_secret_name(SPEC_SAMPLE["name"]), "key": "model"}
    engine_mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "model-store")
    assert engine_mount["readOnly"] is True

    secret = client.CoreV1Api(api).read_namespaced_secret(ref["name"], namespace)
    assert secret.metadata.owner_references[0].kind == "ModelDeployment"
    token = base64.b64decode(secret.data["model"]).decode()
    key = downloadtokens.load_key(None, store.parent / "download-token.key")
    grant = downloadtokens.verify(key, token, namespace, model_id)
    assert grant.expires > time.time() + 3600

    # the entry point of that init container, against the running facade, with that token
    dest = tmp_path / "pod-volume"
    command = initializer_command(init, facade.url, dest)
    run_env = {**os.environ, "DOCKYARD_DOWNLOAD_TOKEN": token}
    first = subprocess.run(command, env=run_env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    files = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    with tarfile.open(fileobj=io.BytesIO(model_tar())) as tar:
        expected = {
            m.name.removeprefix("tiny-llama/"): tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }
    assert files == expected

    # resume: a part file left by an interrupted download is completed with a Range request
    weights = dest / "model.safetensors"
    weights.rename(dest / "model.safetensors.part")
    with (dest / "model.safetensors.part").open("r+b") as part:
        part.truncate(MiB)
    resumed = subprocess.run(command, env=run_env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "1 resumed" in resumed.stderr
    assert weights.read_bytes() == expected["model.safetensors"]

    # a stored file whose bytes no longer match the manifest is refused, and nothing is left behind
    stored = store / "models" / namespace / model_id / "model.safetensors"
    data = bytearray(stored.read_bytes())
    data[100] ^= 0xFF
    stored.write_bytes(bytes(data))
    fresh = tmp_path / "other-pod"
    bad = subprocess.run(initializer_command(init, facade.url, fresh), env=run_env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert bad.returncode == 1
    assert "SHA-256 mismatch" in bad.stderr
    assert not (fresh / "model.safetensors").exists()
    assert not (fresh / "model.safetensors.part").exists()

    # a token of another namespace's model is refused by the facade
    other = downloadtokens.mint(key, "someone-else", model_id, int(time.time()) + 600)
    refused = subprocess.run(command, env={**run_env, "DOCKYARD_DOWNLOAD_TOKEN": other}, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    assert refused.returncode == 1
    assert "HTTP 401" in refused.stderr


def test_a_pod_with_a_missing_claim_fails_at_once_naming_it(api: client.ApiClient, namespace: str) -> None:
    """A policy engine (Kyverno, a mutating webhook) adds a cache volume to the model Deployment whose
    claim does not exist in the namespace: the job FAILS at once with MissingVolumeClaim, not after the
    unschedulable deadline with "no free GPUs" (2 idle g5.xlarge nodes exist)."""
    name = "cached"
    deployment_name = child_name("model", name)
    labels = {"dockyard.dev/model-deployment": name}
    # the extra volume, owned by another field manager: the operator's server-side apply keeps it
    client.AppsV1Api(api).create_namespaced_deployment(
        namespace,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": deployment_name, "labels": labels},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [{"name": "engine", "image": "placeholder"}],
                        "volumes": [{"name": "team-cache", "persistentVolumeClaim": {"claimName": "team-cache"}}],
                    },
                },
            },
        },
        field_manager="policy-engine",
    )
    hub_model(api, namespace, "llama")
    wait_model_ready(api, namespace, "llama")
    started = time.monotonic()
    model_deployment(api, namespace, name, model="llama")
    failed = wait_job(api, namespace, "modeldeployments", name, "FAILED", timeout=60)
    assert time.monotonic() - started < 60  # the deadline is 600 s here
    assert failed["reason"] == "MissingVolumeClaim", failed
    assert '"team-cache"' in failed["message"]
    assert "GPU" not in failed["message"]
    mdep = get(api, namespace, "modeldeployments", name)
    failed_condition = next(c for c in mdep["status"]["conditions"] if c["type"] == "Failed")
    assert (failed_condition["status"], failed_condition["reason"]) == ("True", "MissingVolumeClaim")
    assert job(api, namespace, "modeldeployments", name) == failed
