"""What every management service starts from: the calling Kubernetes user and core's repositories.

A management service is a plain class built per request for one caller: ``AppService(repos, auth)``
where ``repos`` are core's repositories acting as the caller (``Repositories.of(kube, user)``:
Kubernetes impersonation, so RBAC decides and the admission webhooks see who asked) and ``auth`` the
facade's :class:`~dockyard_api.auth.Authenticator` (SubjectAccessReviews of the subresources no
Kubernetes verb covers: ``apps/restore``, ``environments/deploy``, ``environments/apikeys``). What no
user touches directly (API-key Secrets, audit records, the annotations the facade keeps) is written as
Dockyard itself through :attr:`CallerService.dockyard`.

The routers get their service from :mod:`dockyard_api.deps` (``AppsDep``, ``EnvironmentsDep``, ...); the
console gets all of them at once (:class:`dockyard_api.management.services.Management`, built by
``deps.management_of``). Errors are core's domain errors, raised by the repositories (a Kubernetes API
answer mapped once, there) or by the service itself: no service checks a status code.
"""

from __future__ import annotations

from functools import cached_property

from dockyard_api.auth import Authenticator
from dockyard_core.kubeclient import User
from dockyard_core.repository import Repositories
from dockyard_core.resources.v1alpha1 import Environment


class CallerService:
    """A service acting as one Kubernetes user (``repos.user``)."""

    def __init__(self, repos: Repositories, auth: Authenticator) -> None:
        if repos.user is None:
            raise ValueError("a management service acts as a caller: Repositories.of(kube, user)")
        self.repos = repos
        self.auth = auth
        self.user: User = repos.user

    @cached_property
    def dockyard(self) -> Repositories:
        """The same repositories acting as Dockyard itself (no impersonation)."""
        return self.repos.as_user(None)

    async def environment(self, namespace: str, name: str) -> Environment:
        """An environment, read as the caller (a :class:`NotFoundError` in the API's words)."""
        return await self.repos.environments.get(
            namespace, name, missing=f"environment {name!r} not found in namespace {namespace!r}"
        )
