"""The REST paths of every kind Dockyard reads or writes, in one place.

Dockyard's own kinds live under ``/apis/dockyard.dev/v1alpha1``; the core kinds it touches (Secrets,
ConfigMaps, Services, Events, Pods) under ``/api/v1``; Deployments under ``/apis/apps/v1``. The facade's
repositories (:mod:`dockyard_core.repository`) and the operator's :class:`KubeApi` both build their
paths here.
"""

from __future__ import annotations

from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION

CORE_PLURALS = frozenset({"secrets", "configmaps", "services", "events", "pods", "namespaces"})
"""The core (``/api/v1``) kinds Dockyard reads or writes."""

APPS_PLURALS = frozenset({"deployments"})
"""The ``apps/v1`` kinds Dockyard reads or writes."""


def group_prefix(plural: str) -> str:
    """The API group prefix of a kind: ``/api/v1``, ``/apis/apps/v1`` or ``/apis/dockyard.dev/v1alpha1``."""
    if plural in CORE_PLURALS:
        return "/api/v1"
    if plural in APPS_PLURALS:
        return "/apis/apps/v1"
    return f"/apis/{GROUP}/{VERSION}"


def collection(plural: str, namespace: str | None) -> str:
    """The path of a kind's collection in ``namespace`` (all namespaces when None)."""
    prefix = group_prefix(plural)
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace is not None else f"{prefix}/{plural}"


def object_path(plural: str, namespace: str, name: str, sub: str | None = None) -> str:
    """The path of one object (and of its subresource ``sub``: ``status``, ``scale``)."""
    path = f"{collection(plural, namespace)}/{name}"
    return f"{path}/{sub}" if sub else path


def path(plural: str, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
    """The collection's path, or the object's when ``name`` is given (``namespace`` is then required)."""
    if name is None:
        return collection(plural, namespace)
    if namespace is None:
        raise ValueError(f"{plural}/{name}: an object's path needs its namespace")
    return object_path(plural, namespace, name, sub)
