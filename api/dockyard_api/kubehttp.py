"""An asyncio client for the Kubernetes API (httpx), able to act as another user.

The facade's management endpoints act as the calling user (Kubernetes impersonation) so that RBAC
decides and admission webhooks see the real user. Impersonation needs one ``Impersonate-Group``
header per group, which the generated ``kubernetes`` client cannot send; httpx can. Credentials come
from the same kubeconfig / in-cluster configuration as :func:`dockyard_api.kube.api_client`.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx
from kubernetes import client, config

from dockyard_api.resources import GROUP
from dockyard_api.resources.v1alpha1 import VERSION


@dataclass(frozen=True)
class User:
    """An authenticated Kubernetes user (from a TokenReview)."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def impersonation_headers(self) -> list[tuple[str, str]]:
        headers = [("Impersonate-User", self.username)]
        if self.uid:
            headers.append(("Impersonate-Uid", self.uid))
        headers += [("Impersonate-Group", g) for g in self.groups]
        for key, values in self.extra.items():
            headers += [(f"Impersonate-Extra-{_header_key(key)}", v) for v in values]
        return headers


def _header_key(key: str) -> str:
    # Kubernetes: extra keys are percent-encoded in header names (RFC 7230 token characters only)
    return quote(key, safe="")


class KubeError(Exception):
    """A Kubernetes API answer other than 2xx: its status code and the API server's message."""

    def __init__(self, status: int, reason: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.details = details


def _configuration(kubeconfig: str | None) -> client.Configuration:
    path = kubeconfig or os.environ.get("KUBECONFIG")
    configuration = client.Configuration()
    if path or os.path.exists(os.path.expanduser("~/.kube/config")):
        config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    return configuration


class AsyncKube:
    """A small REST client for the paths the facade uses (custom objects, secrets, reviews, events)."""

    def __init__(self, kubeconfig: str | None = None, *, max_connections: int = 64, timeout: float = 10.0) -> None:
        self._conf = _configuration(kubeconfig)
        verify: ssl.SSLContext | bool = self._conf.verify_ssl
        if self._conf.verify_ssl:
            ctx = ssl.create_default_context(cafile=self._conf.ssl_ca_cert) if self._conf.ssl_ca_cert else None
            ctx = ctx or ssl.create_default_context()
            if self._conf.cert_file and self._conf.key_file:
                ctx.load_cert_chain(self._conf.cert_file, self._conf.key_file)
            verify = ctx
        self._http = httpx.AsyncClient(
            base_url=self._conf.host,
            verify=verify,
            timeout=timeout,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    def _auth_headers(self) -> list[tuple[str, str]]:
        if self._conf.refresh_api_key_hook is not None:
            self._conf.refresh_api_key_hook(self._conf)  # in-cluster tokens rotate
        token = self._conf.get_api_key_with_prefix("authorization")
        return [("Authorization", token)] if token else []

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        as_user: User | None = None,
    ) -> dict[str, Any]:
        headers = [*self._auth_headers(), ("Accept", "application/json")]
        if json is not None:
            headers.append(("Content-Type", content_type))
        if as_user is not None:
            headers += as_user.impersonation_headers()
        response = await self._http.request(method, path, json=json, params=params, headers=headers)
        if response.status_code >= 300:
            raise _error(response)
        body: dict[str, Any] = response.json() if response.content else {}
        return body

    async def watch(self, path: str, params: dict[str, str]) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch (``?watch=1``) on ``path``, one dict per event, until the server ends it."""
        headers = [*self._auth_headers(), ("Accept", "application/json")]
        query = {**params, "watch": "1", "allowWatchBookmarks": "true"}
        timeout = httpx.Timeout(self._http.timeout.connect, read=None)
        async with self._http.stream("GET", path, params=query, headers=headers, timeout=timeout) as response:
            if response.status_code >= 300:
                await response.aread()
                raise _error(response)
            async for line in response.aiter_lines():
                if line.strip():
                    event: dict[str, Any] = json.loads(line)
                    yield event

    # --- conveniences for the dockyard.dev kinds and core objects -----------------------------------

    @staticmethod
    def custom_path(namespace: str, plural: str, name: str | None = None, sub: str | None = None) -> str:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{plural}"
        if name:
            path += f"/{name}"
        if sub:
            path += f"/{sub}"
        return path

    @staticmethod
    def all_namespaces_path(plural: str) -> str:
        return f"/apis/{GROUP}/{VERSION}/{plural}"

    @staticmethod
    def core_path(namespace: str, plural: str, name: str | None = None) -> str:
        path = f"/api/v1/namespaces/{namespace}/{plural}"
        return f"{path}/{name}" if name else path


def _error(response: httpx.Response) -> KubeError:
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    message = str(body.get("message") or response.reason_phrase or f"HTTP {response.status_code}")
    return KubeError(response.status_code, str(body.get("reason") or ""), message, body.get("details"))
