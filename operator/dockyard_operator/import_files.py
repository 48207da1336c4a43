"""Processing of a completed chunked upload (pure file work, no Kubernetes): the operator's import job.

:func:`run_import` turns the chunks of a session into ``models/<namespace>/<modelId>/`` of the model
store, or raises :class:`ImportFailed` with a CamelCase reason and a message:

1. The chunks are read in order as one file (:class:`ChunkReader`, no assembled copy on disk for
   archives); its size must be ``fileSize`` (``SizeMismatch``) and, when the start call gave one, its
   SHA-256 must match (``ChecksumMismatch``). A session whose chunks are gone fails (``UploadMissing``).
2. A single weights file (safetensors, gguf, bin, pt, pth) is copied into the model directory under its
   file name. A tar, tar.gz/tgz or zip archive is extracted safely (:func:`extract`): only regular files
   and directories; absolute paths, ``..``, backslashes, drive letters, control characters, symbolic
   links, device files and FIFOs are refused (``UnsafeArchive``); a hard link becomes a copy of an
   earlier regular member of the archive; at most ``max_members`` members and ``max_extracted_bytes``
   bytes (``ArchiveTooLarge``); an unreadable archive is ``InvalidArchive``. ``__MACOSX/`` entries are
   skipped. When everything sits in one top-level directory, that directory is the model.
3. The model must look like one (:func:`check_model`, ``InvalidModel``): its top level holds
   ``config.json`` (a JSON object) or, for an adapter, ``adapter_config.json``, or at least one weights
   file (``*.safetensors``, ``*.bin`` — also CTranslate2's ``model.bin`` —, ``*.gguf``, ``*.pt``,
   ``*.pth``); every ``*.safetensors`` file has a valid header and every ``*.gguf`` file the GGUF magic.

Everything is written to a staging directory beside the destination and renamed into place at the end,
with a manifest (``.dockyard-import.json``) naming the job: re-running the same job after a crash finds
the finished directory and reports it, or starts over from the chunks.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import re
import shutil
import stat
import struct
import tarfile
import uuid
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from dockyard_core.errors import DockyardError
from dockyard_core.modelformats import ModelFormat, detect_format, main_file
from dockyard_core.modelmanifest import MANIFEST, list_files
from dockyard_core.modelstore import ModelStore
from dockyard_core.s3store import S3ModelStore
from dockyard_core.storefiles import COPY_BUFFER
from dockyard_core.upload import ARCHIVE_EXTENSIONS, WEIGHT_EXTENSIONS, Upload

WEIGHT_SUFFIXES = tuple(f".{ext}" for ext in WEIGHT_EXTENSIONS)
MAX_DEPTH = 32
MAX_NAME_BYTES = 255
SKIPPED_TOP = ("__MACOSX",)


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


# --- reading the chunks as one file -----------------------------------------------------------------


class ChunkReader(io.RawIOBase):
    """The chunk files, in order, as one read-only, seekable file."""

    def __init__(self, paths: list[Path]) -> None:
        super().__init__()
        self.paths = paths
        self.sizes = [p.stat().st_size for p in paths]
        self.starts: list[int] = []
        offset = 0
        for size in self.sizes:
            self.starts.append(offset)
            offset += size
        self.size = offset
        self.pos = 0
        self._index = -1
        self._file: io.BufferedReader | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self.pos = base + offset
        return self.pos

    def readinto(self, buffer: Any) -> int:
        """Fill ``buffer`` as far as the file goes (across chunk boundaries: no short reads before EOF)."""
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self.pos < self.size:
            done += self._read_some(view[done:])
        return done

    def _read_some(self, view: memoryview) -> int:
        index = self._locate(self.pos)
        if index != self._index:
            if self._file is not None:
                self._file.close()
            self._file = self.paths[index].open("rb")
            self._index = index
        assert self._file is not None
        within = self.pos - self.starts[index]
        self._file.seek(within)
        want = min(len(view), self.sizes[index] - within)
        got = self._file.readinto(view[:want]) or 0
        if got == 0:
            raise ImportFailed("UploadMissing", f"chunk {index} ended early (changed on disk?)")
        self.pos += got
        return got

    def _locate(self, pos: int) -> int:
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        while self.sizes[lo] == 0 and lo + 1 < len(self.starts):
            lo += 1
        return lo

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()


def digest(reader: ChunkReader) -> tuple[int, str]:
    """Size and SHA-256 of the whole file."""
    reader.seek(0)
    sha = hashlib.sha256()
    size = 0
    buffer = bytearray(COPY_BUFFER)
    while got := reader.readinto(buffer):
        sha.update(memoryview(buffer)[:got])
        size += got
    reader.seek(0)
    return size, sha.hexdigest()


def _verify(upload: Upload, size: int, sha: str) -> None:
    if size != upload.file_size:
        raise ImportFailed("SizeMismatch", f"received {size} bytes, fileSize is {upload.file_size}")
    if upload.sha256 and sha != upload.sha256:
        raise ImportFailed("ChecksumMismatch", f"the file's SHA-256 is {sha}, the client said {upload.sha256}")


# --- safe extraction ---------------------------------------------------------------------------------

_DRIVE = re.compile(r"^[A-Za-z]:")


def safe_member_path(name: str) -> str:
    """The archive member's path, relative and normalised, or UnsafeArchive. "" for the root itself."""
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ImportFailed("UnsafeArchive", f"member {name!r} has control characters in its name")
    if "\\" in name:
        raise ImportFailed("UnsafeArchive", f"member {name!r} has a backslash in its name")
    if name.startswith("/") or _DRIVE.match(name):
        raise ImportFailed("UnsafeArchive", f"member {name!r} has an absolute path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ImportFailed("UnsafeArchive", f"member {name!r} points outside the archive ('..')")
    if len(parts) > MAX_DEPTH:
        raise ImportFailed("UnsafeArchive", f"member {name!r} is nested deeper than {MAX_DEPTH} directories")
    if any(len(p.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES for p in parts):
        raise ImportFailed("UnsafeArchive", f"member {name!r} has a name component longer than {MAX_NAME_BYTES} bytes")
    return "/".join(parts)


class Extraction:
    """Writes members under ``root`` (which contains no links, so no path can leave it), counting."""

    def __init__(self, root: Path, limits: Limits) -> None:
        self.root = root
        self.limits = limits
        self.members = 0
        self.bytes = 0
        self.kinds: dict[str, str] = {}  # relative path -> "file" | "dir"
        self.hashes: dict[str, str] = {}  # relative path -> SHA-256 of the file written

    def _count(self) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise ImportFailed("ArchiveTooLarge", f"the archive has more than {self.limits.max_members} members")

    def _claim(self, rel: str, kind: str) -> Path:
        parts = rel.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if self.kinds.get(parent) == "file":
                raise ImportFailed("InvalidArchive", f"member {rel!r} is inside {parent!r}, which is a file")
            self.kinds[parent] = "dir"
        existing = self.kinds.get(rel)
        if existing is not None and (existing == "file" or kind == "file"):
            raise ImportFailed("InvalidArchive", f"member {rel!r} appears more than once")
        self.kinds[rel] = kind
        return self.root.joinpath(*parts)

    def directory(self, name: str) -> None:
        self._count()
        rel = safe_member_path(name)
        if rel and not rel.startswith(SKIPPED_TOP):
            self._claim(rel, "dir").mkdir(mode=0o755, parents=True, exist_ok=True)

    def file(self, name: str, source: IO[bytes]) -> None:
        self._count()
        rel = safe_member_path(name)
        if not rel:
            raise ImportFailed("InvalidArchive", f"member {name!r} is a file without a name")
        if rel.split("/")[0] in SKIPPED_TOP:
            return
        target = self._claim(rel, "file")
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        sha = hashlib.sha256()
        with os.fdopen(os.open(target, flags, 0o644), "wb") as out:
            while block := source.read(COPY_BUFFER):
                self.bytes += len(block)
                if self.bytes > self.limits.max_extracted_bytes:
                    raise ImportFailed(
                        "ArchiveTooLarge", f"the archive expands to more than {self.limits.max_extracted_bytes} bytes"
                    )
                sha.update(block)
                out.write(block)
        self.hashes[rel] = sha.hexdigest()

    def hardlink(self, name: str, target_name: str) -> None:
        rel_target = safe_member_path(target_name)
        if self.kinds.get(rel_target) != "file":
            raise ImportFailed(
                "UnsafeArchive",
                f"hard link {name!r} points to {target_name!r}, which is not an earlier file of the archive",
            )
        with self.root.joinpath(*rel_target.split("/")).open("rb") as source:
            self.file(name, source)


def extract_tar(reader: IO[bytes], extraction: Extraction) -> None:
    try:
        with tarfile.open(fileobj=reader, mode="r:*") as tar:
            for member in tar:
                if member.isdir():
                    extraction.directory(member.name)
                elif member.isreg():
                    source = tar.extractfile(member)
                    assert source is not None
                    extraction.file(member.name, source)
                elif member.islnk():
                    extraction.hardlink(member.name, member.linkname)
                elif member.issym():
                    raise ImportFailed(
                        "UnsafeArchive", f"member {member.name!r} is a symbolic link (to {member.linkname!r})"
                    )
                else:
                    raise ImportFailed("UnsafeArchive", f"member {member.name!r} is a device file or FIFO")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        if isinstance(exc, OSError) and _is_storage_error(exc):
            raise
        raise ImportFailed("InvalidArchive", f"the tar archive cannot be read: {exc}") from exc


def extract_zip(reader: IO[bytes], extraction: Extraction) -> None:
    try:
        with zipfile.ZipFile(reader) as archive:
            for info in archive.infolist():
                mode = info.external_attr >> 16
                if info.flag_bits & 0x1:
                    raise ImportFailed("InvalidArchive", f"member {info.filename!r} is encrypted")
                if stat.S_ISLNK(mode):
                    raise ImportFailed("UnsafeArchive", f"member {info.filename!r} is a symbolic link")
                if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):  # 0: no type recorded
                    raise ImportFailed("UnsafeArchive", f"member {info.filename!r} is a device file or FIFO")
                if info.is_dir():
                    extraction.directory(info.filename)
                else:
                    with archive.open(info) as source:
                        extraction.file(info.filename, source)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, zlib.error, NotImplementedError, OSError) as exc:
        if isinstance(exc, OSError) and _is_storage_error(exc):
            raise
        raise ImportFailed("InvalidArchive", f"the zip archive cannot be read: {exc}") from exc


def _is_storage_error(exc: OSError) -> bool:
    """An error of the destination (disk full, read-only, permissions), not of the archive's bytes."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EIO)


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


def _check_gguf(path: Path) -> None:
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise ImportFailed("InvalidModel", f"{path.name} does not start with the GGUF magic")


def _check_json_object(path: Path) -> None:
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ImportFailed("InvalidModel", f"{path.name} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ImportFailed("InvalidModel", f"{path.name} is not a JSON object")


def check_model(root: Path, is_adapter: bool) -> tuple[ModelFormat | None, str | None]:
    """The rule of the module docstring, step 3; returns the format of the weights and, for GGUF, the
    file an engine loads."""
    files = {p.name: p for p in root.iterdir() if p.is_file() and not p.is_symlink() and p.name != MANIFEST}
    weights = [p for name, p in files.items() if name.lower().endswith(WEIGHT_SUFFIXES)]
    for path in weights:
        if path.name.lower().endswith(".safetensors"):
            _check_safetensors(path)
        elif path.name.lower().endswith(".gguf"):
            _check_gguf(path)
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
    idempotent (see module docstring). What the start call declared is read back from the session's
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
                _verify(upload, size, sha)
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
                _verify(upload, size, sha)
                known = {_single_file_name(upload): sha}
        root = _model_root(staging)
        model_format, weights_file = check_model(root, upload.is_adapter)
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
        return Imported(store.relative(final), size, sha, model_format, weights_file, sum(f.size for f in files))
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
            )
        finally:
            shutil.rmtree(local.root, ignore_errors=True)
    except DockyardError as exc:
        raise ImportFailed("StorageError", f"the model store failed: {exc.message}") from exc
    except OSError as exc:
        raise ImportFailed("StorageError", f"the local work directory failed: {exc}") from exc
