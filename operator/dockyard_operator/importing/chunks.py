"""The chunks of an import session read in order as one file (no assembled copy on disk), and their
size and SHA-256 checked against what the start call declared."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

from dockyard_core.storefiles import COPY_BUFFER
from dockyard_core.upload import Upload
from dockyard_operator.importing.results import ImportFailed


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


def verify(upload: Upload, size: int, sha: str) -> None:
    if size != upload.file_size:
        raise ImportFailed("SizeMismatch", f"received {size} bytes, fileSize is {upload.file_size}")
    if upload.sha256 and sha != upload.sha256:
        raise ImportFailed("ChecksumMismatch", f"the file's SHA-256 is {sha}, the client said {upload.sha256}")
