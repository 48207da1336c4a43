"""The import job's run: the chunks of a session become ``models/<namespace>/<modelId>/`` of the model
store (:func:`run_import`, idempotent; :func:`import_into` on either backend), after the model check
(:func:`check_model`). The rules are the package's (:mod:`dockyard_operator.importing`)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import struct
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from dockyard_core.adapters import base_named_in
from dockyard_core.errors import DockyardError
from dockyard_core.modelformats import ModelFormat, detect_format, main_file
from dockyard_core.modelmanifest import MANIFEST, list_files
from dockyard_core.modelstore import ModelStore
from dockyard_core.s3store import S3ModelStore
from dockyard_core.storefiles import COPY_BUFFER
from dockyard_core.upload import ARCHIVE_EXTENSIONS, WEIGHT_EXTENSIONS, Upload
from dockyard_operator.importing.archives import Extraction, extract_tar, extract_zip
from dockyard_operator.importing.chunks import ChunkReader, digest, verify
from dockyard_operator.importing.gguf import gguf_type
from dockyard_operator.importing.results import Imported, ImportFailed, Limits

WEIGHT_SUFFIXES = tuple(f".{ext}" for ext in WEIGHT_EXTENSIONS)


# --- the model check ----------------------------------------------------------------------------------


def _check_safetensors(path: Path) -> None:
    with path.open("rb") as f:
        head = f.read(9)
    size = path.stat().st_size
    if len(head) < 9:
        raise ImportFailed("InvalidModel", f"{path.name} is too short to be a safetensors file")
    (header_len,) = struct.unpack("<Q", head[:8])
    if header_len < 2 or 8 + header_len > size or head[8:9] != b"{":
        raise ImportFailed("InvalidModel", f"{path.name} has no valid safetensors header")


def _check_gguf(path: Path, is_adapter: bool) -> None:
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ImportFailed("InvalidModel", f"{path.name} does not start with the GGUF magic")
    kind = gguf_type(path)
    if is_adapter and kind != "adapter":
        raise ImportFailed(
            "InvalidModel",
            f"{path.name} is not a GGUF LoRA adapter (its general.type is {kind or 'not set'}, llama.cpp's --lora "
            "needs 'adapter'): import a model without isAdapter, or convert the adapter with llama.cpp's "
            "convert_lora_to_gguf.py",
        )
    if not is_adapter and kind == "adapter":
        raise ImportFailed(
            "InvalidModel",
            f"{path.name} is a LoRA adapter (general.type 'adapter'), not a model: import it with isAdapter true "
            "(dockyard import --adapter), with its adapter_config.json",
        )


def _check_json_object(path: Path) -> None:
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ImportFailed("InvalidModel", f"{path.name} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ImportFailed("InvalidModel", f"{path.name} is not a JSON object")


def check_model(root: Path, is_adapter: bool) -> tuple[ModelFormat | None, str | None]:
    """The rule of step 3 in :mod:`dockyard_operator.importing`; returns the format of the weights and, for GGUF, the
    file an engine loads."""
    files = {p.name: p for p in root.iterdir() if p.is_file() and not p.is_symlink() and p.name != MANIFEST}
    weights = [p for name, p in files.items() if name.lower().endswith(WEIGHT_SUFFIXES)]
    for path in weights:
        if path.name.lower().endswith(".safetensors"):
            _check_safetensors(path)
        elif path.name.lower().endswith(".gguf"):
            _check_gguf(path, is_adapter)
    configs = ("adapter_config.json", "config.json") if is_adapter else ("config.json",)
    found = [files[c] for c in configs if c in files]
    for path in found:
        _check_json_object(path)
    if not found and not weights:
        expected = " or ".join(configs)
        raise ImportFailed(
            "InvalidModel",
            f"no model found: the top level holds neither {expected} nor a weights file "
            f"({', '.join('*' + s for s in WEIGHT_SUFFIXES)}); files there: {sorted(files)[:10]}",
        )
    model_format = detect_format(files)
    return model_format, main_file(files, model_format)


# --- the job ------------------------------------------------------------------------------------------


def _read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((directory / MANIFEST).read_text())
        return data
    except (OSError, ValueError):
        return None


def _single_file_name(upload: Upload) -> str:
    suffix = f".{upload.file_extension}"
    return upload.file_name if upload.file_name.lower().endswith(suffix) else upload.file_name + suffix


def _copy(reader: ChunkReader, target: Path) -> tuple[int, str]:
    sha = hashlib.sha256()
    size = 0
    buffer = bytearray(COPY_BUFFER)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(target, flags, 0o644), "wb") as out:
        while got := reader.readinto(buffer):
            block = memoryview(buffer)[:got]
            sha.update(block)
            out.write(block)
            size += got
    return size, sha.hexdigest()


def _model_root(staging: Path) -> Path:
    """``staging``, or its only entry when that is a directory (an archive of ``mymodel/...``)."""
    entries = list(staging.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return staging


def _fsync_tree(root: Path) -> None:
    for directory, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(directory, name), "rb") as f:
                os.fsync(f.fileno())
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def staging_dirs(store: ModelStore, namespace: str, model_id: str) -> Iterator[Path]:
    parent = store.models / namespace
    if parent.is_dir():
        yield from parent.glob(f".staging-{model_id}-*")


def run_import(
    store: ModelStore,
    namespace: str,
    model_id: str,
    session_id: str,
    job_id: str,
    limits: Limits,
    *,
    sha256: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> Imported:
    """Run the import job ``job_id`` of Model ``namespace/model_id`` from import session ``session_id``;
    idempotent (see :mod:`dockyard_operator.importing`). What the start call declared is read back from the session's
    metadata (:class:`~dockyard_core.upload.Upload`); ``sha256``: the file's SHA-256 sent with the
    completion call, verified when the start call sent none."""
    final = store.model_dir(namespace, model_id)
    manifest = _read_manifest(final)
    if manifest is not None and manifest.get("dockStatusId") == job_id:
        return Imported(
            store.relative(final),
            int(manifest["sizeBytes"]),
            str(manifest["sha256"]),
            manifest.get("format"),
            manifest.get("file"),
            sum(int(f.get("size", 0)) for f in manifest.get("files") or []),
            manifest.get("adapterBase"),
        )
    for stale in staging_dirs(store, namespace, model_id):  # left by a crash
        shutil.rmtree(stale, ignore_errors=True)

    meta = store.load(session_id)
    if meta is None:
        raise ImportFailed("UploadMissing", f"the chunks of import session {session_id} are gone")
    upload = meta.upload
    if sha256 and not upload.sha256:
        upload = upload.model_copy(update={"sha256": sha256})
    chunks = store.chunks(session_id)
    have = [c.number for c in chunks]
    if have != list(range(upload.total_chunks)):
        missing = sorted(set(range(upload.total_chunks)) - set(have))
        raise ImportFailed("UploadMissing", f"chunks {missing[:20]} of import session {session_id} are missing")
    paths = [store.chunk_path(session_id, n) for n in have]

    staging = store.models / namespace / f".staging-{model_id}-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    known: dict[str, str] = {}  # relative to staging -> SHA-256, hashed while written
    try:
        with ChunkReader(paths) as reader:
            if reader.size != upload.file_size:
                raise ImportFailed("SizeMismatch", f"received {reader.size} bytes, fileSize is {upload.file_size}")
            if upload.file_extension in ARCHIVE_EXTENSIONS:
                if progress:
                    progress("verifying")
                size, sha = digest(reader)
                verify(upload, size, sha)
                if progress:
                    progress("extracting")
                extraction = Extraction(staging, limits)
                buffered = io.BufferedReader(reader, COPY_BUFFER)
                if upload.file_extension == "zip":
                    extract_zip(buffered, extraction)
                else:
                    extract_tar(buffered, extraction)
                known = extraction.hashes
            else:
                if progress:
                    progress("copying")
                size, sha = _copy(reader, staging / _single_file_name(upload))
                verify(upload, size, sha)
                known = {_single_file_name(upload): sha}
        root = _model_root(staging)
        model_format, weights_file = check_model(root, upload.is_adapter)
        adapter_base = base_named_in(root) if upload.is_adapter else None
        inside = "" if root == staging else root.name + "/"
        files = list_files(root, {k.removeprefix(inside): v for k, v in known.items() if k.startswith(inside)})
        record = {
            "dockStatusId": job_id,
            "sizeBytes": size,
            "sha256": sha,
            "fileName": upload.file_name,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in files],
            "format": model_format,
            "file": weights_file,
            **({"adapterBase": adapter_base} if adapter_base else {}),
        }
        (root / MANIFEST).write_text(json.dumps(record))
        _fsync_tree(root)
        if final.exists():  # a directory of an earlier job of this Model: replace it
            old = final.with_name(f".staging-{model_id}-old-{uuid.uuid4().hex[:8]}")
            os.rename(final, old)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(root, final)
        with contextlib.suppress(OSError):
            fd = os.open(final.parent, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(fd)
            os.close(fd)
        total = sum(f.size for f in files)
        return Imported(store.relative(final), size, sha, model_format, weights_file, total, adapter_base)
    except OSError as exc:
        raise ImportFailed("StorageError", f"the model store failed: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def import_into(
    store: ModelStore,
    namespace: str,
    model_id: str,
    session_id: str,
    job_id: str,
    limits: Limits,
    *,
    sha256: str | None = None,
    work: Path,
) -> Imported:
    """:func:`run_import` on either backend. On S3 the session is staged in a fresh directory under
    ``work`` (local disk), imported there, and the model's files uploaded with the manifest last; a job
    whose manifest is in the bucket already is reported as done (idempotent like on a file system)."""
    if not isinstance(store, S3ModelStore):
        return run_import(store, namespace, model_id, session_id, job_id, limits, sha256=sha256)
    try:
        done = store.model_manifest(namespace, model_id)
        if done is not None and done.dock_status_id == job_id:
            return Imported(
                f"models/{namespace}/{model_id}",
                done.size_bytes,
                done.sha256,
                cast("ModelFormat | None", done.format),  # what the import itself recorded
                done.weights_file,
                done.total_bytes,
                done.adapter_base,
            )
        local = ModelStore(work / f"import-{uuid.uuid4().hex[:12]}")
        local.ensure()
        try:
            store.stage_session(session_id, local)
            imported = run_import(local, namespace, model_id, session_id, job_id, limits, sha256=sha256)
            manifest = local.model_manifest(namespace, model_id)
            assert manifest is not None
            store.upload_model(namespace, model_id, local.model_dir(namespace, model_id), manifest)
            return Imported(
                f"models/{namespace}/{model_id}",
                imported.size_bytes,
                imported.sha256,
                imported.format,
                imported.file,
                imported.files_bytes,
                imported.adapter_base,
            )
        finally:
            shutil.rmtree(local.root, ignore_errors=True)
    except DockyardError as exc:
        raise ImportFailed("StorageError", f"the model store failed: {exc.message}") from exc
    except OSError as exc:
        raise ImportFailed("StorageError", f"the local work directory failed: {exc}") from exc
