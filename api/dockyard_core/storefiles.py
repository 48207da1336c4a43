"""The model store's file primitives: atomic writes, byte-for-byte comparison, exclusive publication of a
chunk (``link(2)``), and the writer that streams one uploaded chunk to a temporary file."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dockyard_core.storeerrors import ChunkTooLarge

COPY_BUFFER = 1024 * 1024
IOV_MAX = 1024


@dataclass(frozen=True)
class ChunkInfo:
    number: int
    size: int


@dataclass(frozen=True)
class ReceivedChunk:
    """A chunk streamed to its temporary file."""

    path: Path
    size: int


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old content or the new one, never a part."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def same_bytes(a: Path, b: Path) -> bool:
    """Whether two files hold the same bytes (read block by block, never whole)."""
    if a.stat().st_size != b.stat().st_size:
        return False
    with a.open("rb") as fa, b.open("rb") as fb:
        while True:
            block = fa.read(COPY_BUFFER)
            if block != fb.read(COPY_BUFFER):
                return False
            if not block:
                return True


class ChunkWriter:
    """Streams one uploaded chunk to a temporary file, refusing more than ``limit`` bytes.

    No checksum is computed on the way: a re-sent chunk is compared byte for byte with the stored one
    (:func:`same_bytes`), which is exact and costs nothing for the chunks sent once (hashing every
    chunk while streaming took about a fifth of the facade's CPU time per byte; see docs/benchmarks.md).
    The whole file's SHA-256 is computed and verified by the import job."""

    def __init__(self, directory: Path, limit: int, *, fsync: bool = True) -> None:
        fd, name = tempfile.mkstemp(dir=directory, prefix=".part-")
        self._file = os.fdopen(fd, "wb", buffering=0)
        self.path = Path(name)
        self.limit = limit
        self.size = 0
        self.fsync = fsync

    def _written(self, n: int) -> None:
        """Count ``n`` bytes just written, and start writing them to the disk now (without waiting): the
        fsync of :meth:`finish` then waits for the last batch only, not for the whole chunk, so the disk
        works while the rest of the chunk is still arriving (``posix_fadvise(DONTNEED)`` starts the
        writeback of dirty pages on Linux; uploaded chunks are not read again soon)."""
        if n and self.advises:
            os.posix_fadvise(self._file.fileno(), self.size, n, os.POSIX_FADV_DONTNEED)
        self.size += n

    def fileno(self) -> int:
        return self._file.fileno()

    @property
    def advises(self) -> bool:
        """Whether each write is followed by the writeback hint of :meth:`_written` (whoever appends to
        :meth:`fileno` directly gives it too, then counts the bytes with :meth:`appended`)."""
        return self.fsync and hasattr(os, "posix_fadvise")

    def appended(self, n: int) -> None:
        """Count ``n`` bytes appended to :meth:`fileno` by someone else (with the writeback hint already
        given where :attr:`advises`)."""
        self.size += n

    def write_all(self, pieces: list[memoryview]) -> None:
        """Append the pieces with as few system calls as possible (``writev``); past ``limit`` the partial
        file is deleted and :class:`ChunkTooLarge` raised."""
        total = sum(len(p) for p in pieces)
        if self.size + total > self.limit:
            self.discard()
            raise ChunkTooLarge(f"the chunk is larger than {self.limit} bytes", {"maxChunkBytes": self.limit})
        fd = self._file.fileno()
        views = [memoryview(p) for p in pieces]
        while views:
            written = os.writev(fd, views[:IOV_MAX])
            while views and written >= len(views[0]):
                written -= len(views[0])
                views.pop(0)
            if views and written:
                views[0] = views[0][written:]
        self._written(total)

    def finish(self) -> ReceivedChunk:
        if self.fsync:
            os.fsync(self._file.fileno())
        self._file.close()
        return ReceivedChunk(self.path, self.size)

    def discard(self) -> None:
        if not self._file.closed:
            self._file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def link_exclusive(src: Path, dst: Path) -> None:
    """Create ``dst`` as ``src`` atomically, failing with FileExistsError if it exists.

    ``link(2)`` where the file system has hard links; elsewhere a rename after an existence check (a
    narrow race between two different copies of one chunk remains there)."""
    try:
        os.link(src, dst)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        if dst.exists():
            raise FileExistsError(errno.EEXIST, "chunk exists", str(dst)) from exc
        os.replace(src, dst)
