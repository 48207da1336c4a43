"""KnowledgeBase: one version of a knowledge base (docs/knowledge-bases.md): its documents, chunking and
retrieval settings, and the state of its index."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, ClassVar, Literal

from pydantic import Field, StrictInt

from dockyard_core.resources.base import DockyardModel, ListMap, field_rules, name_check
from dockyard_core.resources.cel import Rule, immutable
from dockyard_core.resources.crdinfo import AGE, CrdInfo, PrinterColumn
from dockyard_core.resources.v1alpha1.common import (
    Description,
    DnsLabel,
    ObjectName,
    Resource,
    SemVer,
    StatusBase,
)

KB_REINDEX_ANNOTATION = "dockyard.dev/reindex-request"
"""A new value asks the operator to build a new generation from scratch (``dockyard kb reindex``)."""
KB_LABEL = "dockyard.dev/knowledge-base"
"""Label of an indexing Job (and its pod): the KnowledgeBase object it indexes."""

DocumentName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[^/\x00-\x1f]+$")]
FileId = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$")]
KbPhase = Literal["Pending", "Indexing", "Ready", "Failed"]


class KnowledgeEmbedding(DockyardModel):
    """The embedding model that turns chunks and questions into vectors."""

    model_deployment: ObjectName
    """A ModelDeployment (in this namespace) that serves the OpenAI-compatible /v1/embeddings."""


class KnowledgeChunking(DockyardModel):
    """How documents are cut into chunks (dockyard_core.knowledge.chunking)."""

    max_chars: Annotated[StrictInt, Field(ge=100, le=20000)] = 1200
    """The most characters in one chunk."""
    overlap_chars: Annotated[StrictInt, Field(ge=0, le=9999)] = 150
    """How much of the previous chunk's end a chunk repeats (less than half of maxChars)."""
    split_by: Literal["heading", "paragraph"] = "heading"
    """heading: a heading starts a new chunk; paragraph: blocks packed regardless of headings."""

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.overlapChars * 2 < self.maxChars",
            "overlapChars must be less than half of maxChars",
            check=lambda c: c.overlap_chars * 2 < c.max_chars,
            field_path=".overlapChars",
        ),
    )


class KnowledgeRetrieval(DockyardModel):
    """How the retrieval tool searches."""

    mode: Literal["hybrid", "keyword", "vector"] = "hybrid"
    """hybrid: keywords and vectors fused by Reciprocal Rank Fusion (k = 60); without an embedding model,
    keywords only."""
    top_k: Annotated[StrictInt, Field(ge=1, le=50)] = 5
    """Passages given to the model per search."""
    candidates: Annotated[StrictInt, Field(ge=1, le=200)] = 20
    """Candidates each of the keyword and vector searches gives the fusion."""


class KnowledgeDocument(DockyardModel):
    """A document of the knowledge base: a file the public chunked import received (fileContext document)."""

    name: DocumentName
    """The document's name (its file name): what sources cite."""
    file_id: FileId
    """The import's file id (the session's modelId): the file in the model store."""
    media_type: Annotated[str, Field(max_length=128)] = ""
    """text/plain, text/markdown, text/html or application/pdf (empty: from the name)."""
    size: Annotated[StrictInt, Field(ge=0)] = 0
    """The file's size in bytes."""


class KnowledgeBaseSpec(DockyardModel):
    """One version of a knowledge base. ``embedding``, ``chunking`` and ``retrieval`` shape the index and
    never change (a new version is indexed from scratch); ``documents`` may change: the operator indexes
    added documents into the active generation and removes deleted ones from it."""

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.embedding) == has(oldSelf.embedding)",
            "embedding is immutable: create a new KnowledgeBase version to change it",
            field_path=".embedding",
        ),
    )

    name: Annotated[DnsLabel, field_rules(immutable("name"))]
    """The knowledge base's name, as agents list it in knowledgeBases (same for all its versions)."""
    version: Annotated[SemVer, field_rules(immutable("version"))]
    """This version, MAJOR.MINOR.PATCH."""
    description: Description = ""
    """What the knowledge base holds: the retrieval tool's description for the model."""
    embedding: Annotated[KnowledgeEmbedding, field_rules(immutable("embedding", "create a new version"))] | None = None
    """The embedding model; absent: keyword search only."""
    chunking: Annotated[KnowledgeChunking, field_rules(immutable("chunking", "create a new version"))] = Field(
        default_factory=KnowledgeChunking
    )
    """Chunking settings."""
    retrieval: Annotated[KnowledgeRetrieval, field_rules(immutable("retrieval", "create a new version"))] = Field(
        default_factory=KnowledgeRetrieval
    )
    """Retrieval settings."""
    documents: Annotated[list[KnowledgeDocument], Field(max_length=2000), ListMap("name")] = Field(default_factory=list)
    """The documents (added by the import, removed by a delete)."""


class DocumentProblem(DockyardModel):
    """A document that could not be indexed, and why."""

    document: Annotated[str, Field(max_length=253)]
    """The document's name."""
    reason: Annotated[str, Field(max_length=1024)]
    """Why it could not be indexed."""


class IndexedDocument(DockyardModel):
    """A document as the active generation holds it."""

    name: Annotated[str, Field(max_length=253)]
    """The document's name."""
    file_id: Annotated[str, Field(max_length=128)]
    """The file indexed (a document re-imported as another file is indexed again)."""
    chunks: Annotated[int, Field(ge=0)] = 0
    """Its chunks in the active generation."""


class KnowledgeBaseStatus(StatusBase):
    """The index's state, written by the operator's indexing job."""

    phase: KbPhase = "Pending"
    """Pending (not indexed yet), Indexing (a job runs), Ready, Failed (the last job failed)."""
    active_generation: Annotated[int, Field(ge=0)] | None = None
    """The generation searches read."""
    building_generation: Annotated[int, Field(ge=0)] | None = None
    """A generation being built (re-index), switched to when ready."""
    documents: Annotated[int, Field(ge=0)] = 0
    """Documents in the active generation."""
    chunks: Annotated[int, Field(ge=0)] = 0
    """Chunks in the active generation."""
    bytes: Annotated[int, Field(ge=0)] = 0
    """The indexed documents' bytes."""
    last_indexed: datetime | None = None
    """When the last run finished."""
    indexed: Annotated[list[IndexedDocument], Field(max_length=2000)] = Field(default_factory=list)
    """The documents the active generation holds."""
    errors: Annotated[list[DocumentProblem], Field(max_length=2000)] = Field(default_factory=list)
    """Documents that could not be indexed, each with the reason; the others are searchable."""
    error_count: Annotated[int, Field(ge=0)] = 0
    """len(errors) (a kubectl column)."""
    job: Annotated[str, Field(max_length=253)] = ""
    """The indexing run in progress or last run (the Job's name)."""
    indexed_spec: Annotated[str, Field(max_length=64)] = ""
    """What the last successful run indexed: <metadata.generation>/<reindex request>."""
    message: Annotated[str, Field(max_length=2048)] = ""
    """Why the last run failed (phase Failed)."""


class KnowledgeBase(Resource):
    """One version of a knowledge base; the object's name must be <spec.name>-<spec.version>."""

    crd: ClassVar[CrdInfo] = CrdInfo(
        plural="knowledgebases",
        short_names=("kb",),
        printer_columns=(
            PrinterColumn("Version", ".spec.version", description="This version"),
            PrinterColumn("Documents", ".status.documents", "integer", "Documents indexed"),
            PrinterColumn("Chunks", ".status.chunks", "integer", "Chunks indexed"),
            PrinterColumn("Status", ".status.phase", description="Pending, Indexing, Ready or Failed"),
            PrinterColumn("Last-Indexed", ".status.lastIndexed", "date", "When the index last changed"),
            PrinterColumn("Embedding", ".spec.embedding.modelDeployment", priority=1, description="Embedding model"),
            PrinterColumn("Errors", ".status.errorCount", "integer", "Documents that failed", priority=1),
            AGE,
        ),
        selectable_fields=(".spec.name", ".spec.version"),
    )
    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "self.metadata.name == self.spec.name + '-' + self.spec.version",
            "metadata.name must be <spec.name>-<spec.version>, e.g. harbour-rules-1.0.0",
            check=name_check(lambda k: (k.spec.name, k.spec.version)),
        ),
    )

    kind: Literal["KnowledgeBase"] = "KnowledgeBase"
    spec: KnowledgeBaseSpec
    status: KnowledgeBaseStatus = Field(default_factory=KnowledgeBaseStatus)

    @staticmethod
    def object_name(name: str, version: str) -> str:
        """The object name of version ``version`` of knowledge base ``name``."""
        return f"{name}-{version}"

    @property
    def index_key(self) -> str:
        """The knowledge base's key in the index: <namespace>/<object name>."""
        return f"{self.metadata.namespace}/{self.metadata.name}"
