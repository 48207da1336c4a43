"""Model: a model that can be deployed, imported by chunked upload or named by a public hub id."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, ClassVar, Literal

from pydantic import Field, StrictBool, StrictInt

from dockyard_core.resources.base import DockyardModel, field_rules
from dockyard_core.resources.cel import Rule, immutable
from dockyard_core.resources.crdinfo import AGE, CrdInfo, PrinterColumn
from dockyard_core.resources.v1alpha1.common import DockJob, ModelType, ObjectName, Resource, StatusBase

ModelPhase = Literal["Importing", "ReadyToDeploy", "Failed"]


class UploadSource(DockyardModel):
    """A model file imported in chunks through the public API (docs/public-api.md, 'Chunked model import').

    The fields are the body of POST /api/public/files/session/start; the bytes go to the model store.
    """

    file_context: Annotated[str, Field(min_length=1, max_length=64)]
    """Context of the file, for example model or dataset."""
    file_name: Annotated[str, Field(min_length=1, max_length=255)]
    """Name of the uploaded file."""
    file_extension: Annotated[str, Field(min_length=1, max_length=32)]
    """File extension, for example tar."""
    file_size: Annotated[StrictInt, Field(ge=1)]
    """Size of the whole file in bytes; the import fails when the received bytes differ."""
    total_chunks: Annotated[StrictInt, Field(ge=1, le=1_000_000)]
    """Number of chunks the file is divided into."""
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    """Lower-case hex SHA-256 of the whole file; verified when given."""


class HubSource(DockyardModel):
    """An open-source model published on a model hub; the serving pods download it."""

    id: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9._-]+)?$")]
    """Hub repository id, e.g. meta-llama/Llama-3.1-8B-Instruct."""
    revision: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    """Branch, tag or commit; absent: the hub's default branch."""


class ModelSource(DockyardModel):
    """Where the model comes from: exactly one of upload or hub."""

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.upload) != has(self.hub)",
            "exactly one of upload or hub must be set",
            check=lambda s: (s.upload is None) != (s.hub is None),
        ),
    )

    upload: UploadSource | None = None
    """The model was imported by chunked upload."""
    hub: HubSource | None = None
    """The model is a public hub model."""


class ModelSpec(DockyardModel):
    """A deployable model: where its weights come from and what it is.

    The source is fixed at creation. An adapter (isAdapter) is served on top of its baseModel, which may
    be set after the import (the import API does not take it) but not changed or removed afterwards.
    """

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "!has(self.baseModel) || self.isAdapter",
            "baseModel applies only to adapters (isAdapter: true)",
            check=lambda s: s.base_model is None or s.is_adapter,
            field_path=".baseModel",
        ),
        Rule("!has(oldSelf.baseModel) || has(self.baseModel)", "baseModel cannot be removed once set"),
    )

    model_type: ModelType | None = None
    """openSource or fineTune, when known (the import API does not say; a deployment does)."""
    source: Annotated[ModelSource, field_rules(immutable("source"))]
    """Where the weights come from; immutable."""
    is_adapter: Annotated[StrictBool, field_rules(immutable("isAdapter"))] = False
    """Whether the model is an adapter (e.g. LoRA) rather than full weights; immutable."""
    base_model: Annotated[ObjectName, field_rules(immutable("baseModel"))] | None = None
    """For an adapter: name of the Model (in this namespace) it applies to. A public deploy sets it: the
    deploy's baseModel, else the Model that status.adapter.baseModelNameOrPath (adapter_config.json) names."""


class ImportSession(DockyardModel):
    """The chunked-upload session importing the model (kept here so that it survives restarts)."""

    session_id: Annotated[str, Field(min_length=1, max_length=128)]
    """sessionId returned by POST /api/public/files/session/start."""
    expiration_date: datetime
    """When the session expires; chunks are refused afterwards."""


class ModelStorage(DockyardModel):
    """Where the imported weights are in the model store, as verified after the import."""

    path: Annotated[str, Field(min_length=1, max_length=4096)]
    """Path of the model's directory in the model store."""
    size_bytes: Annotated[int, Field(ge=0)] | None = None
    """Bytes received."""
    files_bytes: Annotated[int, Field(ge=0)] | None = None
    """Bytes of the stored files (what a model pod downloads: sizes the pod's weights volume); more than
    sizeBytes for a compressed archive."""
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    """SHA-256 of the received file."""
    format: Literal["gguf", "ctranslate2", "safetensors", "pytorch"] | None = None
    """Format of the stored weights, found by the import: gguf (served by llama.cpp), ctranslate2,
    safetensors or pytorch (docs/runtimes.md says which engine serves which)."""
    file: Annotated[str, Field(min_length=1, max_length=255)] | None = None
    """For a format an engine loads by file name (GGUF): that file, in the model's directory (of a
    split GGUF, the first part)."""


class AdapterInfo(DockyardModel):
    """What the import found about an adapter (docs/public-api.md, 'Adapters')."""

    base_model_name_or_path: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    """base_model_name_or_path of the adapter's adapter_config.json: the model it was trained on (a hub id,
    a path or a name). A deploy that names no base resolves it to one Model of the namespace (its name,
    uploaded file name, GGUF file name or hub id, or the last path component of the value) and sets
    spec.baseModel."""


class ModelStatus(StatusBase):
    """Observed state of a Model."""

    phase: ModelPhase | None = None
    """Importing, then ReadyToDeploy ("Ready to Deploy") or Failed. A hub model is
    ReadyToDeploy at once."""
    job: DockJob | None = None
    """The job record of the import (jobType MODELS, action EXPORT)."""
    import_session: ImportSession | None = None
    """The upload session, while the import runs."""
    storage: ModelStorage | None = None
    """Where the imported weights are stored."""
    adapter: AdapterInfo | None = None
    """For an imported adapter: what its adapter_config.json says about its base model."""


class Model(Resource):
    """A model that can be deployed: imported by chunked upload, or an open-source hub model.

    The object's name is the public API's modelId. Its status phase goes Importing → ReadyToDeploy, or Failed.
    """

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="models",
        short_names=("mdl",),
        printer_columns=(
            PrinterColumn("Type", ".spec.modelType", description="openSource or fineTune"),
            PrinterColumn("Adapter", ".spec.isAdapter", "boolean", "Whether the model is an adapter"),
            PrinterColumn("Base", ".spec.baseModel", priority=1, description="An adapter's base Model"),
            PrinterColumn("Phase", ".status.phase", description="Importing, ReadyToDeploy or Failed"),
            PrinterColumn("Job", ".status.job.dockStatusId", priority=1, description="dockStatusId"),
            AGE,
        ),
    )

    kind: Literal["Model"] = "Model"
    spec: ModelSpec
    status: ModelStatus = Field(default_factory=ModelStatus)
