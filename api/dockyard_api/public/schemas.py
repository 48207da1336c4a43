"""The public API's request bodies and answers (docs/public-api.md): the deploy bodies ('Deploy a model',
'Deploy a tool'), the job record every job answer is (:class:`dockyard_core.jobs.JobRecord`, re-exported
here), the import session's answers ('Chunked model import'), the model files' manifest and the one error
shape.

The model-deploy body is made of the ModelDeployment resource's own types (HyperParameters,
ScalingParameters, OptimizationInfo, DeviceType): the facade checks exactly the limits the CRD
enforces, from one declaration. Only ``name`` differs: any text (SPEC.md §4: "name of the model to
deploy"), checked by :func:`~dockyard_core.resources.v1alpha1.modeldeployment.check_display_name`; the
ModelDeployment object's name is derived from it (``model_deployment_name``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, WithJsonSchema, field_validator
from pydantic.alias_generators import to_camel

from dockyard_core.jobs import JobRecord
from dockyard_core.resources.base import DockyardModel
from dockyard_core.resources.v1alpha1 import (
    HyperParameters,
    ModelDeploymentSpec,
    OptimizationInfo,
    ScalingParameters,
)
from dockyard_core.resources.v1alpha1.common import DeviceType, ModelType, ObjectName
from dockyard_core.resources.v1alpha1.modeldeployment import (
    MAX_DISPLAY_NAME_LENGTH,
    check_display_name,
    model_deployment_name,
)
from dockyard_core.upload import sha256_hex

NAME_RULE = (
    "any text of 1 to 253 characters with at least one letter or digit, no control characters and no leading or "
    "trailing whitespace; the ModelDeployment object is named after it (a DNS-1123 label is the object's name, "
    "any other name a lower-case slug of it with a hash)"
)


def _deployment_name(value: str) -> str:
    check_display_name(value)
    return value


DeploymentName = Annotated[
    str,
    AfterValidator(_deployment_name),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_DISPLAY_NAME_LENGTH,
            "description": f"Name of the model to deploy, e.g. Llama 3 8B: {NAME_RULE}. It is also the served "
            "model name. Deploying again with the same name updates that deployment.",
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
    "any-name": {
        "summary": "Any text as the name: the ModelDeployment is named llama-3-8b-<hash> after it",
        "value": {"name": "Llama 3 8B", "deviceType": "g5.xlarge"},
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
    "adapter-on-a-chosen-base": {
        "summary": "An adapter (modelType fineTune) on a base chosen here; without baseModel: the one its "
        "adapter_config.json names",
        "value": {"name": "support", "deviceType": "g5.xlarge", "baseModel": "dockyard-tiny-llama-0b1c2d3e"},
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
            "name": "llama-3-8b-instruct",
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


NOT_SPEC_FIELDS = frozenset({"base_model"})
"""Members of :class:`ModelDeployBody` that are not ModelDeployment spec fields (Dockyard's additions)."""


class ModelDeployBody(DockyardModel):
    """Body of POST {base_url}/api/public/models/{modelId}/deploy.

    Every member but ``baseModel`` (Dockyard's addition, :data:`NOT_SPEC_FIELDS`) is a field of
    :class:`ModelDeploymentSpec` with the resource's type, so the limits are
    the CRD's (tests/unit/api/test_public_openapi.py keeps it so; ``name`` is stricter: no control characters
    or surrounding whitespace, a letter or digit, as the object is named after it; and ``scalingParameters``
    may be absent); :meth:`to_spec` carries them over by name. Unknown fields
    are refused (a misspelt ``maxtokens`` is an error, not a silent default).
    """

    name: DeploymentName
    """Name of the model to deploy (any text, spec.name, the served model name); the ModelDeployment object
    is named after it (:attr:`object_name`)."""
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
    base_model: ObjectName | None = None
    """Dockyard's addition, for an adapter only: the modelId of the Model to serve it on (set once on the
    adapter Model as spec.baseModel). Absent: the adapter's spec.baseModel, else the Model that its
    adapter_config.json's base_model_name_or_path names; 422 naming baseModel when neither resolves."""

    @property
    def object_name(self) -> str:
        """The ModelDeployment object's name: ``name`` itself when it is a DNS-1123 label, else derived from it
        (docs/public-api.md, 'Deploy a model')."""
        return model_deployment_name(self.name)

    def to_spec(self, model_ref: str, model_type: ModelType) -> ModelDeploymentSpec:
        """The ModelDeployment's spec for this body: every member by name (an absent member keeps the
        spec's default)."""
        given = {name: getattr(self, name) for name in type(self).model_fields if name not in NOT_SPEC_FIELDS}
        fields = {name: value for name, value in given.items() if value is not None}
        return ModelDeploymentSpec(model_ref=model_ref, model_type=model_type, **fields)


class ToolDeployBody(DockyardModel):
    """Body of POST {base_url}/api/public/tools/{toolId}/deploy."""

    is_async: StrictBool
    """true: answer at once (IN_PROGRESS); false: wait until the deployment is SUCCESS or FAILED (bounded by
    the facade's sync_deploy_timeout_seconds; after it the answer is IN_PROGRESS with a message)."""


class Answer(BaseModel):
    """Base of the public answers: snake_case attributes, the exact camelCase wire names."""

    model_config = ConfigDict(alias_generator=to_camel, validate_by_name=True, validate_by_alias=True,
                              serialize_by_alias=True)  # fmt: skip


# --- chunked model import (docs/public-api.md, 'Chunked model import') -----------------------------------


class CompleteBody(BaseModel):
    """Optional body of the completion call (a Dockyard extension: the published call has no body)."""

    model_config = ConfigDict(extra="forbid")

    sha256: str | None = Field(
        default=None,
        description="hex SHA-256 of the whole file, computed while uploading; the import job FAILS when it "
        "differs (409 checksum_conflict when it contradicts the start call's)",
    )

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        return sha256_hex(value)


class SessionStarted(Answer):
    """The start call's answer."""

    session_id: str
    model_id: str = Field(description="name of the Model object the import fills")
    expiration_date: str = Field(description="ISO 8601 timestamp (UTC) after which the session takes no chunks")


class ChunkReceived(Answer):
    """A chunk's upload answer: the chunk is stored (a retry of a stored chunk answers the same)."""

    chunk_number: int
    session_id: str


class ReceivedChunk(Answer):
    chunk_number: int
    size: int = Field(description="bytes")


class SessionState(Answer):
    """What a client needs to resume an upload: the chunks received and those missing. A completed
    session whose files are gone has no expirationDate nor fileExtension (its answer leaves them out)."""

    session_id: str
    model_id: str
    state: Literal["open", "completed"]
    dock_status_id: str | None = Field(description="the import job, once the session is completed")
    expiration_date: str | None = None
    file_name: str
    file_extension: str | None = None
    file_size: int
    total_chunks: int
    received_chunks: list[ReceivedChunk]
    received_bytes: int
    missing_chunks: list[int]


class SessionAborted(Answer):
    """The abort's answer: the chunks are deleted, the Model is Failed (ImportAborted)."""

    session_id: str
    model_id: str
    freed_bytes: int


SESSION_EXAMPLE = {
    "sessionId": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
    "modelId": "llama-lora-3f9a1c2e",
    "expirationDate": "2026-11-24T10:00:00Z",
}
IMPORT_JOB_EXAMPLE = {
    "dockStatusId": "5b0f7c3e-4a53-4a0e-9a39-2b7f0d7e9a11",
    "dock-statusId": "5b0f7c3e-4a53-4a0e-9a39-2b7f0d7e9a11",
    "modelId": "llama-lora-3f9a1c2e",
    "jobType": "MODELS",
    "action": "EXPORT",
    "status": "IN_PROGRESS",
}
SESSION_STATE_EXAMPLE = {
    **SESSION_EXAMPLE,
    "state": "open",
    "fileSize": 50331648,
    "totalChunks": 3,
    "receivedChunks": [{"chunkNumber": 0, "size": 16777216}],
    "receivedBytes": 16777216,
    "missingChunks": [1, 2],
}


# --- model downloads (the storage initializer's, not the public API) ---------------------------------------


class ModelFile(Answer):
    path: str = Field(description="relative to the model's directory, with /")
    size: int
    sha256: str


class ModelFilesManifest(Answer):
    """The files of an imported model with size and SHA-256, as the import job recorded them."""

    namespace: str
    model_id: str
    dock_status_id: str = Field(description="the import job that stored the model")
    size_bytes: int = Field(description="size of the uploaded file")
    sha256: str = Field(description="SHA-256 of the uploaded file")
    files: list[ModelFile]
    format: str | None = Field(description="gguf, ctranslate2, safetensors or pytorch, as the import found it")
    file: str | None = Field(description="the weights file an engine loads by name (GGUF)")
    total_bytes: int = Field(description="sum of the files' sizes")


# --- errors -------------------------------------------------------------------------------------------


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


__all__ = [
    "IMPORT_JOB_EXAMPLE",
    "MODEL_DEPLOY_EXAMPLES",
    "MODEL_DEPLOY_RESPONSE_EXAMPLES",
    "MODEL_DEPLOY_SAMPLE",
    "SESSION_EXAMPLE",
    "SESSION_STATE_EXAMPLE",
    "TOOL_DEPLOY_EXAMPLES",
    "TOOL_DEPLOY_RESPONSE_EXAMPLES",
    "Answer",
    "ChunkReceived",
    "CompleteBody",
    "ErrorBody",
    "ErrorDetail",
    "JobRecord",
    "ModelDeployBody",
    "ModelFile",
    "ModelFilesManifest",
    "ReceivedChunk",
    "SessionAborted",
    "SessionStarted",
    "SessionState",
    "ToolDeployBody",
    "error_responses",
    "job_responses",
    "ok_responses",
]
