"""ModelDeployment: a model served on GPU nodes; its spec is the deploy body of
docs/public-api.md, 'Deploy a model'."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt

from dockyard_core.resources.base import DockyardModel, field_rules
from dockyard_core.resources.cel import Rule, immutable
from dockyard_core.resources.crdinfo import AGE, CrdInfo, PrinterColumn, ScaleSubresource
from dockyard_core.resources.v1alpha1.common import (
    DNS_LABEL_PATTERN,
    DeviceType,
    ModelType,
    ObjectName,
    Resource,
    WorkloadStatus,
)

MAX_NAME_LENGTH = 63
"""A ModelDeployment's name is a label value of its workload (``app.kubernetes.io/instance``,
``dockyard.dev/model-deployment``): at most 63 characters, refused above at admission (CEL)."""
MAX_DISPLAY_NAME_LENGTH = 253
"""Longest ``name`` of the deploy call (spec.name): any text of 1 to 253 characters (the rule:
:func:`check_display_name`)."""
_DNS_LABEL = re.compile(DNS_LABEL_PATTERN)
_HASH_LENGTH = 8
_REFUSED_CATEGORIES = {"Cc", "Zl", "Zp", "Cs"}
"""Control characters, line and paragraph separators, lone surrogates (not text: no UTF-8 for them)."""


def check_display_name(name: str) -> str:
    """``name`` when it is a valid deploy-call name, else ValueError saying why: 1 to 253 characters, no
    control characters, no leading or trailing whitespace, and at least one letter or digit (any script)."""
    if not name:
        raise ValueError("name must not be empty")
    if len(name) > MAX_DISPLAY_NAME_LENGTH:
        raise ValueError(f"name must be at most {MAX_DISPLAY_NAME_LENGTH} characters")
    if any(unicodedata.category(c) in _REFUSED_CATEGORIES for c in name):
        raise ValueError("name must not contain control characters (newlines, tabs, ...) or lone surrogates")
    if not any(c.isalnum() for c in name):
        raise ValueError("name must contain at least one letter or digit")
    if name != name.strip():
        raise ValueError("name must not begin or end with whitespace")
    return name


def model_deployment_name(name: str) -> str:
    """The ModelDeployment object's name for the deploy call's ``name`` (docs/public-api.md, 'Deploy a model'):
    deterministic, a DNS-1123 label of at most 63 characters.

    A name that already is such a label is the object's name unchanged. Any other is lower-cased, folded to
    ASCII, every run of other characters made one '-', trimmed and truncated, and suffixed with 8 hex digits
    of the SHA-256 of the name as given: ``"Llama 3 8B"`` -> ``llama-3-8b-<hash>``, never ``llama-3-8b`` (the
    object of the name ``"llama-3-8b"``). A name with no ASCII letter or digit gives ``model-<hash>``."""
    if len(name) <= MAX_NAME_LENGTH and _DNS_LABEL.match(name):
        return name
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_name).strip("-")[: MAX_NAME_LENGTH - _HASH_LENGTH - 1].rstrip("-")
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LENGTH]
    return f"{slug or 'model'}-{digest}"


class HyperParameters(DockyardModel):
    """Default sampling settings of the served model (hyperParameters, docs/public-api.md, 'Deploy a model').

    When the object is given, temperature, maxTokens, topP and topK are all required.
    """

    temperature: Annotated[StrictFloat, Field(ge=0, le=2)]
    """Sampling temperature, 0 to 2."""
    max_tokens: Annotated[StrictInt, Field(ge=0, le=512)]
    """Maximum number of tokens generated per request, 0 to 512."""
    top_p: Annotated[StrictFloat, Field(ge=0, le=1)]
    """Nucleus-sampling probability mass, 0 to 1."""
    top_k: Annotated[StrictInt, Field(ge=1, le=100)]
    """Number of most likely tokens sampled from, 1 to 100."""
    stop_sequence: Annotated[list[Annotated[str, Field(max_length=256)]], Field(max_length=16)] | None = None
    """Strings that end generation (at most 16, each at most 256 characters)."""


class ScalingParameters(DockyardModel):
    """Replica bounds and autoscaling behaviour (scalingParameters of docs/public-api.md,
    'Deploy a model'; all members optional).

    Defaults: one replica, no autoscaling (maxReplicas absent means maxReplicas = minReplicas),
    maxBatchSize 256 (vLLM's own default for --max-num-seqs, and the allowed maximum), and the
    longest delays allowed, so that only a sustained load change resizes a GPU deployment. Dockyard's
    autoscaler honours the delays in milliseconds.
    """

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",
            "minReplicas must be less than or equal to maxReplicas",
            check=lambda s: s.max_replicas is None or s.min_replicas <= s.max_replicas,
            field_path=".minReplicas",
        ),
    )

    max_batch_size: Annotated[StrictInt, Field(ge=1, le=256)] = 256
    """Most sequences one replica serves concurrently (vLLM --max-num-seqs), 1 to 256."""
    min_replicas: Annotated[StrictInt, Field(ge=1, le=10)] = 1
    """Fewest replicas, 1 to 10."""
    max_replicas: Annotated[StrictInt, Field(ge=1, le=50)] | None = None
    """Most replicas, 1 to 50; at least minReplicas. Absent: equal to minReplicas (no autoscaling)."""
    scale_up_delay: Annotated[StrictInt, Field(ge=1, le=1000)] = 1000
    """Milliseconds a higher load must last before a replica is added, 1 to 1000."""
    scale_down_delay: Annotated[StrictInt, Field(ge=50, le=2000)] = 2000
    """Milliseconds a lower load must last before a replica is removed, 50 to 2000."""

    @property
    def effective_max_replicas(self) -> int:
        """maxReplicas, or minReplicas when it is not set."""
        return self.min_replicas if self.max_replicas is None else self.max_replicas

    def clamp(self, replicas: int | None) -> int:
        """A desired replica count brought within [minReplicas, effective maxReplicas]."""
        wanted = self.min_replicas if replicas is None else replicas
        return max(self.min_replicas, min(wanted, self.effective_max_replicas))


class OptimizationInfo(DockyardModel):
    """Serving runtime and quantization (optimizationInfo of docs/public-api.md, 'Deploy a model').

    An empty string (what the published sample sends) means the default of the runtime catalog the Helm
    chart configures.
    """

    optimization_type: Literal["ctranslate2", "vllm", ""] = ""
    """Serving runtime: vllm or ctranslate2; empty for the catalog's default."""
    quantization_type: Literal["no_quantization", "int8_float16", ""] = ""
    """Weight quantization: no_quantization, or int8_float16 (a CTranslate2 compute type); empty for
    the runtime's default."""


class ModelDeploymentSpec(DockyardModel):
    """A model to serve and how: the body of the model deploy call (POST /api/public/models/{modelId}/deploy).

    Pods run on nodes of the requested deviceType (node.kubernetes.io/instance-type) and request all of
    its GPUs as nvidia.com/gpu. Changing the spec redeploys; every deployment through the public API is
    a new dock job recorded in status.job.
    """

    model_ref: Annotated[
        ObjectName, field_rules(immutable("modelRef", "deploy another model with a new ModelDeployment"))
    ]
    """Name of the Model to serve (the public API's modelId), in this namespace. The operator deploys it once the
    Model is ReadyToDeploy."""
    model_type: ModelType
    """openSource or fineTune (the deploy call's modelType query parameter)."""
    name: Annotated[str, Field(min_length=1, max_length=MAX_DISPLAY_NAME_LENGTH)]
    """Name of the model to deploy, as the deploy call gave it (any text): the name clients use for it (the
    served model name). The object's own name is derived from it (the public API's rule: a DNS label is
    the object's name, any other text a slug of it with a hash)."""
    is_deployed_previously: StrictBool = False
    """As sent by the caller: whether the model was deployed before. Informational; Dockyard decides
    from its own state."""
    hyper_parameters: HyperParameters | None = None
    """Default sampling settings of the served model; absent: the runtime's defaults."""
    scaling_parameters: Annotated[ScalingParameters, Field(json_schema_extra={"default": {}})] = Field(
        default_factory=ScalingParameters
    )
    """Replica bounds, batch size and autoscaling delays."""
    device_type: DeviceType
    """GPU instance type the pods run on (one of the eight of the deploy call)."""
    optimization_info: OptimizationInfo | None = None
    """Serving runtime and quantization; absent: the runtime catalog's defaults."""
    replicas: Annotated[StrictInt, Field(ge=1, le=50)] | None = None
    """Desired replica count, written by Dockyard's autoscaler (or kubectl scale) through the scale
    subresource; the operator keeps it within [minReplicas, maxReplicas]. Absent: minReplicas."""

    def desired_replicas(self) -> int:
        """The replica count the operator runs: spec.replicas clamped to the scaling bounds."""
        return self.scaling_parameters.clamp(self.replicas)


class ModelDeploymentStatus(WorkloadStatus):
    """Observed state of a ModelDeployment."""

    runtime: str | None = None
    """The serving runtime actually used (from optimizationType and the runtime catalog)."""
    autoscaler: dict[str, Any] | None = None
    """Dockyard's autoscaler: the load signal it reads (signal, e.g. "llama-cpp: llamacpp:requests_processing
    + llamacpp:requests_deferred"), its latest decision (reason), the ready replicas scraped and those that
    reported load (scraped, reporting), and the load change it is waiting on (pending), kept here so an
    operator restart loses nothing."""


class ModelDeployment(Resource):
    """A model served on GPU nodes of one device type, with replica bounds and sampling defaults.

    Created by POST /api/public/models/{modelId}/deploy (or kubectl apply); status.job is the dock
    job of the latest deployment.
    """

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="modeldeployments",
        short_names=("mdep",),
        printer_columns=(
            PrinterColumn("Model", ".spec.modelRef", description="The Model served"),
            PrinterColumn("Device", ".spec.deviceType", description="GPU instance type"),
            PrinterColumn("Replicas", ".status.replicas", "integer", "Pods that exist"),
            PrinterColumn("Ready", ".status.readyReplicas", "integer", "Pods that are ready"),
            PrinterColumn("Status", ".status.job.status", description="Dock status of the latest job"),
            PrinterColumn("Display-Name", ".spec.name", priority=1, description="The deploy call's name (served)"),
            PrinterColumn("Type", ".spec.modelType", priority=1, description="openSource or fineTune"),
            PrinterColumn("Runtime", ".status.runtime", priority=1, description="Serving runtime"),
            PrinterColumn("Job", ".status.job.dockStatusId", priority=1, description="dockStatusId"),
            AGE,
        ),
        scale=ScaleSubresource(),
        selectable_fields=(".spec.modelRef", ".spec.deviceType"),
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.metadata.name.size() <= 63",
            "metadata.name must be at most 63 characters: it is the value of the labels of the deployment's "
            "pods and Service (a Kubernetes label value has at most 63 characters)",
            check=lambda m: m.metadata.name is None or len(m.metadata.name) <= MAX_NAME_LENGTH,
        ),
    )

    kind: Literal["ModelDeployment"] = "ModelDeployment"
    spec: ModelDeploymentSpec
    status: ModelDeploymentStatus = Field(default_factory=ModelDeploymentStatus)
