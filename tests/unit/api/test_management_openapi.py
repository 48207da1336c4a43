"""The management endpoints are in the OpenAPI document, each request body with an example, and
answer 401 in the one error shape when no Kubernetes token is sent (no cluster needed for that)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from dockyard_api.app import create_app
from dockyard_api.settings import ApiSettings

MANAGEMENT = [
    ("post", "/api/v1/namespaces/{namespace}/apps"),
    ("put", "/api/v1/namespaces/{namespace}/apps/{app}/draft"),
    ("post", "/api/v1/namespaces/{namespace}/apps/{app}/restore"),
    ("post", "/api/v1/namespaces/{namespace}/apps/{app}/versions"),
    ("post", "/api/v1/namespaces/{namespace}/apps/{app}/environments"),
    ("post", "/api/v1/namespaces/{namespace}/environments/{environment}/deploy"),
    ("post", "/api/v1/namespaces/{namespace}/environments/{environment}/rollback"),
    ("post", "/api/v1/namespaces/{namespace}/environments/{environment}/apikeys"),
]


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    document: dict[str, Any] = create_app().openapi()
    return document


def _schema(openapi: dict[str, Any], ref: str) -> dict[str, Any]:
    found: dict[str, Any] = openapi["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    return found


@pytest.mark.parametrize(("method", "path"), MANAGEMENT)
def test_every_management_body_has_an_example(openapi: dict[str, Any], method: str, path: str) -> None:
    operation = openapi["paths"][path][method]
    assert operation["summary"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert _schema(openapi, body["$ref"])["examples"], path


def test_reads_deletes_and_keys_are_documented(openapi: dict[str, Any]) -> None:
    paths = openapi["paths"]
    assert {"get", "delete"} <= set(paths["/api/v1/namespaces/{namespace}/environments/{environment}"])
    assert "delete" in paths["/api/v1/namespaces/{namespace}/apps/{app}/versions/{version}"]
    assert "delete" in paths["/api/v1/namespaces/{namespace}/environments/{environment}/apikeys/{key_id}"]
    assert "get" in paths["/e/{namespace}/{environment}/api/public/dock-status/{dock_status_id}"]


def test_management_without_a_token_is_401_in_the_error_shape(unreachable_kubeconfig: str) -> None:
    with TestClient(create_app(ApiSettings(kubeconfig=unreachable_kubeconfig))) as client:
        answer = client.get("/api/v1/namespaces/default/apps")
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unauthenticated"
