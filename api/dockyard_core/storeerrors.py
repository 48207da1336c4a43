"""The model store's errors, each a :class:`~dockyard_core.errors.DockyardError` carrying the HTTP status
and error code the facade answers with, and the parsing of the two request values they refuse: the
``chunkNumber`` form field of a chunk upload and the ``Range`` header of a model file download."""

from __future__ import annotations

import re
from typing import Any

from dockyard_core.errors import DockyardError

CHUNK_NUMBER_RE = re.compile(r"^\s*(0|[1-9][0-9]{0,8})\s*$")


class SessionNotFound(DockyardError):
    status_code = 404
    code = "session_not_found"


class SessionGone(DockyardError):
    """The session existed but is over: expired, aborted, or (for uploads) already completed."""

    status_code = 410
    code = "session_expired"

    def __init__(self, message: str, details: Any = None, code: str = "session_expired") -> None:
        super().__init__(message, details)
        self.code = code


class SessionCompleted(DockyardError):
    status_code = 409
    code = "session_completed"


class InvalidChunkNumber(DockyardError):
    status_code = 422
    code = "invalid_chunk_number"


class ChunkTooLarge(DockyardError):
    status_code = 413
    code = "chunk_too_large"


class EmptyChunk(DockyardError):
    status_code = 422
    code = "empty_chunk"


class ChunkConflict(DockyardError):
    status_code = 409
    code = "chunk_conflict"


class SizeExceeded(DockyardError):
    status_code = 409
    code = "size_exceeded"


class MissingChunks(DockyardError):
    status_code = 409
    code = "missing_chunks"


class SizeMismatch(DockyardError):
    status_code = 409
    code = "size_mismatch"


class ModelFileNotFound(DockyardError):
    status_code = 404
    code = "not_found"


class RangeNotSatisfiable(DockyardError):
    status_code = 416
    code = "range_not_satisfiable"


def parse_chunk_number(raw: str | None, total_chunks: int) -> int:
    """The multipart field ``chunkNumber``: a decimal integer (form fields are text; the published sample sends
    a string: docs/public-api.md, 'The calls'), in ``[0, totalChunks)``."""
    if raw is None:
        raise InvalidChunkNumber("the form field chunkNumber is missing", {"field": "chunkNumber"})
    match = CHUNK_NUMBER_RE.match(raw)
    if not match:
        raise InvalidChunkNumber(
            "chunkNumber must be a non-negative integer", {"field": "chunkNumber", "value": raw[:32]}
        )
    number = int(match.group(1))
    if number >= total_chunks:
        raise InvalidChunkNumber(
            f"chunkNumber {number} is outside [0, {total_chunks})",
            {"field": "chunkNumber", "value": number, "totalChunks": total_chunks},
        )
    return number


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``Range: bytes=a-b`` / ``a-`` / ``-n`` as ``[start, end)``; None for no (or an ignorable) header.
    Raises :class:`RangeNotSatisfiable` for a range that starts past the end."""
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None  # other units and multiple ranges: the whole file (RFC 9110 allows ignoring Range)
    first, _, last = spec.strip().partition("-")
    try:
        if first == "":
            n = int(last)
            return (max(0, size - n), size) if n > 0 and size else _unsatisfiable(size)
        start = int(first)
        end = min(int(last) + 1, size) if last else size
    except ValueError:
        return None
    if start >= size or end <= start:
        return _unsatisfiable(size)
    return start, end


def _unsatisfiable(size: int) -> tuple[int, int]:
    raise RangeNotSatisfiable(f"the range is outside the file's {size} bytes", {"size": size})
