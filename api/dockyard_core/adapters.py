"""The base model of an adapter (docs/public-api.md, 'Adapters'), shared by the import job, the public
deploy and the operator.

An adapter's ``adapter_config.json`` (PEFT's, or the one beside a GGUF LoRA) names the model it was
trained on in ``base_model_name_or_path``: a hub id (``meta-llama/Llama-3.1-8B``), a local path
(``/data/llama-3.1-8b``) or a bare name. The import job records that value as
``Model.status.adapter.baseModelNameOrPath`` (:func:`base_named_in`); a deploy then resolves it to ONE
Model of the namespace (:func:`resolve_base`) unless the deploy names the base itself.

Resolution: a Model that is not an adapter and has not failed matches when the value, or the last
component of the value read as a path, equals (case-insensitively) its object name, its uploaded file
name (with or without the extension), its GGUF file name (with or without ``.gguf``) or its hub id.
Exactly one match is needed; none or several raise :class:`BaseNotResolved`, whose message names the
value and the candidates.

Pure: no I/O but :func:`base_named_in`'s read of one small file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from dockyard_core.resources.v1alpha1 import Model

ADAPTER_CONFIG = "adapter_config.json"
BASE_KEY = "base_model_name_or_path"
MAX_CONFIG_BYTES = 1 << 20


class BaseNotResolved(ValueError):
    """An adapter's base model cannot be determined; ``candidates`` are the Models that could be named."""

    def __init__(self, message: str, candidates: list[str]) -> None:
        super().__init__(message)
        self.message = message
        self.candidates = candidates


def base_named_in(model_dir: Path) -> str | None:
    """``base_model_name_or_path`` of the adapter_config.json at the top of ``model_dir`` (None: no such
    file, not a JSON object, or no non-empty string there)."""
    path = model_dir / ADAPTER_CONFIG
    try:
        if not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES:
            return None
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    value = data.get(BASE_KEY) if isinstance(data, dict) else None
    return value.strip()[:1024] or None if isinstance(value, str) else None


def _without(name: str, suffix: str) -> str:
    return name[: -len(suffix)] if suffix and name.endswith(suffix) else name


def names_of(model: Model) -> set[str]:
    """What a value may say to name ``model`` (case-folded)."""
    names = {model.metadata.name or ""}
    upload, hub, storage = model.spec.source.upload, model.spec.source.hub, model.status.storage
    if upload is not None:
        names |= {upload.file_name, _without(upload.file_name, f".{upload.file_extension}")}
    if hub is not None:
        names.add(hub.id)
    if storage is not None and storage.file:
        names |= {storage.file, _without(storage.file, ".gguf")}
    return {n.casefold() for n in names if n}


def _keys(value: str) -> set[str]:
    value = value.strip().rstrip("/")
    return {k.casefold() for k in (value, value.rsplit("/", 1)[-1]) if k}


def candidates(models: Iterable[Model]) -> list[Model]:
    """The Models an adapter can be served on: not adapters, not Failed."""
    return [m for m in models if not m.spec.is_adapter and m.status.phase != "Failed"]


def resolve_base(value: str, models: Iterable[Model]) -> str:
    """The name of the one Model of ``models`` (the namespace's) that ``value`` names; else
    :class:`BaseNotResolved`."""
    pool = candidates(models)
    keys = _keys(value)
    matches = sorted(m.metadata.name or "" for m in pool if keys & names_of(m))
    if len(matches) == 1:
        return matches[0]
    names = sorted(m.metadata.name or "" for m in pool)
    if matches:
        raise BaseNotResolved(
            f"adapter_config.json names base model {value!r}, which matches {len(matches)} Models: "
            f"{', '.join(matches)}; name the base explicitly",
            matches,
        )
    shown = ", ".join(names[:20]) + (" …" if len(names) > 20 else "") if names else "none"
    raise BaseNotResolved(
        f"adapter_config.json names base model {value!r}, which matches no Model of this namespace by name, "
        f"file name or hub id (Models that could be the base: {shown}); import the base model, or name it "
        "explicitly",
        names,
    )
