"""The REST paths of every kind Dockyard reads or writes, in one place.

Dockyard's own kinds live under ``/apis/dockyard.dev/v1alpha1``; the core kinds it touches (Secrets,
ConfigMaps, Services, Events, Pods) under ``/api/v1``; the others under their group (Deployments in
``apps/v1``, the facade's TokenReviews and SubjectAccessReviews, the operator's webhook configurations).
The facade's repositories (:mod:`dockyard_core.repository`) and the operator's :class:`KubeApi` both build
their paths here.
"""

from __future__ import annotations

from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION

CORE_PLURALS = frozenset({"secrets", "configmaps", "services", "events", "pods", "namespaces"})
"""The core (``/api/v1``) kinds Dockyard reads or writes."""

OTHER_GROUPS = {
    "deployments": "apps/v1",
    "jobs": "batch/v1",
    "tokenreviews": "authentication.k8s.io/v1",
    "subjectaccessreviews": "authorization.k8s.io/v1",
    "validatingwebhookconfigurations": "admissionregistration.k8s.io/v1",
    "mutatingwebhookconfigurations": "admissionregistration.k8s.io/v1",
}
"""The kinds of other API groups Dockyard reads or writes, and their ``group/version``."""

CLUSTER_SCOPED = frozenset(
    {
        "namespaces",
        "tokenreviews",
        "subjectaccessreviews",
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
    }
)
"""The kinds that live outside any namespace: their objects' paths have none."""


def group_prefix(plural: str) -> str:
    """The API group prefix of a kind: ``/api/v1``, ``/apis/apps/v1``, ... or ``/apis/dockyard.dev/v1alpha1``."""
    if plural in CORE_PLURALS:
        return "/api/v1"
    other = OTHER_GROUPS.get(plural)
    if other is not None:
        return f"/apis/{other}"
    return f"/apis/{GROUP}/{VERSION}"


def collection(plural: str, namespace: str | None) -> str:
    """The path of a kind's collection in ``namespace`` (all namespaces, or a cluster-scoped kind's, when None)."""
    prefix = group_prefix(plural)
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace is not None else f"{prefix}/{plural}"


def object_path(plural: str, namespace: str | None, name: str, sub: str | None = None) -> str:
    """The path of one object (and of its subresource ``sub``: ``status``, ``scale``); ``namespace`` is None
    for a cluster-scoped kind only."""
    path = f"{collection(plural, namespace)}/{name}"
    return f"{path}/{sub}" if sub else path


def path(plural: str, namespace: str | None, name: str | None = None, sub: str | None = None) -> str:
    """The collection's path, or the object's when ``name`` is given (``namespace`` is then required, but
    for a cluster-scoped kind)."""
    if name is None:
        return collection(plural, namespace)
    if namespace is None and plural not in CLUSTER_SCOPED:
        raise ValueError(f"{plural}/{name}: an object's path needs its namespace")
    return object_path(plural, namespace, name, sub)
