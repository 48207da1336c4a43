"""Who is calling: environment API keys (public API, deployed apps) and Kubernetes users (management).

- Public API: ``x-api-key`` carries an environment's key. The environment is the one in the path
  (``/e/{namespace}/{environment}/api/public/...``, the ``{base_url}`` of docs/public-api.md): a missing, malformed or
  unknown key is 401, a valid key of another environment is 403.
- Deployed-app calls: ``Authorization: Bearer <API key>``, same rules.
- Management endpoints: ``Authorization: Bearer <Kubernetes token>``. The facade asks the API server
  who that is (TokenReview) and then acts AS that user (impersonation), so Kubernetes RBAC decides
  and admission webhooks record the real user. Keys, which are Secrets no user is granted directly, are
  authorised with a SubjectAccessReview on the virtual subresource ``environments/apikeys``.

Routes ask for their caller by type (``PublicCaller``, ``AppCaller``, ``KubeUser``): those dependencies are
in :mod:`dockyard_api.deps`, and use the :class:`Authenticator` here.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dockyard_api.settings import ApiSettings
from dockyard_core import apikeys
from dockyard_core.errors import DockyardError, ForbiddenError, KubeUnavailableError, UnauthenticatedError
from dockyard_core.kubeclient import AsyncKube, User
from dockyard_core.repository import Objects
from dockyard_core.resources import GROUP


@dataclass(frozen=True)
class EnvironmentCaller:
    """A caller holding a valid API key of this environment."""

    namespace: str
    environment: str
    app: str
    key_id: str
    end_user: str | None = None
    """The end user the credential itself names (a widget token); when set, it owns the session and the
    request's metadata.user_id is ignored."""
    environment_uid: str = ""
    """The Environment's uid, when the key's Secret names its owner (objects the caller deploys are
    owned by the environment: deleting it releases them)."""


class _TtlCache:
    """A tiny time-bounded cache: revocations and RBAC changes take effect within ``ttl`` seconds."""

    def __init__(self, ttl: float, size: int = 10_000) -> None:
        self.ttl = ttl
        self.size = size
        self._items: dict[Any, tuple[float, Any]] = {}

    def get(self, key: Any) -> tuple[bool, Any]:
        hit = self._items.get(key)
        if hit is None or hit[0] < time.monotonic():
            return False, None
        return True, hit[1]

    def entry(self, key: Any) -> tuple[float, Any] | None:
        """``(expiry, value)`` for ``key``, expired or not (expiry on the monotonic clock), None when absent."""
        return self._items.get(key)

    def put(self, key: Any, value: Any, read_at: float | None = None) -> None:
        """Cache ``value`` until ``ttl`` after ``read_at`` (when it was read: a read that started before a
        revocation must not outlive the bound), default now."""
        if self.ttl <= 0:
            return
        if len(self._items) >= self.size:
            self._items.clear()
        self._items[key] = ((time.monotonic() if read_at is None else read_at) + self.ttl, value)

    def drop(self, key: Any) -> None:
        self._items.pop(key, None)


class Authenticator:
    """Verifies API keys and Kubernetes tokens against the API server, with short-lived caches."""

    def __init__(self, kube: AsyncKube, settings: ApiSettings) -> None:
        self.settings = settings
        self._secrets = Objects(kube, "secrets", "Secret")
        self._token_reviews = Objects(kube, "tokenreviews", "TokenReview")
        self._access_reviews = Objects(kube, "subjectaccessreviews", "SubjectAccessReview")
        self._keys = _TtlCache(settings.api_key_cache_seconds)
        self._tokens = _TtlCache(settings.token_cache_seconds)
        self._reads: dict[tuple[str, str], tuple[float, asyncio.Future[apikeys.StoredKey | None]]] = {}
        """Reads of key Secrets in flight, with when each started."""
        self._forgotten: dict[tuple[str, str], float] = {}
        self._last_used_written: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def key_caller(
        self, namespace: str, environment: str, value: str | None, header: str = "x-api-key"
    ) -> EnvironmentCaller:
        """The caller of an environment's API key ``value``; ``header``: where the call takes it (named in the 401
        when it is missing: ``x-api-key`` for the public API, ``Authorization`` for a deployed app's calls)."""
        if not value:
            how = "Authorization: Bearer <API key>" if header == "Authorization" else header
            raise UnauthenticatedError(f"an API key is required ({how})", {"header": header})
        key_id = apikeys.key_id_of(value)
        stored = await self._stored(namespace, key_id) if key_id else None
        verdict = stored.verify(value, environment) if stored else apikeys.Verdict.UNKNOWN
        if verdict is apikeys.Verdict.UNKNOWN:
            raise UnauthenticatedError("the API key is not valid (unknown or revoked)")
        assert stored is not None
        if verdict is apikeys.Verdict.OTHER_ENVIRONMENT:
            raise ForbiddenError(
                f"this API key belongs to environment {stored.environment!r}, not {environment!r}",
                {"keyEnvironment": stored.environment, "environment": environment},
            )
        self._touch(namespace, stored.key_id)
        return EnvironmentCaller(
            namespace, environment, stored.app, stored.key_id, environment_uid=stored.environment_uid
        )

    def forget_key(self, namespace: str, key_id: str) -> None:
        self._keys.drop((namespace, key_id))
        self._forgotten[(namespace, key_id)] = time.monotonic()  # a read in flight must not re-cache it

    async def _stored(self, namespace: str, key_id: str) -> apikeys.StoredKey | None:
        """The key's Secret, verified: from the cache while its entry is younger than the cache time.

        Concurrent misses of one key share one read of the API server (32 calls arriving as an entry
        expired used to send 32 GETs and all wait for them), and a key in use is read again in the
        background shortly before its entry expires, so its callers do not wait for that read. Neither
        extends the bound: an entry is served at most ``api_key_cache_seconds`` after its read started."""
        cache_key = (namespace, key_id)
        ttl = self._keys.ttl
        if ttl <= 0:  # no cache: every call reads the key
            return await self._read_key(namespace, key_id)
        entry = self._keys.entry(cache_key)
        now = time.monotonic()
        if entry is not None and entry[0] >= now:
            if entry[0] - now < min(1.0, ttl / 5) and cache_key not in self._reads:
                self._start_read(namespace, key_id)  # refresh ahead; this call uses the entry
            stored: apikeys.StoredKey | None = entry[1]
            return stored
        in_flight = self._reads.get(cache_key)
        # join a read in flight only while its answer may still be served (it started less than ttl ago)
        read = in_flight[1] if in_flight and in_flight[0] + ttl >= now else self._start_read(namespace, key_id)
        return await asyncio.shield(read)  # a caller that goes away does not cancel the others' read

    def _start_read(self, namespace: str, key_id: str) -> asyncio.Future[apikeys.StoredKey | None]:
        cache_key = (namespace, key_id)
        started = time.monotonic()

        async def read() -> apikeys.StoredKey | None:
            try:
                stored = await self._read_key(namespace, key_id)
            finally:
                if self._reads.get(cache_key, (0.0, None))[1] is task:
                    del self._reads[cache_key]
            current = self._keys.entry(cache_key)
            newer = current is not None and current[0] > started + self._keys.ttl  # a later read answered first
            if not newer and self._forgotten.get(cache_key, -1.0) < started:
                self._keys.put(cache_key, stored, read_at=started)
            return stored

        task = asyncio.ensure_future(read())
        task.add_done_callback(_retrieve)  # a refresh nobody awaits may fail: the entry just expires
        self._reads[cache_key] = (started, task)
        if len(self._forgotten) > 1000:  # only reads in flight need them (each bounded by the client timeout)
            old = started - 600
            self._forgotten = {k: at for k, at in self._forgotten.items() if at > old}
        return task

    async def _read_key(self, namespace: str, key_id: str) -> apikeys.StoredKey | None:
        try:
            secret = await self._secrets.find(namespace, apikeys.secret_name(key_id))
        except DockyardError as exc:  # whatever kept the key from being read: retry later
            raise KubeUnavailableError(f"cannot verify the API key: {exc.message}") from exc
        return apikeys.stored_key(secret) if secret else None

    def _touch(self, namespace: str, key_id: str) -> None:
        """Record the key's last use, at most once per ``last_used_interval`` per key, off the request path."""
        now = time.monotonic()
        if now - self._last_used_written.get(key_id, -1e9) < self.settings.last_used_interval_seconds:
            return
        self._last_used_written[key_id] = now
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        patch = {"metadata": {"annotations": {apikeys.LAST_USED_ANNOTATION: stamp}}}
        task = asyncio.create_task(self._patch_quietly(namespace, apikeys.secret_name(key_id), patch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _patch_quietly(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        # best effort: the key was valid; last-used is informational
        with contextlib.suppress(DockyardError, OSError):
            await self._secrets.merge(namespace, name, patch)

    async def user(self, authorization: str | None) -> User:
        token = bearer(authorization)
        if not token:
            raise UnauthenticatedError(
                "a Kubernetes bearer token is required (Authorization: Bearer $(kubectl create token ...))"
            )
        digest = hashlib.sha256(token.encode()).hexdigest()
        hit, cached = self._tokens.get(digest)
        if hit:
            user: User = cached
            return user
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        try:
            result = await self._token_reviews.create(None, review)
        except DockyardError as exc:
            raise KubeUnavailableError(f"cannot review the token: {exc.message}") from exc
        status = result.get("status") or {}
        if not status.get("authenticated"):
            raise UnauthenticatedError("the bearer token is not valid for this cluster")
        info = status.get("user") or {}
        user = User(
            username=info.get("username", ""),
            uid=info.get("uid", ""),
            groups=tuple(info.get("groups") or ()),
            extra={k: tuple(v) for k, v in (info.get("extra") or {}).items()},
        )
        self._tokens.put(digest, user)
        return user

    async def allowed(self, user: User, *, verb: str, namespace: str, resource: str, subresource: str = "") -> bool:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user.username,
                "uid": user.uid,
                "groups": list(user.groups),
                "extra": {k: list(v) for k, v in user.extra.items()},
                "resourceAttributes": {
                    "group": GROUP,
                    "verb": verb,
                    "namespace": namespace,
                    "resource": resource,
                    "subresource": subresource,
                },
            },
        }
        try:
            result = await self._access_reviews.create(None, review)
        except DockyardError as exc:
            raise KubeUnavailableError(f"cannot check permissions: {exc.message}") from exc
        return bool((result.get("status") or {}).get("allowed"))

    async def require(self, user: User, *, verb: str, namespace: str, resource: str, subresource: str = "") -> None:
        if not await self.allowed(user, verb=verb, namespace=namespace, resource=resource, subresource=subresource):
            what = f"{resource}/{subresource}" if subresource else resource
            raise ForbiddenError(
                f'user "{user.username}" cannot {verb} {what}.{GROUP} in namespace "{namespace}"',
                {"verb": verb, "resource": what, "namespace": namespace},
            )


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None
