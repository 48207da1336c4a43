"""The model store's S3 backend against a REAL S3-compatible server: MinIO built from its Go module and
started on a free loopback port (``minio`` fixture, tests/support/minio.py). The same behaviours as the
file-system backend: sessions, idempotent chunks, conflicts, the import job, ranged reads, and the whole
path chunk upload -> import -> download by the storage initializer through the facade."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import pytest
from fastapi import Header
from fastapi.testclient import TestClient

from dockyard_api.app import create_app
from dockyard_api.auth import EnvironmentCaller
from dockyard_api.deps import public_caller
from dockyard_api.settings import ApiSettings
from dockyard_api.storage_initializer import Initializer
from dockyard_core import downloadtokens
from dockyard_core.modelstore import SessionMeta
from dockyard_core.s3store import S3Config, S3ModelStore
from dockyard_core.storeerrors import ChunkConflict, EmptyChunk, SessionGone, SizeExceeded
from dockyard_core.upload import Upload
from tests.support.minio import MinioServer
from tests.support.modelfiles import import_model
from tests.support.runners import run_facade

KEY = "s" * 48


def config(minio: MinioServer, prefix: str) -> S3Config:
    return S3Config(
        endpoint=minio.endpoint,
        bucket="dockyard-models",
        access_key=minio.access_key,
        secret_key=minio.secret_key,
        region="us-east-1",
        prefix=prefix,
        create_bucket=True,
    )


@pytest.fixture
def prefix() -> str:
    return f"test-{os.urandom(4).hex()}/"


@pytest.fixture
def store(minio: MinioServer, prefix: str, tmp_path: Path) -> S3ModelStore:
    s = S3ModelStore(tmp_path / "spool", config(minio, prefix))
    s.ensure()
    return s


def meta(session_id: str | None = None, file_size: int = 100, total_chunks: int = 4) -> SessionMeta:
    now = datetime.now(UTC)
    declared = Upload(file_context="model", file_name="m.tar", file_extension="tar", file_size=file_size,
                      total_chunks=total_chunks)  # fmt: skip
    session_id = session_id or os.urandom(16).hex()
    return SessionMeta(session_id=session_id, namespace="ns", environment="prod", model_id="m-1", upload=declared,
                       created_at=now, expires_at=now + timedelta(hours=1))  # fmt: skip


def put(store: S3ModelStore, m: SessionMeta, number: int, data: bytes) -> bool:
    writer = store.writer(m, 1 << 20)
    writer.write_all([memoryview(data)])
    return store.publish(m, number, writer.finish())


def test_sessions_round_trip(store: S3ModelStore) -> None:
    m = meta()
    store.create(m)
    assert store.load(m.session_id) == m
    assert m.session_id in store.session_ids()
    done = store.mark_completed(m, "job-9")
    assert store.load(m.session_id) == done
    assert store.session_age(m.session_id) < 60
    assert store.load(os.urandom(16).hex()) is None


def test_chunks_are_idempotent_and_conflicts_refused(store: S3ModelStore) -> None:
    m = meta()
    store.create(m)
    assert put(store, m, 0, b"a" * 25) is True
    assert put(store, m, 0, b"a" * 25) is False  # the same bytes again: accepted, nothing changes
    with pytest.raises(ChunkConflict):
        put(store, m, 0, b"b" * 25)
    with pytest.raises(ChunkConflict):
        put(store, m, 0, b"a" * 24)
    with pytest.raises(EmptyChunk):
        put(store, m, 1, b"")
    assert put(store, m, 2, b"c" * 70) is True
    with pytest.raises(SizeExceeded):
        put(store, m, 3, b"d" * 6)
    assert [(c.number, c.size) for c in store.chunks(m.session_id)] == [(0, 25), (2, 70)]
    assert store.missing(m) == [1, 3]
    assert store.received_bytes(m.session_id) == 95
    assert not list((store.spool / m.session_id).iterdir()), "no temporary file stays in the spool"


def test_remove_frees_the_chunks_and_later_chunks_are_refused(store: S3ModelStore) -> None:
    m = meta()
    store.create(m)
    put(store, m, 0, b"x" * 40)
    assert store.remove(m.session_id) == 40
    assert store.load(m.session_id) is None
    assert m.session_id not in store.session_ids()
    with pytest.raises(SessionGone):
        put(store, m, 1, b"y" * 10)


def test_import_and_ranged_reads(store: S3ModelStore) -> None:
    model = import_model(store, "team-a", "tiny-1")
    names = {f.path: f for f in model.manifest.files}
    assert set(names) == set(model.files)
    for path, body in model.files.items():
        assert names[path].sha256 == hashlib.sha256(body).hexdigest()
        assert b"".join(store.read_model_file("team-a", "tiny-1", path, 0, len(body))) == body
    weights = model.files["model.safetensors"]
    assert b"".join(store.read_model_file("team-a", "tiny-1", "model.safetensors", 100, 200)) == weights[100:200]
    listed = store._list(store.model_key("team-a", "tiny-1"))
    assert sorted(o.object_name.rsplit("tiny-1/", 1)[1] for o in listed) == sorted(
        [*model.files, ".dockyard-import.json"]
    )
    assert ("team-a", "tiny-1") in [(ns, name) for ns, name, _ in store.stored_models()]
    store.delete_model("team-a", "tiny-1")
    assert store.model_manifest("team-a", "tiny-1") is None


def test_the_import_job_is_idempotent(store: S3ModelStore) -> None:
    from dockyard_operator.importing.run import import_into
    from tests.support.modelfiles import LIMITS

    model = import_model(store, "team-a", "tiny-2")
    again = import_into(store, "team-a", "tiny-2", "0" * 32, "job-1", LIMITS, work=store.root / "imports")
    assert (again.path, again.sha256) == ("models/team-a/tiny-2", model.manifest.sha256)


# --- through the facade ------------------------------------------------------------------------------------------


@pytest.fixture
def settings(minio: MinioServer, prefix: str, unreachable_kubeconfig: str, tmp_path: Path) -> ApiSettings:
    return ApiSettings(
        kubeconfig=unreachable_kubeconfig,
        model_store=tmp_path / "spool",
        model_store_backend="s3",
        s3_endpoint=minio.endpoint,
        s3_bucket="dockyard-models",
        s3_prefix=prefix,
        s3_region="us-east-1",
        s3_access_key=minio.access_key,
        s3_secret_key=minio.secret_key,  # type: ignore[arg-type]
        s3_create_bucket=True,
        sweep_interval_seconds=0,
        watch_models=False,
        download_token_key=KEY,  # type: ignore[arg-type]
    )


def caller(namespace: str, environment: str, x_api_key: Annotated[str | None, Header()] = None) -> EnvironmentCaller:
    return EnvironmentCaller(namespace, environment, "app", "key")


@pytest.fixture
def facade(settings: ApiSettings) -> Iterator[TestClient]:
    app = create_app(settings)
    app.dependency_overrides[public_caller] = caller
    with TestClient(app) as client:
        yield client


def test_chunk_upload_through_the_public_api_on_s3(facade: TestClient, settings: ApiSettings) -> None:
    store = settings.open_model_store()
    m = meta(file_size=3 * 1024 * 1024, total_chunks=3)
    store.create(m)
    base = f"/e/ns/prod/api/public/files/session/{m.session_id}"
    pieces = [os.urandom(1024 * 1024) for _ in range(3)]
    for number in (2, 0, 1, 0):  # any order; a re-sent chunk is accepted
        resp = facade.post(base, files={"file": ("c", pieces[number])}, data={"chunkNumber": str(number)})
        assert resp.status_code == 200, resp.text
    conflict = facade.post(base, files={"file": ("c", b"z" * 1024 * 1024)}, data={"chunkNumber": "1"})
    assert conflict.status_code == 409
    state = facade.get(base).json()
    assert (state["receivedBytes"], state["missingChunks"]) == (3 * 1024 * 1024, [])
    assert [c.size for c in store.chunks(m.session_id)] == [1024 * 1024] * 3


def test_storage_initializer_downloads_from_the_s3_backend(settings: ApiSettings, tmp_path: Path) -> None:
    store = settings.open_model_store()
    store.ensure()
    model = import_model(store, "team-b", "tiny-3")
    with run_facade(settings) as running:
        token = downloadtokens.mint(KEY.encode(), "team-b", "tiny-3", int(time.time()) + 600)
        init = Initializer(running.url, "team-b", "tiny-3", token, tmp_path / "pod", backoff=0.01)
        part = tmp_path / "pod" / "model.safetensors.part"
        part.parent.mkdir()
        part.write_bytes(model.files["model.safetensors"][:12345])  # resumed with a ranged GET of the object
        stats = init.run()
        init.close()
    found = {p.relative_to(tmp_path / "pod").as_posix(): p.read_bytes() for p in (tmp_path / "pod").rglob("*")
             if p.is_file()}  # fmt: skip
    assert found == model.files
    assert stats.resumed == 1
