"""An asyncio client for the Kubernetes API (aiohttp), able to act as another user.

The facade's management endpoints act as the calling user (Kubernetes impersonation) so that RBAC
decides and admission webhooks see the real user. Impersonation needs one ``Impersonate-Group``
header per group, which the generated ``kubernetes`` client cannot send; aiohttp can. Credentials come
from the same kubeconfig / in-cluster configuration as :func:`dockyard_core.kubeconfig.api_client`.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from kubernetes import client

from dockyard_core.kubeconfig import load_configuration

FIELD_MANAGER = "dockyard-operator"
"""The field manager of everything the operator applies (server-side apply)."""
APPLY = "application/apply-patch+yaml"
"""Content type of a server-side apply patch."""
MERGE = "application/merge-patch+json"
"""Content type of a JSON merge patch."""


def guarded(patch: dict[str, Any], resource_version: str | None) -> dict[str, Any]:
    """A merge patch that applies only while the object is still at ``resource_version`` (the API server
    answers 409 Conflict otherwise); unguarded when it is None. Every guarded status patch of Dockyard
    (the operator's reconciles, the facade's import steps) is built here."""
    if resource_version is None:
        return patch
    return {**patch, "metadata": {**patch.get("metadata", {}), "resourceVersion": resource_version}}


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


class AsyncKube:
    """A small REST client of the API server (paths from :mod:`dockyard_core.kubepaths`; the facade calls
    it through :mod:`dockyard_core.repository`, the operator through its ``KubeApi``).

    Built on aiohttp: its connection pool costs the same per request however many connections are open
    (httpx's pool scans every connection on every request, which dominated the facade's CPU time at 32
    concurrent calls). A failure to reach the API server in time is a :class:`KubeError` with status 503.
    """

    def __init__(
        self,
        kubeconfig: str | None = None,
        *,
        max_connections: int = 64,
        timeout: float = 10.0,
        wait_for_connection: bool = False,
    ) -> None:
        """``timeout`` bounds each request, from its start (waiting for one of the ``max_connections``
        included) to its answer; with ``wait_for_connection`` the wait for a free connection is not
        counted, only the connection and each read: for a client that queues far more requests than
        it has connections (the operator, reconciling 1,500 ModelDeployments at once)."""
        self._conf = load_configuration(kubeconfig)
        self._base = self._conf.host.rstrip("/")
        self._ssl = _ssl_context(self._conf) if self._base.startswith("https:") else None
        self._max_connections = max_connections
        self._timeout = (
            aiohttp.ClientTimeout(total=None, sock_connect=timeout, sock_read=timeout)
            if wait_for_connection
            else aiohttp.ClientTimeout(total=timeout)
        )
        self._connect_timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        # created on first use, inside the running event loop
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._max_connections, ssl=self._ssl or False)
            # the API server sets no cookies: no jar to filter on every request
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, cookie_jar=aiohttp.DummyCookieJar()
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _auth_headers(self) -> list[tuple[str, str]]:
        if self._conf.refresh_api_key_hook is not None:
            self._conf.refresh_api_key_hook(self._conf)  # in-cluster tokens rotate
        # the kubernetes package keeps a bearer token (kubeconfig token, in-cluster service account) under
        # "BearerToken", its generated clients' name; "authorization" is the older key
        token = self._conf.get_api_key_with_prefix("BearerToken", alias="authorization")
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
        data = None
        if json is not None:
            headers.append(("Content-Type", content_type))
            data = orjson.dumps(json)
        if as_user is not None:
            headers += as_user.impersonation_headers()
        try:
            async with self._http().request(
                method, self._base + path, params=params, data=data, headers=headers
            ) as response:
                content = await response.read()
                status, reason = response.status, response.reason
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _unreachable(exc) from exc
        if status >= 300:
            raise _error(status, reason, content)
        body: dict[str, Any] = orjson.loads(content) if content else {}
        return body

    async def watch(self, path: str, params: dict[str, str]) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch (``?watch=1``) on ``path``, one dict per event, until the server ends it."""
        headers = [*self._auth_headers(), ("Accept", "application/json")]
        query = {**params, "watch": "1", "allowWatchBookmarks": "true"}
        timeout = aiohttp.ClientTimeout(total=None, connect=self._connect_timeout)
        try:
            async with self._http().get(self._base + path, params=query, headers=headers, timeout=timeout) as response:
                if response.status >= 300:
                    raise _error(response.status, response.reason, await response.read())
                pending = b""
                async for piece in response.content.iter_any():
                    pending += piece
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            event: dict[str, Any] = orjson.loads(line)
                            yield event
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _unreachable(exc) from exc

    # --- the calls both sides repeat: get-or-None, server-side apply, guarded merge patch, list ------

    async def get_or_none(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``, or None when it does not exist (404)."""
        try:
            return await self.request("GET", path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def apply(self, path: str, obj: dict[str, Any], field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """Server-side apply of ``obj`` at ``path`` as ``field_manager``, taking over conflicting fields
        (idempotent: applying the same object again changes nothing)."""
        params = {"fieldManager": field_manager, "force": "true"}
        return await self.request("PATCH", path, json=obj, params=params, content_type=APPLY)

    async def merge(self, path: str, patch: dict[str, Any], resource_version: str | None = None) -> dict[str, Any]:
        """A JSON merge patch, :func:`guarded` by ``resource_version`` (409 when the object moved on);
        returns the object as it is now."""
        return await self.request("PATCH", path, json=guarded(patch, resource_version), content_type=MERGE)

    async def items(self, path: str, params: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """The items of a list call."""
        found = await self.request("GET", path, params=params)
        items: list[dict[str, Any]] = found.get("items") or []
        return items


def _ssl_context(conf: client.Configuration) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=conf.ssl_ca_cert) if conf.ssl_ca_cert else ssl.create_default_context()
    if not conf.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if conf.cert_file and conf.key_file:
        ctx.load_cert_chain(conf.cert_file, conf.key_file)
    return ctx


def _unreachable(exc: BaseException) -> KubeError:
    what = "did not answer in time" if isinstance(exc, TimeoutError) else "could not be reached"
    return KubeError(503, "Unreachable", f"the Kubernetes API server {what} ({exc.__class__.__name__})")


def _error(status: int, reason: str | None, content: bytes) -> KubeError:
    try:
        body = orjson.loads(content) if content else {}
    except orjson.JSONDecodeError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    message = str(body.get("message") or reason or f"HTTP {status}")
    return KubeError(status, str(body.get("reason") or ""), message, body.get("details"))
