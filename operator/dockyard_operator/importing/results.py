"""What an import job ends with: :class:`Imported`, or :class:`ImportFailed` with its reason; and the
:class:`Limits` an archive is extracted under."""

from __future__ import annotations

from dataclasses import dataclass

from dockyard_core.modelformats import ModelFormat


class ImportFailed(Exception):
    """The import job fails: ``reason`` is CamelCase (it becomes the job's and the condition's reason)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Limits:
    max_extracted_bytes: int
    max_members: int


@dataclass(frozen=True)
class Imported:
    path: str
    """Relative to the model store root: ``models/<namespace>/<modelId>``."""
    size_bytes: int
    sha256: str
    format: ModelFormat | None = None
    """What :func:`check_model` found (docs/runtimes.md)."""
    file: str | None = None
    """The weights file an engine loads by name (GGUF), in the model's directory."""
    files_bytes: int | None = None
    """Bytes of the stored files (what a model pod downloads); more than ``size_bytes`` for a
    compressed archive."""
    adapter_base: str | None = None
    """For an adapter: ``base_model_name_or_path`` of its adapter_config.json."""
