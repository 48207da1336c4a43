"""Bodies of the public deploy endpoints and the job record they answer with (docs/public-api.md, 'Deploy a
model', 'Deploy a tool').

The model-deploy body is made of the ModelDeployment resource's own types (HyperParameters,
ScalingParameters, OptimizationInfo, DeviceType): the facade checks exactly the limits the CRD
enforces, from one declaration. Only ``name`` differs: it also names the ModelDeployment object, so it
must be a DNS-1123 label (a Kubernetes object name that is also a valid label value).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, WithJsonSchema

from dockyard_core.resources.base import DockyardModel
from dockyard_core.resources.v1alpha1 import (
    HyperParameters,
    ModelDeploymentSpec,
    OptimizationInfo,
    ScalingParameters,
)
from dockyard_core.resources.v1alpha1.common import DNS_LABEL_PATTERN, DeviceType, ModelType

_DNS_LABEL = re.compile(DNS_LABEL_PATTERN)
NAME_RULE = (
    "a DNS-1123 label: 1 to 63 lower-case letters, digits and '-', starting and ending with a letter or digit "
    "(it names the ModelDeployment object)"
)


def _deployment_name(value: str) -> str:
    if not (len(value) <= 63 and _DNS_LABEL.match(value)):
        raise ValueError(f"name must be {NAME_RULE}, e.g. llama-3-8b-instruct")
    return value


DeploymentName = Annotated[
    str,
    AfterValidator(_deployment_name),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": 63,
            "pattern": DNS_LABEL_PATTERN,
            "description": f"Name of the model deployment: {NAME_RULE}. Deploying again with the same name "
            "updates that deployment.",
        }
    ),
]

MODEL_DEPLOY_SAMPLE: dict[str, Any] = {
    "name": "llama-3-8b-instruct",
    "isDeployedPreviously": False,
    "hyperParameters": {"temperature": 0.7, "maxTokens": 512, "topP": 0.9, "topK": 50, "stopSequence": []},
    "scalingParameters": {
        "maxBatchSize": 16,
        "minReplicas": 1,
        "maxReplicas": 2,
        "scaleUpDelay": 300,
        "scaleDownDelay": 600,
    },
    "deviceType": "g5.xlarge",
    "optimizationInfo": {"optimizationType": "", "quantizationType": ""},
}
"""The published sample body with every field, as sent (docs/public-api.md, 'Deploy a model'): empty
optimization strings (= default)."""

MODEL_DEPLOY_EXAMPLES: dict[str, dict[str, Any]] = {
    "spec-sample": {
        "summary": "Every field, as the published sample sends them (empty optimization strings: the defaults)",
        "value": MODEL_DEPLOY_SAMPLE,
    },
    "minimal": {
        "summary": "Only the required fields: one replica, the runtime's sampling defaults",
        "value": {"name": "llama-3-8b-instruct", "deviceType": "g5.xlarge"},
    },
    "redeploy": {
        "summary": "Redeploy an existing deployment on bigger GPUs with vLLM (isDeployedPreviously: true)",
        "value": {
            "name": "llama-3-8b-instruct",
            "isDeployedPreviously": True,
            "deviceType": "g5.12xlarge",
            "scalingParameters": {"minReplicas": 2, "maxReplicas": 4},
            "optimizationInfo": {"optimizationType": "vllm", "quantizationType": "no_quantization"},
        },
    },
}

TOOL_DEPLOY_EXAMPLES: dict[str, dict[str, Any]] = {
    "synchronous": {"summary": "Wait for SUCCESS or FAILED", "value": {"isAsync": False}},
    "asynchronous": {"summary": "Answer at once with IN_PROGRESS; poll the dock status", "value": {"isAsync": True}},
}

_JOB_ID = "9f1c2b7e-3d4a-4c8e-9b1f-6a2d5e7c8b90"
MODEL_DEPLOY_RESPONSE_EXAMPLES: dict[str, dict[str, Any]] = {
    "in-progress": {
        "summary": "The deployment started (IN_PROGRESS, action DEPLOY)",
        "value": {
            "dockStatusId": _JOB_ID,
            "dock-statusId": _JOB_ID,
            "modelId": "llama-3-8b-instruct",
            "jobType": "MODELS",
            "action": "DEPLOY",
            "status": "IN_PROGRESS",
            "reason": "Pending",
            "message": "deployment requested; poll GET {base_url}/api/public/dock-status/{dockStatusId}",
            "startTime": None,
            "completionTime": None,
            "deploymentName": "llama-3-8b-instruct",
        },
    }
}

_TOOL_JOB_ID = "2c6d8e1f-7a9b-4d3c-8e5f-1b2a3c4d5e6f"
TOOL_DEPLOY_RESPONSE_EXAMPLES: dict[str, dict[str, Any]] = {
    "success": {
        "summary": "isAsync false: the tool is deployed (SUCCESS)",
        "value": {
            "dockStatusId": _TOOL_JOB_ID,
            "dock-statusId": _TOOL_JOB_ID,
            "toolId": "weather-1.2.0",
            "jobType": "TOOLS",
            "action": "DEPLOY",
            "status": "SUCCESS",
            "reason": "Available",
            "message": "1 replica(s) ready and serving",
            "startTime": "2025-01-01T12:00:00Z",
            "completionTime": "2025-01-01T12:00:09Z",
            "deploymentName": "support-bot-production-weather-1-2-0",
        },
    },
    "in-progress": {
        "summary": "isAsync true: the deployment started",
        "value": {
            "dockStatusId": _TOOL_JOB_ID,
            "dock-statusId": _TOOL_JOB_ID,
            "toolId": "weather-1.2.0",
            "jobType": "TOOLS",
            "action": "DEPLOY",
            "status": "IN_PROGRESS",
            "reason": "Pending",
            "message": "deployment requested; poll GET {base_url}/api/public/dock-status/{dockStatusId}",
            "startTime": None,
            "completionTime": None,
            "deploymentName": "support-bot-production-weather-1-2-0",
        },
    },
    "failed": {
        "summary": "isAsync false: the deployment failed, with its reason",
        "value": {
            "dockStatusId": _TOOL_JOB_ID,
            "dock-statusId": _TOOL_JOB_ID,
            "toolId": "weather-1.2.0",
            "jobType": "TOOLS",
            "action": "DEPLOY",
            "status": "FAILED",
            "reason": "ImagePullError",
            "message": "the image cannot be pulled (ImagePullBackOff): "
            'Back-off pulling image "registry.example.com/tools/weather:1.2.0"',
            "startTime": "2025-01-01T12:00:00Z",
            "completionTime": "2025-01-01T12:00:31Z",
            "deploymentName": "support-bot-production-weather-1-2-0",
        },
    },
}


class ModelDeployBody(DockyardModel):
    """Body of POST {base_url}/api/public/models/{modelId}/deploy.

    Every member is a field of :class:`ModelDeploymentSpec` with the resource's type, so the limits are
    the CRD's (tests/unit/api/test_public_openapi.py keeps it so; ``name`` is stricter: it names the object,
    and ``scalingParameters`` may be absent); :meth:`to_spec` carries them over by name. Unknown fields
    are refused (a misspelt ``maxtokens`` is an error, not a silent default).
    """

    name: DeploymentName
    """Name of the model deployment (and of the ModelDeployment object)."""
    is_deployed_previously: StrictBool = False
    """false (default): a new deployment, or an update of a deployment of the SAME model with this name
    (a retry is harmless); 409 when the name is taken by a deployment of another model. true: a
    redeploy: a deployment with this name must exist (404 otherwise) and serve this model (409)."""
    hyper_parameters: HyperParameters | None = None
    """Default sampling settings; absent: the runtime's defaults."""
    scaling_parameters: ScalingParameters | None = None
    """Replica bounds, batch size and autoscaling delays; absent or partial: the defaults."""
    device_type: DeviceType
    """GPU instance type the model runs on."""
    optimization_info: OptimizationInfo | None = None
    """Serving runtime and quantization; empty strings or absent: the runtime catalog's defaults."""

    def to_spec(self, model_ref: str, model_type: ModelType) -> ModelDeploymentSpec:
        """The ModelDeployment's spec for this body: every member by name (an absent member keeps the
        spec's default)."""
        given = {name: getattr(self, name) for name in type(self).model_fields}
        fields = {name: value for name, value in given.items() if value is not None}
        return ModelDeploymentSpec(model_ref=model_ref, model_type=model_type, **fields)


class ToolDeployBody(DockyardModel):
    """Body of POST {base_url}/api/public/tools/{toolId}/deploy."""

    is_async: StrictBool
    """true: answer at once (IN_PROGRESS); false: wait until the deployment is SUCCESS or FAILED (bounded by
    the facade's sync_deploy_timeout_seconds; after it the answer is IN_PROGRESS with a message)."""


class JobRecord(BaseModel):
    """The job record, with both spellings of the id, as every job answer carries."""

    model_config = ConfigDict(populate_by_name=True)

    dock_status_id: str = Field(alias="dockStatusId", description="identifier of the job")
    dock_status_id_sample_spelling: str = Field(
        alias="dock-statusId", description="the same identifier, spelt as the published sample responses spell it"
    )
    model_id: str | None = Field(default=None, alias="modelId", description="present for model jobs")
    tool_id: str | None = Field(default=None, alias="toolId", description="present for tool jobs")
    job_type: str = Field(alias="jobType", description="MODELS or TOOLS")
    action: str = Field(description="DEPLOY for deployments, EXPORT for an import completion")
    status: str = Field(description="IN_PROGRESS, SUCCESS or FAILED")
    reason: str = Field(default="", description="CamelCase reason of the status, e.g. Available, NoFittingNode")
    message: str = Field(default="", description="human explanation of the status")
    start_time: str | None = Field(default=None, alias="startTime")
    completion_time: str | None = Field(default=None, alias="completionTime")
    deployment_name: str | None = Field(
        default=None, alias="deploymentName", description="the ModelDeployment / ToolDeployment the job acts on"
    )


class ErrorDetail(BaseModel):
    code: str = Field(description="machine-readable error code, e.g. invalid_request, not_found, conflict")
    message: str = Field(description="what is wrong, naming the field or object")
    details: Any = Field(default=None, description="e.g. [{field, message}] for a 422")


class ErrorBody(BaseModel):
    """Every 4xx answer: ``{"error": {"code", "message", "details"}}``."""

    error: ErrorDetail


ERROR_MEANINGS = {
    401: "no API key, or an unknown or revoked one",
    403: "an API key of another environment",
    404: "unknown model, tool, deployment or job",
    409: "the request contradicts the current state (model not ReadyToDeploy, name taken, chunks missing, "
    "a chunk re-sent with other bytes)",
    410: "the import session expired",
    413: "a chunk larger than the maximum chunk size, or a JSON body larger than 1 MiB (configurable)",
    422: "invalid path, query or body: the message and details name each field",
    503: "the Kubernetes API server is unavailable (restarting, or no answer in time): retry after Retry-After",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for error answers (all in the one error shape)."""
    return {code: {"model": ErrorBody, "description": ERROR_MEANINGS[code]} for code in codes}


def ok_responses(example: dict[str, Any], description: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entry for a 200 answer with one example."""
    return {
        200: {"description": description, "content": {"application/json": {"examples": {"sample": {"value": example}}}}}
    }


def job_responses(examples: dict[str, dict[str, Any]], description: str) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entry for a 200 job record, with named examples."""
    return {
        200: {"model": JobRecord, "description": description, "content": {"application/json": {"examples": examples}}}
    }
