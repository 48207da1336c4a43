"""An indexing run on the S3 model store: its environment names the bucket without the credentials, a Job
reads those from the model store's Secret, and the run's document reader is the bucket's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dockyard_core.knowledge.files import DocumentFiles, S3DocumentFiles
from dockyard_core.knowledge.job import run_document_files
from dockyard_operator.builders.knowledge import indexing_job, run_environment, s3_store_env
from tests.unit.operator.test_knowledge_operator import SETTINGS, _kb


def test_an_s3_run_names_the_bucket_and_a_job_reads_the_credentials_from_the_secret() -> None:
    store = s3_store_env("https://s3.example", "models", "prod/", "eu-west-1", None)
    settings = replace(SETTINGS, store_env=tuple(store.items()), s3_secret="dockyard-s3", files_dir="s3")
    env = run_environment(_kb(), settings, None)
    assert env["DOCKYARD_KB_MODEL_STORE_BACKEND"] == "s3"
    assert (env["DOCKYARD_KB_S3_ENDPOINT"], env["DOCKYARD_KB_S3_BUCKET"]) == ("https://s3.example", "models")
    assert env["DOCKYARD_KB_S3_PREFIX"] == "prod/"
    assert env["DOCKYARD_KB_S3_REGION"] == "eu-west-1"
    assert "DOCKYARD_KB_S3_CA_BUNDLE" not in env
    assert not any("ACCESS" in k or "SECRET" in k for k in env)  # never a credential in the Job's spec
    container = indexing_job(_kb(), settings, env)["spec"]["template"]["spec"]["containers"][0]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert refs == {
        "DOCKYARD_KB_S3_ACCESS_KEY": {"name": "dockyard-s3", "key": "accessKey"},
        "DOCKYARD_KB_S3_SECRET_KEY": {"name": "dockyard-s3", "key": "secretKey"},
    }
    plain = indexing_job(_kb(), SETTINGS, run_environment(_kb(), SETTINGS, None))
    assert all("valueFrom" not in e for e in plain["spec"]["template"]["spec"]["containers"][0]["env"])


def test_the_run_reads_documents_from_the_bucket_or_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = run_document_files({"DOCKYARD_KNOWLEDGE_FILES": str(tmp_path)})
    assert type(files) is DocumentFiles
    assert files.root == tmp_path
    env = {**s3_store_env("http://127.0.0.1:9", "models", "p/", None, None), "DOCKYARD_KNOWLEDGE_FILES": "s3"}
    for key, value in {**env, "DOCKYARD_KB_MODEL_STORE": str(tmp_path), "DOCKYARD_KB_S3_ACCESS_KEY": "a",
                       "DOCKYARD_KB_S3_SECRET_KEY": "b"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    bucket = run_document_files(env)
    assert isinstance(bucket, S3DocumentFiles)
    assert bucket.store.bucket == "models"
    assert bucket.store.document_key("shop", "a-md-1") == "p/knowledge/files/shop/a-md-1"
