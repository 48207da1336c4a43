"""Helpers for e2e tests of the public API: a real API key of an environment, and the import calls."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
from kubernetes import client

from dockyard_core import apikeys


def api_key(api: client.ApiClient, namespace: str, environment: str, app: str = "app") -> str:
    """A new API key of ``namespace/environment``, stored the way the facade stores keys (its hash in a
    Secret). The Secret has no owner (a test needs no Environment object behind it)."""
    key = apikeys.generate()
    environment_obj = {"metadata": {"name": environment, "namespace": namespace, "uid": ""}, "spec": {"appRef": app}}
    secret = apikeys.key_secret(
        key=key, name="e2e", environment=environment_obj, created_by="e2e", created_at=datetime.now(UTC)
    )
    secret["metadata"].pop("ownerReferences")
    client.CoreV1Api(api).create_namespaced_secret(namespace, secret)
    return key.value


class ImportClient:
    """The chunked import of docs/public-api.md (and the session status and abort) against a running facade."""

    def __init__(self, http: httpx.Client, namespace: str, environment: str, key: str) -> None:
        self.http = http
        self.root = f"/e/{namespace}/{environment}/api/public"
        self.base = f"{self.root}/files/session"
        self.headers = {"x-api-key": key}

    def start(self, **body: Any) -> httpx.Response:
        return self.http.post(f"{self.base}/start", json=body, headers=self.headers)

    def chunk(self, session_id: str, number: int | str, data: bytes) -> httpx.Response:
        return self.http.post(
            f"{self.base}/{session_id}",
            data={"chunkNumber": str(number)},
            files={"file": ("blob", data, "application/octet-stream")},
            headers=self.headers,
        )

    def status(self, session_id: str) -> httpx.Response:
        return self.http.get(f"{self.base}/{session_id}", headers=self.headers)

    def abort(self, session_id: str) -> httpx.Response:
        return self.http.delete(f"{self.base}/{session_id}", headers=self.headers)

    def complete(self, session_id: str) -> httpx.Response:
        return self.http.post(f"{self.base}/{session_id}/complete", headers=self.headers)

    def dock_status(self, dock_status_id: str) -> httpx.Response:
        return self.http.get(f"{self.root}/dock-status/{dock_status_id}", headers=self.headers)
