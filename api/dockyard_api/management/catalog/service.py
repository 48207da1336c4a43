"""What exists to pick from and to watch: the agent versions an App has used, the tool versions (Tools)
of a namespace, and the Models, ModelDeployments and ToolDeployments with their dock status, read as
the calling Kubernetes user. The console's pickers and its Models and tools page read these.

:class:`CatalogService` reads, and sets an adapter's base model (once, :meth:`CatalogService.choose_base_model`),
with core's repositories acting as the caller, so RBAC decides and it needs no authenticator:
``CatalogService(repos)`` (:mod:`dockyard_api.management.base` for the other services).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

from dockyard_api.management.schemas import (
    AgentVersionList,
    AgentVersionView,
    ModelDeploymentList,
    ModelDeploymentView,
    ModelList,
    ModelView,
    ReadyView,
    ToolDeploymentList,
    ToolDeploymentView,
    ToolList,
    ToolView,
)
from dockyard_core.errors import ConflictError, InvalidRequestError
from dockyard_core.jobs import JobRecord, JobTarget
from dockyard_core.modelformats import adapter_refusal
from dockyard_core.repository import Repositories
from dockyard_core.resources.v1alpha1 import (
    ENVIRONMENT_LABEL,
    READY,
    Agent,
    Model,
    ModelDeployment,
    Tool,
    ToolDeployment,
)
from dockyard_core.resources.v1alpha1.common import Resource, StatusBase
from dockyard_core.resources.v1alpha1.common import semver_key as _semver


def _job(obj: JobTarget) -> JobRecord | None:
    """The object's current job as the one job record (dockyard_core.jobs), None before its first."""
    return JobRecord.of(obj) if obj.status.job else None


def _ready(status: StatusBase) -> ReadyView | None:
    for cond in status.conditions:
        if cond.type == READY:
            return ReadyView(status=cond.status, reason=cond.reason, message=cond.message)
    return None


def _refuse(message: str) -> NoReturn:
    raise InvalidRequestError(
        f"the request is not valid: baseModel: {message}", [{"field": "baseModel", "message": message}]
    )


def _name(obj: Resource) -> str:
    return obj.metadata.name or ""


def tool_view(tool: Tool) -> ToolView:
    spec = tool.spec
    return ToolView(
        tool_id=_name(tool),
        name=spec.name,
        version=spec.version,
        description=spec.description,
        kind="image" if spec.container else "endpoint",
        image=spec.container.image if spec.container else None,
        endpoint=spec.endpoint,
        mcp=bool(spec.mcp),
        created_at=tool.metadata.creation_timestamp,
    )


def model_view(model: Model) -> ModelView:
    spec, st = model.spec, model.status
    source = spec.source
    return ModelView(
        model_id=_name(model),
        model_type=spec.model_type,
        source="hub" if source.hub else "upload" if source.upload else None,
        phase=st.phase,
        format=st.storage.format if st.storage else None,
        size_bytes=(st.storage.size_bytes if st.storage else None)
        or (source.upload.file_size if source.upload else None),
        job=_job(model),
        ready=_ready(st),
        is_adapter=spec.is_adapter,
        base_model=spec.base_model,
        adapter_base=st.adapter.base_model_name_or_path if st.adapter else None,
    )


def model_deployment_view(deployment: ModelDeployment) -> ModelDeploymentView:
    spec, st = deployment.spec, deployment.status
    return ModelDeploymentView(
        name=_name(deployment),
        display_name=spec.name,
        model_ref=spec.model_ref,
        device_type=spec.device_type,
        replicas=st.replicas,
        ready_replicas=st.ready_replicas,
        job=_job(deployment),
        ready=_ready(st),
    )


def tool_deployment_view(deployment: ToolDeployment) -> ToolDeploymentView:
    st = deployment.status
    return ToolDeploymentView(
        name=_name(deployment),
        tool_ref=deployment.spec.tool_ref,
        environment=(deployment.metadata.labels or {}).get(ENVIRONMENT_LABEL),
        device_type=None,  # tools run on CPU nodes: a ToolDeployment names no device type
        replicas=st.replicas,
        ready_replicas=st.ready_replicas,
        job=_job(deployment),
        ready=_ready(st),
    )


def agent_versions(draft: Sequence[Agent], versions: Iterable[tuple[str, Sequence[Agent]]]) -> list[AgentVersionView]:
    """Every (agent, version) pair the App's draft or one of its versions (``(version, agents)``) holds,
    newest versions of an agent last; each with its configuration (the one a version pins) and where it
    is found."""
    found: dict[tuple[str, str], AgentVersionView] = {}
    for where, agents in [("draft", draft), *versions]:
        for agent in agents:
            key = (agent.name, agent.version)
            entry = found.setdefault(key, AgentVersionView(name=key[0], version=key[1], agent=agent, found_in=[]))
            entry.found_in.append(where)
    return sorted(found.values(), key=lambda e: (e.name, _version_key(e.version)))


def _version_key(version: str) -> tuple[Any, ...]:
    try:
        return (0, *_semver(version))
    except ValueError:
        return (1, version)


class CatalogService:
    """The catalog of one caller's namespaces."""

    def __init__(self, repos: Repositories) -> None:
        self.repos = repos

    async def list_agent_versions(self, namespace: str, app: str) -> AgentVersionList:
        draft = await self.repos.apps.get(namespace, app)
        versions = await self.repos.app_versions.select(namespace, fields={"spec.appRef": app})
        return AgentVersionList(
            items=agent_versions(draft.spec.agents, [(v.spec.version, v.spec.agents) for v in versions])
        )

    async def list_tools(self, namespace: str) -> ToolList:
        found = (tool_view(t) for t in await self.repos.tools.select(namespace))
        return ToolList(items=sorted(found, key=lambda t: (t.name, _version_key(t.version))))

    async def list_models(self, namespace: str) -> ModelList:
        found = (model_view(m) for m in await self.repos.models.select(namespace))
        return ModelList(items=sorted(found, key=lambda m: m.model_id))

    async def choose_base_model(self, namespace: str, model_id: str, base_model: str) -> ModelView:
        """Set an adapter's spec.baseModel (once) as the caller: the Model to serve it on, chosen in the console
        (the public deploy's body and ``dockyard deploy model --base-model`` do the same). 404 for an unknown
        adapter; 422 naming baseModel for a model that is not an adapter, an unknown base, a base that is an
        adapter, or a pair no engine serves; 409 when another base is set already."""
        adapter = await self.repos.models.get(namespace, model_id, missing=f"model {model_id!r} not found")
        if not adapter.spec.is_adapter:
            _refuse(f"model {model_id!r} is not an adapter: only an adapter is served on a base model")
        if adapter.spec.base_model:
            if adapter.spec.base_model != base_model:
                raise ConflictError(
                    f"adapter {model_id!r} is served on {adapter.spec.base_model!r} already (baseModel is set once)",
                    {"field": "baseModel", "baseModel": adapter.spec.base_model},
                )
            return model_view(adapter)
        base = await self.repos.models.find(namespace, base_model)
        if base is None or base.spec.is_adapter:
            _refuse(f"{base_model!r} is {'an adapter' if base else 'no model of this namespace'}: choose a model")
        formats = [m.status.storage.format if m.status.storage else None for m in (base, adapter)]
        if why := adapter_refusal(formats[0], formats[1]):
            _refuse(why)
        return model_view(await self.repos.models.merge(namespace, model_id, {"spec": {"baseModel": base_model}}))

    async def list_model_deployments(self, namespace: str) -> ModelDeploymentList:
        found = (model_deployment_view(d) for d in await self.repos.model_deployments.select(namespace))
        return ModelDeploymentList(items=sorted(found, key=lambda d: d.name))

    async def list_tool_deployments(self, namespace: str) -> ToolDeploymentList:
        found = (tool_deployment_view(d) for d in await self.repos.tool_deployments.select(namespace))
        return ToolDeploymentList(items=sorted(found, key=lambda d: d.name))
