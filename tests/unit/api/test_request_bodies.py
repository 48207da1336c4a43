"""One policy for request bodies: a size cap answered with 413 before the body is read, and unknown
fields refused by name; errors of every origin (the model store included) in the one JSON shape."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi.testclient import TestClient

from dockyard_api.app import create_app
from dockyard_api.settings import ApiSettings
from dockyard_core import apikeys, storeerrors
from dockyard_core import errors as errortypes
from tests.support.fakekube import FakeKube, fake_kube
from tests.support.runners import free_port, wait_http_ok

NS, ENV = "team-a", "bot-production"
PUBLIC = f"/e/{NS}/{ENV}/api/public"
LIMIT = 64 * 1024


def key_of(state: FakeKube) -> str:
    env = {"metadata": {"name": ENV, "namespace": NS, "uid": "u-1"}, "spec": {"appRef": "bot"}}
    key = apikeys.generate()
    secret = apikeys.key_secret(key=key, name="t", environment=env, created_by="t", created_at=datetime.now(UTC))
    state.put(f"/api/v1/namespaces/{NS}/secrets/{secret['metadata']['name']}", secret)
    return key.value


def settings(kubeconfig: str, tmp_path: Path) -> ApiSettings:
    return ApiSettings(kubeconfig=kubeconfig, model_store=tmp_path / "store", sweep_interval_seconds=0,
                       watch_models=False, max_json_body_bytes=LIMIT)  # fmt: skip


@pytest.fixture
def facade(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    with fake_kube(tmp_path) as (state, kubeconfig), TestClient(create_app(settings(kubeconfig, tmp_path))) as http:
        yield http, {"x-api-key": key_of(state)}


START = {"fileContext": "model", "totalChunks": 1, "fileExtension": "gguf", "fileName": "m.gguf", "fileSize": 10}
DEPLOY = {"name": "m", "deviceType": "g5.xlarge", "hyperParameters": {"temperature": 1, "maxTokens": 1, "topP": 1,
                                                                      "topK": 1}}  # fmt: skip


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/files/session/start", {**START, "isAdaptor": True}, "body.isAdaptor"),
        ("/models/m/deploy?modelType=openSource", {**DEPLOY, "replicas": 2}, "body.replicas"),
        ("/tools/t-1.0.0/deploy", {"isAsync": True, "wait": 5}, "body.wait"),
    ],
)
def test_unknown_fields_of_every_public_body_are_refused_by_name(
    facade: tuple[TestClient, dict[str, str]], path: str, body: dict[str, Any], field: str
) -> None:
    http, key = facade
    resp = http.post(PUBLIC + path, json=body, headers=key)
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["code"] == "invalid_request"
    assert {"field": field, "message": "Extra inputs are not permitted"} in error["details"]
    assert field in error["message"]


def test_a_json_body_over_the_cap_is_413_in_the_error_shape(facade: tuple[TestClient, dict[str, str]]) -> None:
    http, key = facade
    big = {**START, "fileName": "x" * (2 * LIMIT)}
    resp = http.post(f"{PUBLIC}/files/session/start", json=big, headers=key)
    assert resp.status_code == 413, resp.text
    error = resp.json()["error"]
    assert error["code"] == "payload_too_large"
    assert f"at most {LIMIT} bytes" in error["message"]
    assert error["details"] == {"maxBytes": LIMIT}
    # without a key too: the cap comes before anything else reads the request
    assert http.post(f"{PUBLIC}/files/session/start", json=big).status_code == 413
    # and a management body
    assert http.put("/api/v1/namespaces/a/apps/b/draft", json={"description": "x" * 2 * LIMIT}).status_code == 413


def test_a_streamed_body_over_the_cap_is_413(facade: tuple[TestClient, dict[str, str]]) -> None:
    http, key = facade

    def pieces() -> Iterator[bytes]:
        yield b'{"fileName": "'
        for _ in range(4):
            yield b"x" * LIMIT
        yield b'"}'

    resp = http.post(
        f"{PUBLIC}/files/session/start", content=pieces(), headers={**key, "Content-Type": "application/json"}
    )
    assert resp.status_code == 413, resp.text
    assert resp.json()["error"]["code"] == "payload_too_large"


def test_the_413_comes_without_reading_the_rest_of_the_body(tmp_path: Path) -> None:
    """A client announces 100 MiB and sends 1 KiB, then waits: the answer comes without the rest.

    A facade that waited for the rest of the body would never answer (the client sends nothing more); the bound
    is generous because the suite's other workers share the cores (2.2 s once on a 2-core CI machine)."""
    with fake_kube(tmp_path) as (_, kubeconfig):
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(create_app(settings(kubeconfig, tmp_path)), host="127.0.0.1", port=port, log_level="error")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        try:
            wait_http_ok(f"http://127.0.0.1:{port}/healthz")
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                head = (
                    f"POST {PUBLIC}/files/session/start HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {100 * 1024 * 1024}\r\n\r\n"
                )
                started = time.monotonic()
                sock.sendall(head.encode() + b"{" + b" " * 1023)
                answer = sock.recv(65536).decode()
                assert time.monotonic() - started < 15
            assert answer.startswith("HTTP/1.1 413"), answer
            assert '"code":"payload_too_large"' in answer
        finally:
            server.should_exit = True
            thread.join(timeout=10)


def test_chunk_uploads_keep_their_own_larger_limit(facade: tuple[TestClient, dict[str, str]]) -> None:
    """A multipart chunk above the JSON cap is not refused by it (the session does not exist here: 404)."""
    http, key = facade
    resp = http.post(
        f"{PUBLIC}/files/session/{'a' * 32}",
        data={"chunkNumber": "0"},
        files={"file": ("blob", b"x" * (2 * LIMIT), "application/octet-stream")},
        headers=key,
    )
    assert resp.status_code == 404, resp.text
    assert resp.json()["error"]["code"] == "session_not_found"


def test_every_error_the_facade_answers_is_a_dockyard_error() -> None:
    """One base: every exception class that carries an HTTP status (the model store's included) is a
    DockyardError, answered by the one handler (no twin base class to translate from)."""
    import dockyard_api
    import dockyard_core

    answered = []
    for package in (dockyard_core, dockyard_api):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if ".migrations" in info.name:  # Alembic's scripts run inside Alembic, they are not modules to import
                continue
            module = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, Exception) and isinstance(getattr(cls, "status_code", None), int):
                    answered.append(cls)
    assert storeerrors.ChunkConflict in answered
    assert [c for c in answered if not issubclass(c, errortypes.DockyardError)] == []
