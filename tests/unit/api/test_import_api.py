"""The import endpoints' input checks and error shapes, without a cluster (the API server is unreachable:
a valid start answers 503 with the error shape and leaves nothing behind)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from fastapi import Header
from fastapi.testclient import TestClient

from dockyard_api.app import create_app
from dockyard_api.auth import EnvironmentCaller
from dockyard_api.deps import public_caller
from dockyard_api.settings import ApiSettings
from dockyard_core.errors import UnauthenticatedError

BASE = "/e/team-a/prod/api/public/files/session"
KEY = {"x-api-key": "k"}
MiB = 1024 * 1024


@pytest.fixture
def facade(unreachable_kubeconfig: str, tmp_path: Path) -> Iterator[TestClient]:
    settings = ApiSettings(kubeconfig=unreachable_kubeconfig, model_store=tmp_path / "store", max_chunk_bytes=MiB,
                           max_file_bytes=100 * MiB, sweep_interval_seconds=0)  # fmt: skip
    app = create_app(settings)
    app.dependency_overrides[public_caller] = caller  # the API keys are tested with the real auth in e2e
    with TestClient(app) as client:
        yield client


def caller(namespace: str, environment: str, x_api_key: Annotated[str | None, Header()] = None) -> EnvironmentCaller:
    if not x_api_key:
        raise UnauthenticatedError("an API key is required")
    return EnvironmentCaller(namespace, environment, "app", "key")


def body(**kw: Any) -> dict[str, Any]:
    return {"fileContext": "model", "totalChunks": 2, "fileExtension": "tar", "fileName": "m.tar",
            "fileSize": 2 * MiB, **kw}  # fmt: skip


@pytest.mark.parametrize(
    ("change", "status", "code", "field"),
    [
        ({"totalChunks": 1}, 422, "invalid_request", "totalChunks"),  # 2 MiB needs 2 chunks of 1 MiB
        ({"totalChunks": 2 * MiB + 1}, 422, "invalid_request", "totalChunks"),
        ({"totalChunks": "2"}, 422, "invalid_request", "body.totalChunks"),
        ({"fileSize": 0}, 422, "invalid_request", "body.fileSize"),
        ({"fileSize": 101 * MiB, "totalChunks": 101}, 413, "file_too_large", "fileSize"),
        ({"fileName": "../../etc/passwd"}, 422, "invalid_request", "fileName"),
        ({"fileName": "a\u0000b"}, 422, "invalid_request", "fileName"),
        ({"fileExtension": "exe"}, 422, "invalid_request", "fileExtension"),
        ({"fileContext": ""}, 422, "invalid_request", "body.fileContext"),
        ({"isAdapter": "yes"}, 422, "invalid_request", "body.isAdapter"),
        ({"sha256": "xyz"}, 422, "invalid_request", "body.sha256"),
    ],
)
def test_bad_start_bodies_are_4xx_with_the_error_shape(
    facade: TestClient, change: dict[str, Any], status: int, code: str, field: str, tmp_path: Path
) -> None:
    resp = facade.post(f"{BASE}/start", json=body(**change), headers=KEY)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["code"] == code
    details = error["details"]
    fields = [d["field"] for d in details] if isinstance(details, list) else [details["field"]]
    assert field in fields
    assert not list((tmp_path / "store" / "sessions").iterdir())


def test_missing_fields_are_named(facade: TestClient) -> None:
    resp = facade.post(f"{BASE}/start", json={}, headers=KEY)
    assert resp.status_code == 422
    fields = {d["field"] for d in resp.json()["error"]["details"]}
    assert fields == {f"body.{f}" for f in ("fileContext", "totalChunks", "fileExtension", "fileName", "fileSize")}


def test_without_a_key_it_is_401(facade: TestClient) -> None:
    resp = facade.post(f"{BASE}/start", json=body())
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "unauthenticated"


def test_a_valid_start_without_an_api_server_is_503_with_retry_after_and_leaves_nothing(
    facade: TestClient, tmp_path: Path
) -> None:
    resp = facade.post(f"{BASE}/start", json=body(sha256="AB" * 32), headers=KEY)
    assert resp.status_code == 503, resp.text
    assert resp.json()["error"]["code"] == "upstream_unavailable"
    assert int(resp.headers["retry-after"]) >= 1
    assert not list((tmp_path / "store" / "sessions").iterdir())


@pytest.mark.parametrize("session", ["nope", "a.b", "A" * 32])
def test_malformed_session_ids_are_404_without_touching_anything(facade: TestClient, session: str) -> None:
    for method, path in [("POST", ""), ("GET", ""), ("DELETE", ""), ("POST", "/complete")]:
        resp = facade.request(method, f"{BASE}/{session}{path}", headers=KEY)
        assert resp.status_code == 404, (method, path, resp.text)
        assert resp.json()["error"]["code"] == "session_not_found"


def test_a_well_formed_unknown_session_is_looked_up_in_kubernetes(facade: TestClient) -> None:
    resp = facade.get(f"{BASE}/{'a' * 32}", headers=KEY)  # the API server is unreachable here
    assert resp.status_code == 503
    assert resp.json()["error"]["code"] == "upstream_unavailable"


def test_the_openapi_document_describes_the_multipart_upload(facade: TestClient) -> None:
    paths = facade.get("/openapi.json").json()["paths"]
    upload = paths["/e/{namespace}/{environment}/api/public/files/session/{sessionId}"]["post"]
    schema = upload["requestBody"]["content"]["multipart/form-data"]["schema"]
    assert schema["required"] == ["file", "chunkNumber"]
    assert "/e/{namespace}/{environment}/api/public/files/session/{sessionId}/complete" in paths


def test_a_session_the_import_job_removed_while_it_was_marked_completed_is_no_error(
    unreachable_kubeconfig: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The completion marks the session with its job after starting the job; a fast job (a checksum that does
    not match fails at once) may remove the session in between: the answer is still the job record."""
    import shutil
    from datetime import UTC, datetime, timedelta

    from dockyard_api.public.imports.service import ImportService
    from dockyard_core.kubeclient import AsyncKube
    from dockyard_core.modelstore import SessionMeta
    from dockyard_core.upload import Upload

    settings = ApiSettings(kubeconfig=unreachable_kubeconfig, model_store=tmp_path / "store")
    service = ImportService(settings, AsyncKube(unreachable_kubeconfig))
    service.store.ensure()
    now = datetime.now(UTC)
    declared = Upload(file_context="model", file_name="m.tar", file_extension="tar", file_size=10, total_chunks=1)
    meta = SessionMeta("a" * 32, "ns", "prod", "m-1", declared, now, now + timedelta(hours=1))
    service.store.create(meta)
    load = service.store.load

    def load_then_the_job_removes_it(session_id: str) -> SessionMeta | None:
        found = load(session_id)
        shutil.rmtree(service.store.session_dir(session_id))
        return found

    monkeypatch.setattr(service.store, "load", load_then_the_job_removes_it)
    service._mark_completed(meta, "job-1")  # no FileNotFoundError (a 500 before)
    assert not service.store.session_dir(meta.session_id).exists()
