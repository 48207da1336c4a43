"""Safe extraction of an uploaded tar or zip archive (the rules of step 2 in
:mod:`dockyard_operator.importing`): only regular files and directories, within the limits."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import IO

from dockyard_core.storefiles import COPY_BUFFER
from dockyard_operator.importing.results import ImportFailed, Limits

MAX_DEPTH = 32
MAX_NAME_BYTES = 255
SKIPPED_TOP = ("__MACOSX",)

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
