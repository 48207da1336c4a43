"""A stored model's manifest (``.dockyard-import.json`` in its directory): what the import job recorded,
and every file of the model with its size and SHA-256, which pods download and verify."""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dockyard_core.storefiles import COPY_BUFFER

MANIFEST = ".dockyard-import.json"


@dataclass(frozen=True)
class ModelFile:
    path: str
    """Relative to the model's directory, with ``/``."""
    size: int
    sha256: str


@dataclass(frozen=True)
class ModelManifest:
    """What the import job recorded: its id, the uploaded file's size and SHA-256, and the model's files."""

    dock_status_id: str
    size_bytes: int
    sha256: str
    files: tuple[ModelFile, ...]
    format: str | None = None
    """The model's format as the import found it (gguf, ctranslate2, safetensors, pytorch)."""
    weights_file: str | None = None
    """The weights file an engine loads by name (GGUF); "file" in the JSON."""
    adapter_base: str | None = None
    """For an adapter: base_model_name_or_path of its adapter_config.json; "adapterBase" in the JSON."""

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def file(self, path: str) -> ModelFile | None:
        return next((f for f in self.files if f.path == path), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dockStatusId": self.dock_status_id,
            "sizeBytes": self.size_bytes,
            "sha256": self.sha256,
            "files": [asdict(f) for f in self.files],
            "format": self.format,
            "file": self.weights_file,
            **({"adapterBase": self.adapter_base} if self.adapter_base else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelManifest:
        files = tuple(ModelFile(str(f["path"]), int(f["size"]), str(f["sha256"])) for f in data.get("files") or ())
        found, main, base = data.get("format"), data.get("file"), data.get("adapterBase")
        return cls(
            str(data.get("dockStatusId", "")),
            int(data.get("sizeBytes", 0)),
            str(data.get("sha256", "")),
            files,
            str(found) if found else None,
            str(main) if main else None,
            str(base) if base else None,
        )


def file_sha256(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(COPY_BUFFER):
            sha.update(block)
    return sha.hexdigest()


def list_files(root: Path, known: dict[str, str] | None = None) -> list[ModelFile]:
    """Every regular file under ``root`` but the manifest, sorted, with size and SHA-256 (taken from
    ``known`` by relative path when given there, else computed)."""
    found = []
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            full = Path(directory) / name
            rel = full.relative_to(root).as_posix()
            if rel == MANIFEST or full.is_symlink():
                continue
            sha = (known or {}).get(rel) or file_sha256(full)
            found.append(ModelFile(rel, full.stat().st_size, sha))
    return sorted(found, key=lambda f: f.path)
