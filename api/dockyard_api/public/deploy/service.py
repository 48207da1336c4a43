"""The public deploys (docs/public-api.md, 'Deploy a model', 'Deploy a tool'): the rules and the Kubernetes
writes behind ``POST /api/public/models/{modelId}/deploy`` and ``POST /api/public/tools/{toolId}/deploy``.

Each call starts a NEW dock job: the facade writes a new ``dockyard.dev/dock-status-id`` label on the
ModelDeployment / ToolDeployment it creates or updates, the operator starts the job with that id
(status.job), and ``GET /api/public/dock-status/{id}`` follows it. Nothing is kept in the facade.

Model deploy, per call: one read of the Model (from the watch-fed cache when it shows the Model
ReadyToDeploy, else from the API server) and one create (or, for an existing deployment, one read and
one patch) of the ModelDeployment. The ModelDeployment is owned by the caller's Environment (its uid
comes with the API key), so deleting the environment releases it; the Model stays (it belongs to the
namespace). Every Kubernetes call goes through core's typed repositories, which map the API server's
refusals to domain errors; the rules here only decide what a missing or existing object means.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, NoReturn

from dockyard_api.auth import EnvironmentCaller
from dockyard_api.cache import Informer
from dockyard_api.public.schemas import ModelDeployBody, ToolDeployBody
from dockyard_api.settings import ApiSettings
from dockyard_core import apikeys, requestid
from dockyard_core.adapters import BaseNotResolved, resolve_base
from dockyard_core.errors import ConflictError, InvalidRequestError, NotFoundError
from dockyard_core.jobs import NOT_REPORTED, JobRecord
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.modelformats import Refusal, adapter_refusal, engine_for
from dockyard_core.repository import Repository
from dockyard_core.resources.v1alpha1 import (
    API_VERSION,
    APP_LABEL,
    DOCK_STATUS_ID_LABEL,
    Environment,
    Model,
    ModelDeployment,
    ModelType,
    OptimizationInfo,
    Tool,
    ToolDeployment,
)
from dockyard_core.resources.v1alpha1.tool import tool_deployment_name

REQUESTED_BY_ANNOTATION = "dockyard.dev/requested-by"
"""Who asked for the latest deployment through the public API: the API key's prefix and its environment."""
READY_TO_DEPLOY = "ReadyToDeploy"
PENDING_MESSAGE = "deployment requested; poll GET {base_url}/api/public/dock-status/{dockStatusId}"


def requested_by(caller: EnvironmentCaller) -> str:
    return f"{apikeys.display_prefix(caller.key_id)} (environment {caller.environment})"


def _job_metadata(caller: EnvironmentCaller, job_id: str) -> dict[str, Any]:
    """The labels and annotations of a deployment that a public call asks for: the new job's id, who asked,
    the request id."""
    return {
        "labels": {DOCK_STATUS_ID_LABEL: job_id},
        "annotations": {REQUESTED_BY_ANNOTATION: requested_by(caller), **requestid.as_annotation()},
    }


class DeployService:
    """Model and tool deploys of the public API, for one caller's request."""

    def __init__(self, kube: AsyncKube, settings: ApiSettings, models_cache: Informer | None = None) -> None:
        self.settings = settings
        self.cache = models_cache
        self.models = Repository(kube, Model)
        self.model_deployments = Repository(kube, ModelDeployment)
        self.tools = Repository(kube, Tool)
        self.tool_deployments = Repository(kube, ToolDeployment)
        self.environments = Repository(kube, Environment)

    async def _owner(self, caller: EnvironmentCaller) -> dict[str, Any]:
        """The caller's Environment as an owner: deleting the environment releases (garbage-collects) what
        its public API deployed. A deployment made through several environments goes with the last of them."""
        uid = caller.environment_uid
        if not uid:  # a key Secret that names no owner: read the environment
            env = await self.environments.get(
                caller.namespace,
                caller.environment,
                missing=f"environment {caller.environment!r} no longer exists",
            )
            uid = env.metadata.uid or ""
        return {"apiVersion": API_VERSION, "kind": "Environment", "name": caller.environment, "uid": uid,
                "blockOwnerDeletion": False}  # fmt: skip

    # --- model deploy ---------------------------------------------------------------------------------

    async def deploy_model(
        self, caller: EnvironmentCaller, model_id: str, model_type: ModelType, body: ModelDeployBody
    ) -> JobRecord:
        """Create or update the ModelDeployment of ``body.name`` (named ``body.object_name``, derived from it)
        of a ReadyToDeploy model; the new job, pending.

        ``isDeployedPreviously`` false: a new deployment, or an update of this model's deployment of that
        name (409 when the name serves another model); true: a redeploy of an existing deployment (404
        when there is none)."""
        namespace = caller.namespace
        model = await self.check_model(namespace, model_id, model_type)
        base = await self.base_of(namespace, model, body.base_model)
        check_runtime(base or model, body.optimization_info)
        if base is not None:
            check_adapter(model, base)
            check_base_ready(base)
            await self._bind_base(namespace, model, base)
        spec = body.to_spec(model_id, model_type)
        job_id = str(uuid.uuid4())
        metadata = _job_metadata(caller, job_id)
        owner = await self._owner(caller)
        name = body.object_name
        if not body.is_deployed_previously:
            manifest = {
                "apiVersion": API_VERSION,
                "kind": "ModelDeployment",
                "metadata": {"name": name, **metadata, "ownerReferences": [owner]},
                "spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True),
            }
            try:
                created = await self.model_deployments.create(manifest, namespace)
                return JobRecord.pending_on(created, job_id, PENDING_MESSAGE)
            except ConflictError:  # it exists: update it (below)
                pass
        # an existing deployment: check it is this name's and serves this model, then replace its spec
        # (spec.replicas, which the autoscaler and kubectl scale own, stays)
        existing = await self.model_deployments.find(namespace, name)
        if existing is None:
            if body.is_deployed_previously:
                raise NotFoundError(
                    f"no model deployment {body.name!r} to redeploy (isDeployedPreviously is true); "
                    "send isDeployedPreviously: false to create it",
                    {"name": body.name, "deploymentName": name},
                )
            raise ConflictError(f"model deployment {body.name!r} was deleted meanwhile; retry")
        check_same_deployment(existing, body.name, model_id)
        if existing.metadata.deletion_timestamp:
            raise ConflictError(f"model deployment {body.name!r} is being deleted; retry when it is gone")
        owners = existing.metadata.owner_references or []
        if all(o.get("uid") != owner["uid"] for o in owners):  # deployed through one more environment
            metadata = {**metadata, "ownerReferences": [*owners, owner]}
        patch = {"metadata": metadata, "spec": spec.model_dump(mode="json", by_alias=True, exclude={"replicas"})}
        try:
            patched = await self.model_deployments.merge(namespace, name, patch)
        except NotFoundError as exc:
            raise ConflictError(f"model deployment {body.name!r} was deleted meanwhile; retry") from exc
        return JobRecord.pending_on(patched, job_id, PENDING_MESSAGE)

    async def check_model(self, namespace: str, model_id: str, model_type: str) -> Model:
        """The Model; 404 for an unknown model, 409 unless it is ReadyToDeploy, 422 when modelType
        contradicts it."""
        model = self.cache.cached_as(namespace, model_id, Model) if self.cache is not None else None
        if model is None or model.status.phase != READY_TO_DEPLOY:
            model = await self.models.find(namespace, model_id)
            if model is None:
                raise NotFoundError(f"model {model_id!r} not found", {"modelId": model_id})
        phase = model.status.phase
        if phase != READY_TO_DEPLOY:
            shown = phase or "not assessed yet"
            raise ConflictError(
                f"model {model_id!r} is {shown}, not ReadyToDeploy: only a model in the Ready to Deploy state can "
                "be deployed",
                {"modelId": model_id, "phase": phase},
            )
        declared = model.spec.model_type
        if declared and declared != model_type:
            why = f"must be {declared}: model {model_id!r} is {declared}"
            raise InvalidRequestError(
                f"the request is not valid: query.modelType: {why}", [{"field": "query.modelType", "message": why}]
            )
        return model

    async def base_of(self, namespace: str, model: Model, explicit: str | None) -> Model | None:
        """An adapter's base Model (None for a model that is not an adapter): ``explicit`` (the body's
        baseModel), else spec.baseModel, else the one Model that adapter_config.json's
        base_model_name_or_path names (:func:`dockyard_core.adapters.resolve_base`); 422 naming
        body.baseModel when there is none, 409 when baseModel contradicts spec.baseModel (set once)."""
        model_id = model.metadata.name or ""
        if not model.spec.is_adapter:
            if explicit:
                _refuse("baseModel", f"model {model_id!r} is not an adapter: baseModel applies only to adapters")
            return None
        bound = model.spec.base_model
        if explicit and bound and explicit != bound:
            raise ConflictError(
                f"adapter {model_id!r} is served on base model {bound!r} (its spec.baseModel, which is set once): "
                f"send baseModel {bound!r} or leave it out",
                {"field": "body.baseModel", "baseModel": bound},
            )
        name = explicit or bound
        if name:
            base = await self.models.find(namespace, name)
            if base is None:
                _refuse("baseModel", f"no model {name!r} in this namespace to serve adapter {model_id!r} on")
            elif base.spec.is_adapter:
                _refuse(
                    "baseModel", f"model {name!r} is itself an adapter; name the model adapter {model_id!r} applies to"
                )
            return base
        named = model.status.adapter.base_model_name_or_path if model.status.adapter is not None else None
        if not named:
            _refuse(
                "baseModel",
                f"adapter {model_id!r} names no base model (no spec.baseModel, and its adapter_config.json has no "
                "base_model_name_or_path): send baseModel, the modelId of the model to serve it on",
            )
        models = await self.models.select(namespace)
        try:
            found = resolve_base(str(named), models)
        except BaseNotResolved as exc:
            _refuse("baseModel", f"{exc.message} with baseModel", candidates=exc.candidates, adapterConfig=named)
        return next(m for m in models if m.metadata.name == found)

    async def _bind_base(self, namespace: str, model: Model, base: Model) -> None:
        """Set the adapter's spec.baseModel (once: the API server refuses a change), so that kubectl
        describe and the operator show which Model it is served on."""
        if model.spec.base_model:
            return
        await self.models.merge(namespace, model.metadata.name or "", {"spec": {"baseModel": base.metadata.name}})

    # --- tool deploy ----------------------------------------------------------------------------------

    async def deploy_tool(self, caller: EnvironmentCaller, tool_id: str, body: ToolDeployBody) -> JobRecord:
        """Create or update the environment's ToolDeployment of this tool version; the new job, pending
        (``isAsync``) or as it ended (else, bounded by the facade's sync deploy timeout)."""
        tool = await self.tools.find(caller.namespace, tool_id)
        if tool is None:
            raise NotFoundError(f"tool {tool_id!r} not found", {"toolId": tool_id})
        name = tool_deployment_name(caller.environment, tool.spec.name, tool.spec.version)
        job_id = str(uuid.uuid4())
        metadata = _job_metadata(caller, job_id)
        obj = await self._update_tool_deployment(caller.namespace, name, metadata, body.is_async)
        if obj is None:
            obj = await self._create_tool_deployment(caller, name, tool_id, metadata, body.is_async)
        if obj.spec.tool_ref != tool_id:
            raise ConflictError(
                f"tool deployment {name!r} deploys {obj.spec.tool_ref!r}, not {tool_id!r}", {"name": name}
            )
        if body.is_async:
            return JobRecord.pending_on(obj, job_id, PENDING_MESSAGE)
        return await self._wait_for_job(obj, job_id)

    async def _update_tool_deployment(
        self, namespace: str, name: str, metadata: dict[str, Any], is_async: bool
    ) -> ToolDeployment | None:
        """Label the existing ToolDeployment with the new job; None when there is none."""
        patch = {"metadata": metadata, "spec": {"isAsync": is_async}}
        try:
            return await self.tool_deployments.merge(namespace, name, patch)
        except NotFoundError:
            return None

    async def _create_tool_deployment(
        self, caller: EnvironmentCaller, name: str, tool_id: str, metadata: dict[str, Any], is_async: bool
    ) -> ToolDeployment:
        """A ToolDeployment owned by the caller's Environment (deleted with it). It does not carry the
        environment label: the environment's own reconciler manages only the tools of its deployed version,
        and adopts this object (same name) if a later version includes the tool."""
        owner = await self._owner(caller)
        labels = {**metadata["labels"], APP_LABEL: caller.app, "app.kubernetes.io/managed-by": "dockyard"}
        manifest = {
            "apiVersion": API_VERSION,
            "kind": "ToolDeployment",
            "metadata": {**metadata, "name": name, "labels": labels, "ownerReferences": [owner]},
            "spec": {"toolRef": tool_id, "isAsync": is_async},
        }
        try:
            return await self.tool_deployments.create(manifest, caller.namespace)
        except ConflictError:
            pass
        # created by someone else in between (another call, the environment): label that one
        again = await self._update_tool_deployment(caller.namespace, name, metadata, is_async)
        if again is None:
            raise ConflictError(f"tool deployment {name!r} changed concurrently; retry")
        return again

    async def _wait_for_job(self, obj: ToolDeployment, job_id: str) -> JobRecord:
        """Poll the object until its job ``job_id`` is SUCCESS or FAILED, at most the sync deploy timeout."""
        namespace, name = obj.metadata.namespace or "", obj.metadata.name or ""
        timeout = self.settings.sync_deploy_timeout_seconds
        deadline = time.monotonic() + timeout
        while True:
            job = obj.status.job
            started = job is not None and job.dock_status_id == job_id
            superseded = (obj.metadata.labels or {}).get(DOCK_STATUS_ID_LABEL) != job_id and not started
            if superseded:
                return JobRecord.pending_on(
                    obj, job_id, "a newer deployment of this tool replaced this job before it started"
                )
            if started and job is not None and job.status in ("SUCCESS", "FAILED"):
                return JobRecord.of(obj)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                waited = f"still IN_PROGRESS after {timeout:g}s (the synchronous bound)"
                hint = "poll GET {base_url}/api/public/dock-status/{dockStatusId}"
                if started and job is not None:
                    return JobRecord.of(obj).model_copy(update={"message": f"{waited}: {job.message}; {hint}"})
                return JobRecord.pending_on(obj, job_id, f"{waited}: {NOT_REPORTED}; {hint}")
            await asyncio.sleep(min(self.settings.sync_deploy_poll_seconds, remaining))
            found = await self.tool_deployments.find(namespace, name)
            if found is None:
                raise ConflictError(f"tool deployment {name!r} was deleted while deploying")
            obj = found


def check_same_deployment(existing: ModelDeployment, name: str, model_id: str) -> None:
    """409 unless the existing ModelDeployment is the deployment of the deploy call's ``name`` and serves
    ``model_id``. Its object name was derived from ``name``; it is that name's deployment when its spec.name
    is ``name``, or when ``name`` is the object's own name (a deployment made with kubectl, whose spec.name
    may differ). So two names whose derived object names meet never update each other's deployment."""
    object_name = existing.metadata.name or ""
    shown = existing.spec.name
    if shown != name and object_name != name:
        raise ConflictError(
            f"the name {name!r} maps to the object {object_name!r}, which is the deployment named {shown!r}: "
            "choose another name",
            {"name": shown, "deploymentName": object_name},
        )
    current_model = existing.spec.model_ref
    if current_model != model_id:
        raise ConflictError(
            f"the name {name!r} is taken by the deployment of model {current_model!r}: choose another "
            f"name for model {model_id!r}",
            {"name": name, "modelId": current_model},
        )


def _refuse(field: str, message: str, **details: Any) -> NoReturn:
    """422 naming ``body.<field>``."""
    raise InvalidRequestError(
        f"the request is not valid: body.{field}: {message}",
        [{"field": f"body.{field}", "message": message, **details}],
    )


def check_base_ready(base: Model) -> None:
    """409 naming baseModel unless the base can be served now (ReadyToDeploy, or a hub model), like the
    model itself: nothing is bound or created for a base still importing."""
    phase = base.status.phase
    if phase != READY_TO_DEPLOY and not (base.spec.source.hub is not None and phase != "Failed"):
        name = base.metadata.name
        raise ConflictError(
            f"base model {name!r} is {phase or 'not assessed yet'}, not ReadyToDeploy: deploy the adapter once it is",
            {"field": "body.baseModel", "baseModel": name, "phase": phase},
        )


def check_adapter(adapter: Model, base: Model) -> None:
    """422 naming body.baseModel when no engine serves this adapter on this base (e.g. a PEFT safetensors
    adapter on a GGUF base: llama.cpp loads GGUF LoRA adapters only; docs/runtimes.md)."""
    formats = [m.status.storage.format if m.status.storage else None for m in (base, adapter)]
    if why := adapter_refusal(formats[0], formats[1]):
        _refuse("baseModel", why, baseModel=base.metadata.name, baseFormat=formats[0], adapterFormat=formats[1])


def check_runtime(model: Model, info: OptimizationInfo | None) -> None:
    """422 naming the field when no engine can serve the model's format with this optimizationInfo
    (e.g. a GGUF model with optimizationType ctranslate2; docs/runtimes.md). For an adapter, ``model`` is
    its base."""
    model_format = model.status.storage.format if model.status.storage else None
    try:
        engine_for(model_format, info.optimization_type if info else "", info.quantization_type if info else "")
    except Refusal as exc:
        field = f"body.{exc.field}"
        raise InvalidRequestError(
            f"the request is not valid: {field}: {exc.message}",
            [{"field": field, "message": exc.message, "modelFormat": model_format}],
        ) from exc
