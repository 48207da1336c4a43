"""The one upload type: what the start call of a chunked import declares (docs/public-api.md, 'The calls'), validated
once
and carried as it is to the operator.

:class:`Upload` is the start call's JSON body (public names: ``fileName``, ``fileSize`` ...), the
``upload`` of the session's metadata in the model store (``session.json``), and what the operator's
import job reads back from there with ``model_validate``. The Model's ``spec.source.upload`` (the CRD
type :class:`~dockyard_core.resources.v1alpha1.UploadSource`) is its projection without ``isAdapter``
(that one is ``spec.isAdapter``).

Every request check is a validator of the model:

- the field constraints (required, types, lengths) are ordinary pydantic errors: 422 naming
  ``body.<field>``;
- the checks that need the whole value (control characters, path separators, the supported
  extensions, which it also normalizes) raise :class:`InvalidUpload` (below), a
  :class:`~dockyard_core.errors.DockyardError` that pydantic lets through, so the facade's one error
  handler answers 422 naming the public field (``field: fileName``);
- the size limits are the facade's settings: given as the validation context
  (``Upload.model_validate(data, context=UploadLimits(...).context())``), they are checked here and
  nowhere else (413 ``file_too_large`` with ``maxFileBytes``, or 422 on ``totalChunks``). Read back
  without a context (the operator, the store), the limits are not checked again: they were the
  facade's policy when the session started.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from dockyard_core.errors import DockyardError

EXTENSION_RE = re.compile(r"^[a-z0-9]{1,16}(\.[a-z0-9]{1,16})?$")

ARCHIVE_EXTENSIONS = ("tar", "tar.gz", "tgz", "zip")
"""Archives of a model directory; extracted by the operator."""
WEIGHT_EXTENSIONS = ("safetensors", "gguf", "bin", "pt", "pth")
"""Single model files; stored as they are."""
SUPPORTED_EXTENSIONS = ARCHIVE_EXTENSIONS + WEIGHT_EXTENSIONS
DOCUMENT_CONTEXTS = ("document", "dataset")
"""fileContext values of a knowledge-base document (docs/knowledge-bases.md): not a model."""
DOCUMENT_EXTENSIONS = ("txt", "text", "md", "markdown", "html", "htm", "pdf")
"""What a document may be: text, Markdown, HTML, PDF."""

MAX_FILE_NAME_BYTES = 255
MAX_TOTAL_CHUNKS = 1_000_000


class InvalidUpload(DockyardError):
    status_code = 422
    code = "invalid_request"


class FileTooLarge(DockyardError):
    status_code = 413
    code = "file_too_large"


def check_text(value: str, field: str, max_bytes: int) -> str:
    """A name that is safe to show and to use as a file name: no control characters, bounded length."""
    if not value or not value.strip():
        raise InvalidUpload(f"{field} must not be empty", {"field": field})
    if len(value.encode("utf-8")) > max_bytes:
        raise InvalidUpload(f"{field} is longer than {max_bytes} bytes", {"field": field})
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in value):
        raise InvalidUpload(f"{field} must not contain control characters", {"field": field})
    return value


def check_file_name(value: str) -> str:
    check_text(value, "fileName", MAX_FILE_NAME_BYTES)
    if "/" in value or "\\" in value:
        raise InvalidUpload("fileName must not contain a path separator", {"field": "fileName"})
    if ".." in value or value.strip() in (".", ""):
        raise InvalidUpload("fileName must not contain '..' or be '.'", {"field": "fileName"})
    return value


def normalize_extension(value: str, supported: tuple[str, ...] = SUPPORTED_EXTENSIONS) -> str:
    """``tar``, ``.TAR.GZ`` -> ``tar``, ``tar.gz``; only ``supported`` (a model's :data:`SUPPORTED_EXTENSIONS`,
    a document's :data:`DOCUMENT_EXTENSIONS`) pass."""
    check_text(value, "fileExtension", 32)
    ext = value.strip().lower().removeprefix(".")
    if not EXTENSION_RE.match(ext):
        raise InvalidUpload("fileExtension must be letters and digits, e.g. tar or tar.gz", {"field": "fileExtension"})
    if ext not in supported:
        raise InvalidUpload(
            f"fileExtension {ext!r} is not supported",
            {"field": "fileExtension", "supported": list(supported)},
        )
    return ext


def check_sizes(file_size: int, total_chunks: int, max_chunk_bytes: int, max_file_bytes: int) -> None:
    """``fileSize`` within the limit; ``totalChunks`` such that every chunk has at least one byte and
    none needs more than the chunk limit: ``ceil(fileSize / maxChunk) <= totalChunks <= fileSize``."""
    if file_size > max_file_bytes:
        raise FileTooLarge(
            f"fileSize {file_size} exceeds the limit of {max_file_bytes} bytes",
            {"field": "fileSize", "maxFileBytes": max_file_bytes},
        )
    fewest = math.ceil(file_size / max_chunk_bytes)
    most = min(file_size, MAX_TOTAL_CHUNKS)
    if not fewest <= total_chunks <= most:
        raise InvalidUpload(
            f"totalChunks must be between {fewest} and {most} for a file of {file_size} bytes "
            f"(chunks of at most {max_chunk_bytes} bytes, at least 1 byte each)",
            {"field": "totalChunks", "min": fewest, "max": most, "maxChunkBytes": max_chunk_bytes},
        )


LIMITS_CONTEXT = "uploadLimits"
"""The key of :class:`UploadLimits` in the validation context."""


@dataclass(frozen=True)
class UploadLimits:
    """The facade's limits on what a start call may declare (its settings)."""

    max_chunk_bytes: int
    max_file_bytes: int

    def context(self) -> dict[str, Any]:
        return {LIMITS_CONTEXT: self}


def sha256_hex(value: str | None) -> str | None:
    """A hex SHA-256, lower-cased; ValueError (422 naming the field) if it is not one."""
    if value is None:
        return None
    value = value.strip().lower()
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError("sha256 must be 64 hexadecimal digits")
    return value


class Upload(BaseModel):
    """Body of the start call (docs/public-api.md, 'The calls'). ``sha256`` is a Dockyard extension. Unknown
    fields are refused with 422 naming them, like every public body (docs/public-api.md, "Unknown fields")."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    file_context: str = Field(min_length=1, max_length=64, description="context of the file, e.g. model")
    total_chunks: StrictInt = Field(ge=1, description="number of chunks the file is divided into")
    file_extension: str = Field(min_length=1, max_length=32, description="file extension, e.g. tar")
    file_name: str = Field(min_length=1, max_length=255, description="name of the file")
    file_size: StrictInt = Field(ge=1, description="size of the whole file in bytes")
    is_adapter: StrictBool = Field(default=False, description="whether the file is an adapter model")
    sha256: str | None = Field(
        default=None,
        description="Dockyard extension: hex SHA-256 of the whole file; the import job FAILS when it differs",
    )

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        return sha256_hex(value)

    @model_validator(mode="after")
    def _checks(self, info: ValidationInfo) -> Upload:
        """The checks on whole values (after every field is valid, so that field errors come first and
        together), then the limits when the context gives them."""
        check_text(self.file_context, "fileContext", 64)
        check_file_name(self.file_name)
        document = self.file_context.strip().lower() in DOCUMENT_CONTEXTS
        self.file_extension = normalize_extension(
            self.file_extension, DOCUMENT_EXTENSIONS if document else SUPPORTED_EXTENSIONS
        )
        limits = (info.context or {}).get(LIMITS_CONTEXT)
        if limits is not None:
            check_sizes(self.file_size, self.total_chunks, limits.max_chunk_bytes, limits.max_file_bytes)
        return self

    def stored(self) -> dict[str, Any]:
        """The JSON form kept with the session (read back with ``Upload.model_validate``)."""
        return self.model_dump(mode="json", by_alias=True)
