"""An environment's canary, as the calling Kubernetes user (docs/promotion.md, "Canary by session").

Every call is a guarded merge patch of the Environment as the caller (RBAC decides; the caller also needs
``create`` on ``environments/deploy``, as for a deploy): ``spec.canary`` set, changed or removed, with the
annotations the operator reads to write the history (:mod:`dockyard_operator.canary`): what was asked
(``dockyard.dev/canary-request``) and by whom (``dockyard.dev/canary-by``). Promote links the canary's
version (``spec.appVersion``, a deploy request ``Promote``: the history's new Active entry says Promote)
and removes the canary in the same patch; sessions that started on the old version keep it.
"""

from __future__ import annotations

import uuid
from typing import Any

from dockyard_api.management.base import CallerService
from dockyard_api.management.canary.schemas import CanaryStart, CanaryWeight
from dockyard_api.management.environments.service import environment_view
from dockyard_api.management.schemas import EnvironmentChange
from dockyard_core import requestid
from dockyard_core.errors import ConflictError, InvalidError
from dockyard_core.resources.v1alpha1 import DEPLOY_REQUEST_ANNOTATION, Environment
from dockyard_core.resources.v1alpha1.canary import CANARY_REQUEST_ANNOTATION

CANARY_BY_ANNOTATION = "dockyard.dev/canary-by"


def _changed(env: Environment, message: str) -> EnvironmentChange:
    view = environment_view(env)
    return EnvironmentChange(**{name: getattr(view, name) for name in view.model_fields_set}, message=message)


class CanaryService(CallerService):
    async def start(self, namespace: str, name: str, body: CanaryStart) -> EnvironmentChange:
        """Start a canary of ``body.version`` at ``body.weight`` percent of new sessions."""
        await self._may_deploy(namespace)
        env = await self.environment(namespace, name)
        active = env.spec.app_version or "draft"
        running = env.spec.canary
        if body.version == active:
            raise ConflictError(
                f"version {body.version} is the active version of {name}: a canary needs another version",
                {"activeVersion": active},
            )
        if running is not None and running.app_version != body.version:
            raise ConflictError(
                f"a canary of version {running.app_version} is running in {name}: promote or abort it first",
                {"canaryVersion": running.app_version, "weight": running.weight},
            )
        await self.repos.app_versions.get(
            namespace,
            f"{env.spec.app_ref}-{body.version}",
            missing=f"app {env.spec.app_ref!r} has no version {body.version} (body.version)",
        )
        patched = await self._patch(env, "Start", {"canary": {"appVersion": body.version, "weight": body.weight}})
        return _changed(
            patched,
            f"canary of version {body.version} started in {name}: {body.weight}% of new sessions start on it, "
            f"the others on {active}; every session stays on the version it started on",
        )

    async def weight(self, namespace: str, name: str, body: CanaryWeight) -> EnvironmentChange:
        await self._may_deploy(namespace)
        env = await self.environment(namespace, name)
        running = self._running(env, name)
        patched = await self._patch(
            env, "Weight", {"canary": {"appVersion": running.app_version, "weight": body.weight}}
        )
        return _changed(
            patched, f"canary of version {running.app_version} in {name}: now {body.weight}% of new sessions"
        )

    async def promote(self, namespace: str, name: str) -> EnvironmentChange:
        """Make the canary's version the active one (every new session starts on it)."""
        await self._may_deploy(namespace)
        env = await self.environment(namespace, name)
        running = self._running(env, name)
        extra = {DEPLOY_REQUEST_ANNOTATION: f"Promote {uuid.uuid4().hex}"}
        patched = await self._patch(env, "Promote", {"canary": None, "appVersion": running.app_version}, extra)
        return _changed(
            patched,
            f"version {running.app_version} promoted in {name}: every new session starts on it (a history entry "
            "with action Promote); sessions that started on the previous version keep it",
        )

    async def abort(self, namespace: str, name: str) -> EnvironmentChange:
        """End the canary: new sessions start on the active version again."""
        await self._may_deploy(namespace)
        env = await self.environment(namespace, name)
        running = self._running(env, name)
        patched = await self._patch(env, "Abort", {"canary": None})
        return _changed(
            patched,
            f"canary of version {running.app_version} aborted in {name}: new sessions start on "
            f"{env.spec.app_version or 'draft'}; sessions that started on the canary keep it",
        )

    def _running(self, env: Environment, name: str) -> Any:
        if env.spec.canary is None:
            raise ConflictError(f"no canary is running in {name}: start one first", {"environment": name})
        return env.spec.canary

    async def _may_deploy(self, namespace: str) -> None:
        await self.auth.require(
            self.user, verb="create", namespace=namespace, resource="environments", subresource="deploy"
        )

    async def _patch(
        self, env: Environment, action: str, spec: dict[str, Any], extra: dict[str, str] | None = None
    ) -> Environment:
        notes = {
            CANARY_REQUEST_ANNOTATION: f"{action} {uuid.uuid4().hex}",
            CANARY_BY_ANNOTATION: self.user.username,
            **(extra or {}),
            **requestid.as_annotation(),
        }
        namespace, name = env.metadata.namespace, env.metadata.name
        if name is None or namespace is None:
            raise InvalidError("the environment has no name")
        change = {"metadata": {"annotations": notes}, "spec": spec}
        for attempt in range(5):
            try:  # guarded: the checks above were made on this version of the object
                return await self.repos.environments.merge(
                    namespace, name, change, resource_version=env.metadata.resource_version
                )
            except ConflictError:
                now = await self.environment(namespace, name)
                asked = (env.spec.app_version, env.spec.canary)
                if attempt == 4 or (now.spec.app_version, now.spec.canary) != asked:
                    raise ConflictError(
                        f"the canary or the version of {name} changed meanwhile: look again and repeat",
                        {"environment": name},
                    ) from None
                env = now  # only its status moved on (the operator, the SLO watcher): the checks still hold
        raise AssertionError("unreachable")
