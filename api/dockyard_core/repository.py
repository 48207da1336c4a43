"""Typed repositories: the one place where objects are read from and written to the Kubernetes API.

- :class:`Repository` is generic over Dockyard's resource types: ``Repository(kube, Environment)``
  finds its path from the type's CRD (``Environment.crd.plural``), returns resource models
  (``Environment.model_validate``) and takes either a model or a manifest to write.
- :class:`Objects` is the same for the core kinds Dockyard touches as plain dicts (Secrets holding API
  keys, ConfigMaps holding audit records, Events).
- :class:`Repositories` bundles one of each for a client, acting as Dockyard itself or, with
  :meth:`Repositories.as_user`, as the calling Kubernetes user (impersonation: RBAC decides and the
  admission webhooks see who asked).

Errors are mapped here, once: a Kubernetes API answer other than 2xx becomes a domain error
(:func:`dockyard_core.errors.from_kube`, which keeps the API server's message and the fields it names);
a missing object becomes a :class:`~dockyard_core.errors.NotFoundError` naming the kind, the object and
the namespace (or the caller's own message). No call site checks a status code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dockyard_core import kubepaths
from dockyard_core.errors import DockyardError, NotFoundError, from_kube
from dockyard_core.kubeclient import APPLY, FIELD_MANAGER, MERGE, AsyncKube, KubeError, User, guarded
from dockyard_core.resources.v1alpha1 import (
    App,
    AppVersion,
    Environment,
    Model,
    ModelDeployment,
    Tool,
    ToolDeployment,
)
from dockyard_core.resources.v1alpha1.common import Resource

R = TypeVar("R", bound=Resource)

Selector = Mapping[str, str] | str | None
"""A label or field selector: ``{"app": "x"}`` (all must match) or the selector string itself."""


def selector(value: Selector) -> str:
    """The selector string of ``value`` (``a=1,b=2``; empty for None)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return ",".join(f"{k}={v}" for k, v in value.items())


def domain_error(exc: KubeError, *, missing: str | None = None) -> DockyardError:
    """The domain error of a Kubernetes API answer; ``missing`` is the message of a 404 (the API server's
    own message otherwise)."""
    if exc.status == 404 and missing is not None:
        return NotFoundError(missing)
    return from_kube(exc)


class Objects:
    """Objects of one kind (by plural) as plain dicts, with errors mapped to domain errors."""

    def __init__(self, kube: AsyncKube, plural: str, kind: str, *, user: User | None = None) -> None:
        self.kube = kube
        self.plural = plural
        self.kind = kind
        self.user = user

    def as_user(self, user: User | None) -> Objects:
        """The same objects, read and written as ``user`` (None: as Dockyard itself)."""
        return Objects(self.kube, self.plural, self.kind, user=user)

    def path(self, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
        return kubepaths.path(self.plural, namespace, name, sub)

    def missing(self, namespace: str, name: str) -> str:
        return f"{self.kind} {name!r} not found in namespace {namespace!r}"

    async def _call(
        self,
        method: str,
        path: str,
        *,
        missing: str | None = None,
        json: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        try:
            return await self.kube.request(
                method, path, json=json, params=params, content_type=content_type, as_user=self.user
            )
        except KubeError as exc:
            raise domain_error(exc, missing=missing) from exc

    async def get(self, namespace: str, name: str, *, missing: str | None = None) -> dict[str, Any]:
        """The object; :class:`NotFoundError` (with ``missing`` as its message, when given) if there is none."""
        return await self._call("GET", self.path(namespace, name), missing=missing or self.missing(namespace, name))

    async def find(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The object, or None when there is none."""
        try:
            return await self.kube.request("GET", self.path(namespace, name), as_user=self.user)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise from_kube(exc) from exc

    async def select(
        self, namespace: str | None, *, labels: Selector = None, fields: Selector = None
    ) -> list[dict[str, Any]]:
        """The objects in ``namespace`` (all namespaces when None) matching the selectors."""
        params = {k: v for k, v in (("labelSelector", selector(labels)), ("fieldSelector", selector(fields))) if v}
        found = await self._call("GET", self.path(namespace), params=params or None)
        items: list[dict[str, Any]] = found.get("items") or []
        return items

    async def create(self, namespace: str | None, obj: dict[str, Any]) -> dict[str, Any]:
        """Create ``obj`` (``namespace`` None: of a cluster-scoped kind, e.g. a TokenReview); the API
        server's refusal (exists already: 409, schema: 422) as a domain error."""
        return await self._call("POST", self.path(namespace), json=obj)

    async def merge(
        self,
        namespace: str,
        name: str,
        patch: dict[str, Any],
        *,
        resource_version: str | None = None,
        sub: str | None = None,
    ) -> dict[str, Any]:
        """A JSON merge patch (only while the object is at ``resource_version``, when given); the object
        as it is now."""
        return await self._call(
            "PATCH",
            self.path(namespace, name, sub),
            json=guarded(patch, resource_version),
            content_type=MERGE,
            missing=self.missing(namespace, name),
        )

    async def apply(self, obj: dict[str, Any], *, field_manager: str = FIELD_MANAGER) -> dict[str, Any]:
        """Server-side apply of ``obj`` (its metadata names it) as ``field_manager``, forcing conflicts."""
        meta = obj["metadata"]
        return await self._call(
            "PATCH",
            self.path(meta["namespace"], meta["name"]),
            json=obj,
            params={"fieldManager": field_manager, "force": "true"},
            content_type=APPLY,
        )

    async def delete(self, namespace: str, name: str, *, missing_ok: bool = False) -> None:
        """Delete the object; a missing one is :class:`NotFoundError` unless ``missing_ok``."""
        try:
            await self._call("DELETE", self.path(namespace, name), missing=self.missing(namespace, name))
        except NotFoundError:
            if not missing_ok:
                raise


class Repository(Generic[R]):
    """Dockyard's custom resources of one kind, as resource models (``Repository(kube, Environment)``)."""

    def __init__(self, kube: AsyncKube, model: type[R], *, user: User | None = None) -> None:
        self.model = model
        kind = model.model_fields["kind"].default
        self.objects = Objects(kube, model.crd.plural, str(kind), user=user)

    @property
    def kind(self) -> str:
        return self.objects.kind

    @property
    def plural(self) -> str:
        return self.objects.plural

    def as_user(self, user: User | None) -> Repository[R]:
        """The same kind, read and written as ``user`` (None: as Dockyard itself)."""
        return Repository(self.objects.kube, self.model, user=user)

    def path(self, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
        return self.objects.path(namespace, name, sub)

    def parse(self, body: dict[str, Any]) -> R:
        """The resource model of an object the API server returned."""
        return self.model.model_validate(body)

    async def get(self, namespace: str, name: str, *, missing: str | None = None) -> R:
        """The object; :class:`NotFoundError` (with ``missing`` as its message, when given) if there is none."""
        return self.parse(await self.objects.get(namespace, name, missing=missing))

    async def find(self, namespace: str, name: str) -> R | None:
        found = await self.objects.find(namespace, name)
        return None if found is None else self.parse(found)

    async def select(self, namespace: str | None, *, labels: Selector = None, fields: Selector = None) -> list[R]:
        """The objects in ``namespace`` (all namespaces when None) matching the selectors."""
        return [self.parse(o) for o in await self.objects.select(namespace, labels=labels, fields=fields)]

    async def create(self, obj: R | dict[str, Any], namespace: str | None = None) -> R:
        """Create ``obj`` in ``namespace`` (default: its own metadata's)."""
        manifest = obj.to_manifest() if isinstance(obj, Resource) else obj
        where = namespace or (manifest.get("metadata") or {}).get("namespace")
        if not where:
            raise ValueError(f"{self.kind}: create needs a namespace")
        return self.parse(await self.objects.create(where, manifest))

    async def merge(
        self, namespace: str, name: str, patch: dict[str, Any], *, resource_version: str | None = None
    ) -> R:
        return self.parse(await self.objects.merge(namespace, name, patch, resource_version=resource_version))

    async def merge_status(
        self, namespace: str, name: str, status: dict[str, Any], *, resource_version: str | None = None
    ) -> R:
        """Merge-patch the status subresource."""
        return self.parse(
            await self.objects.merge(
                namespace, name, {"status": status}, resource_version=resource_version, sub="status"
            )
        )

    async def apply(self, obj: R | dict[str, Any], *, field_manager: str = FIELD_MANAGER) -> R:
        manifest = obj.to_manifest() if isinstance(obj, Resource) else obj
        return self.parse(await self.objects.apply(manifest, field_manager=field_manager))

    async def delete(self, namespace: str, name: str, *, missing_ok: bool = False) -> None:
        await self.objects.delete(namespace, name, missing_ok=missing_ok)


@dataclass(frozen=True)
class Repositories:
    """One repository per kind, all on one client and acting as one identity."""

    apps: Repository[App]
    app_versions: Repository[AppVersion]
    environments: Repository[Environment]
    models: Repository[Model]
    model_deployments: Repository[ModelDeployment]
    tools: Repository[Tool]
    tool_deployments: Repository[ToolDeployment]
    secrets: Objects
    configmaps: Objects
    kube: AsyncKube
    user: User | None = None

    @classmethod
    def of(cls, kube: AsyncKube, user: User | None = None) -> Repositories:
        return cls(
            apps=Repository(kube, App, user=user),
            app_versions=Repository(kube, AppVersion, user=user),
            environments=Repository(kube, Environment, user=user),
            models=Repository(kube, Model, user=user),
            model_deployments=Repository(kube, ModelDeployment, user=user),
            tools=Repository(kube, Tool, user=user),
            tool_deployments=Repository(kube, ToolDeployment, user=user),
            secrets=Objects(kube, "secrets", "Secret", user=user),
            configmaps=Objects(kube, "configmaps", "ConfigMap", user=user),
            kube=kube,
            user=user,
        )

    def as_user(self, user: User | None) -> Repositories:
        """The same repositories acting as ``user`` (Kubernetes impersonation; None: as Dockyard itself)."""
        return Repositories.of(self.kube, user)


__all__ = ["Objects", "Repositories", "Repository", "Selector", "domain_error", "selector"]
