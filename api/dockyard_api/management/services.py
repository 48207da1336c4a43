"""All the management services of one caller at once: the console's way in.

A router takes the one service it needs from :mod:`dockyard_api.deps` (``AppsDep``, ``EnvironmentsDep``,
...); a console page, which has no route dependencies to declare, gets a :class:`Management` for the
signed-in person from ``deps.management_of`` and calls the same services (docs/console.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from dockyard_api.auth import Authenticator
from dockyard_api.management.analytics.service import AnalyticsService
from dockyard_api.management.apps.service import AppService
from dockyard_api.management.canary.service import CanaryService
from dockyard_api.management.catalog.service import CatalogService
from dockyard_api.management.environments.service import EnvironmentService
from dockyard_api.management.evaluations.service import EvaluationService
from dockyard_api.management.keys.service import KeyService
from dockyard_api.management.tooltests.service import ToolTestService
from dockyard_api.management.usage.service import UsageService
from dockyard_api.runtime.service import AppRuntime
from dockyard_api.store import ConversationStore
from dockyard_core.repository import Repositories


@dataclass(frozen=True)
class Management:
    """The management services, acting as one Kubernetes user."""

    apps: AppService
    environments: EnvironmentService
    keys: KeyService
    catalog: CatalogService
    canary: CanaryService
    usage: UsageService
    analytics: AnalyticsService
    tooltests: ToolTestService
    evaluations: EvaluationService

    @classmethod
    def of(cls, repos: Repositories, auth: Authenticator, store: ConversationStore, runtime: AppRuntime) -> Management:
        """The services acting as ``repos.user`` (``repos``: core's repositories acting as the caller)."""
        if repos.user is None:
            raise ValueError("the management services act as a caller: Repositories.of(kube, user)")
        return cls(
            apps=AppService(repos, auth),
            environments=EnvironmentService(repos, auth),
            keys=KeyService(repos, auth),
            catalog=CatalogService(repos),
            canary=CanaryService(repos, auth),
            usage=UsageService(store, auth, repos.user),
            analytics=AnalyticsService(store, auth, repos.user),
            tooltests=ToolTestService(repos, auth, runtime),
            evaluations=EvaluationService(repos, auth, runtime, store),
        )
