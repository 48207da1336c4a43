"""The same path as test_delivery.py with the model store on S3: a real MinIO (built from its Go module)
on loopback holds the sessions, chunks and models; the facade and the operator both use the s3 backend.
Import a tar through the public API -> the import job reads the chunks from the bucket and writes the
model's objects -> deploy -> the pod's storage initializer (its entry point, run here) downloads the
files through the facade from the bucket."""

from __future__ import annotations

import base64
import contextlib
import io
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from minio import Minio

from dockyard_api.settings import ApiSettings
from dockyard_operator.builders.common import child_name
from tests.e2e.test_delivery import import_tar, initializer_command
from tests.e2e.test_import import MAX_CHUNK, model_tar, wait_phase
from tests.e2e.test_public_deploy import SPEC_SAMPLE, deploy_model, ok
from tests.support.cluster import E2ECluster
from tests.support.minio import MinioServer
from tests.support.public import PublicEnvironment, environment_with_key, wait_dock_status
from tests.support.runners import RunningFacade, run_facade, run_operator
from tests.support.waiting import wait_for

BUCKET = "dockyard-e2e"
KEY = "e2e-download-token-key-" + "x" * 24


def s3_settings(minio: MinioServer, prefix: str) -> dict[str, str]:
    return {
        "MODEL_STORE_BACKEND": "s3",
        "S3_ENDPOINT": minio.endpoint,
        "S3_BUCKET": BUCKET,
        "S3_PREFIX": prefix,
        "S3_REGION": "us-east-1",
        "S3_ACCESS_KEY": minio.access_key,
        "S3_SECRET_KEY": minio.secret_key,
        "S3_CREATE_BUCKET": "true",
        "DOWNLOAD_TOKEN_KEY": KEY,
    }


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"e2e-{os.urandom(3).hex()}"


@pytest.fixture(scope="module")
def facade(
    cluster: E2ECluster, crds: None, minio: MinioServer, prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningFacade]:
    fields: dict[str, Any] = {k.lower(): v for k, v in s3_settings(minio, prefix).items()}
    settings = ApiSettings(
        model_store=tmp_path_factory.mktemp("facade-spool"), max_chunk_bytes=MAX_CHUNK, sweep_interval_seconds=0,
        **fields,
    )  # fmt: skip
    with run_facade(settings) as running:
        yield running


@pytest.fixture(scope="module")
def operator(
    facade: RunningFacade, minio: MinioServer, prefix: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    env = {f"DOCKYARD_OPERATOR_{k}": v for k, v in s3_settings(minio, prefix).items()}
    env["DOCKYARD_OPERATOR_MODEL_STORE"] = str(tmp_path_factory.mktemp("operator-work"))
    with run_operator(env=env):
        yield


pytestmark = pytest.mark.usefixtures("operator")


def test_s3_backend_import_deploy_and_download(
    api: client.ApiClient, namespace: str, facade: RunningFacade, minio: MinioServer, prefix: str, tmp_path: Path
) -> None:
    env: PublicEnvironment = environment_with_key(api, namespace)
    data = model_tar()
    model_id = import_tar(facade, env, data)
    done = wait_phase(api, namespace, model_id, "ReadyToDeploy", timeout=120)
    assert done["status"]["storage"]["path"] == f"models/{namespace}/{model_id}"

    bucket = Minio(minio.endpoint.removeprefix("http://"), minio.access_key, minio.secret_key, secure=False)
    base = f"{prefix}/models/{namespace}/{model_id}/"
    expected = sorted(
        base + name
        for name in (".dockyard-import.json", "config.json", "model.safetensors", "tokenizer/tokenizer.json")
    )

    def stored() -> list[str]:
        return sorted(o.object_name for o in bucket.list_objects(BUCKET, prefix=f"{prefix}/", recursive=True))

    # the operator deletes the session's chunks once the outcome is recorded (after ReadyToDeploy, not before it)
    with contextlib.suppress(AssertionError):
        wait_for(lambda: stored() == expected, timeout=30, what="the session's chunks to go")
    assert stored() == expected, "the model's objects, and no session chunks left behind"

    started = ok(deploy_model(facade.client, env, model_id, SPEC_SAMPLE))
    assert wait_dock_status(facade.client, env, started["dockStatusId"])["status"] == "SUCCESS"
    deployment = client.AppsV1Api(api).read_namespaced_deployment(child_name("model", SPEC_SAMPLE["name"]), namespace)
    (init,) = api.sanitize_for_serialization(deployment)["spec"]["template"]["spec"]["initContainers"]
    ref = init["env"][0]["valueFrom"]["secretKeyRef"]
    token = base64.b64decode(client.CoreV1Api(api).read_namespaced_secret(ref["name"], namespace).data["model"])

    dest = tmp_path / "pod-volume"
    run = subprocess.run(
        initializer_command(init, facade.url, dest),
        env={**os.environ, "DOCKYARD_DOWNLOAD_TOKEN": token.decode()},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        expected = {
            m.name.removeprefix("tiny-llama/"): tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }
    assert {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()} == expected
