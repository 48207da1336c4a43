"""Helpers for tests of the public API: an environment with an API key, its base URL, job polling."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from kubernetes import client

from dockyard_core import apikeys
from tests.support.dockyard import create, get
from tests.support.waiting import wait_for


@dataclass(frozen=True)
class PublicEnvironment:
    """An Environment of an App, with one API key: what a public-API caller has."""

    namespace: str
    app: str
    environment: str
    key: str

    @property
    def base(self) -> str:
        """SPEC's {base_url}, relative to the facade's address."""
        return f"/e/{self.namespace}/{self.environment}"

    @property
    def headers(self) -> dict[str, str]:
        return {"x-api-key": self.key}


def environment_with_key(
    api: client.ApiClient, namespace: str, app: str = "bot", environment: str = "production"
) -> PublicEnvironment:
    """An App (created when missing), an Environment ``<app>-<environment>`` and an API key of it.

    The key Secret is built exactly as the facade's key endpoint builds it (``apikeys.key_secret``);
    creating it directly avoids depending on the chart's user ClusterRoles here.
    """
    with contextlib.suppress(client.ApiException):
        create(api, namespace, "apps", "App", app, {})
    name = f"{app}-{environment}"
    env = create(api, namespace, "environments", "Environment", name, {"appRef": app})
    key = apikeys.generate()
    secret = apikeys.key_secret(
        key=key, name="tests", environment=env, created_by="tests", created_at=datetime.now(UTC)
    )
    client.CoreV1Api(api).create_namespaced_secret(namespace, secret)
    return PublicEnvironment(namespace, app, name, key.value)


def ready_model_status(api: client.ApiClient, namespace: str, name: str) -> None:
    """Write what the operator writes for a hub Model (phase ReadyToDeploy), for modules that run no
    operator; modules that run one wait for it instead (:func:`wait_model_ready`)."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        "dockyard.dev", "v1alpha1", namespace, "models", name, {"status": {"phase": "ReadyToDeploy"}}
    )


def wait_model_ready(api: client.ApiClient, namespace: str, name: str, timeout: float = 30) -> None:
    wait_for(
        lambda: (get(api, namespace, "models", name).get("status") or {}).get("phase") == "ReadyToDeploy",
        timeout=timeout,
        what=f"model {name} ReadyToDeploy",
    )


def lookup(http: httpx.Client, env: PublicEnvironment, dock_status_id: str) -> httpx.Response:
    return http.get(f"{env.base}/api/public/dock-status/{dock_status_id}", headers=env.headers)


def wait_dock_status(
    http: httpx.Client, env: PublicEnvironment, dock_status_id: str, *, timeout: float = 90
) -> dict[str, Any]:
    """Poll the dock-status lookup until the job is SUCCESS or FAILED; the finished record."""

    def probe() -> dict[str, Any] | None:
        response = lookup(http, env, dock_status_id)
        assert response.status_code == 200, response.text
        record: dict[str, Any] = response.json()
        return record if record["status"] in ("SUCCESS", "FAILED") else None

    return wait_for(probe, timeout=timeout, interval=0.5, what=f"dock status {dock_status_id} to finish")
