"""The facade's health endpoints and error shape, without a cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from dockyard_api.app import create_app
from dockyard_api.settings import ApiSettings


@pytest.fixture
def facade(unreachable_kubeconfig: str) -> Iterator[TestClient]:
    settings = ApiSettings(kubeconfig=unreachable_kubeconfig, readiness_timeout_seconds=0.5)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_healthz(facade: TestClient) -> None:
    assert facade.get("/healthz").json() == {"status": "ok"}


def test_readyz_is_503_with_the_error_shape_when_the_api_server_is_unreachable(facade: TestClient) -> None:
    resp = facade.get("/readyz")
    assert resp.status_code == 503
    body = resp.json()
    assert body["error"]["code"] == "not_ready"
    assert "not reachable" in body["error"]["message"]


def test_unknown_path_uses_the_error_shape(facade: TestClient) -> None:
    resp = facade.get("/nope")
    assert resp.status_code == 404
    assert resp.json() == {"error": {"code": "not_found", "message": "Not Found", "details": None}}
