"""The streaming multipart parser of a chunk upload: bytes go to the store's temporary file, never into
memory as a whole; errors stop the read and leave no file behind."""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx
import pytest
from python_multipart.multipart import MultipartParser

from dockyard_api.public.imports import chunks
from dockyard_api.public.imports.chunks import FLUSH_BYTES, MAX_GATHERED_BYTES, ChunkUpload, UnsupportedMediaType
from dockyard_core.errors import DockyardError
from dockyard_core.modelstore import ModelStore, SessionMeta
from dockyard_core.storeerrors import ChunkTooLarge, InvalidChunkNumber, parse_chunk_number
from dockyard_core.storefiles import ChunkWriter, ReceivedChunk
from dockyard_core.upload import InvalidUpload, Upload

LIMIT = 256 * 1024


def encoded(fields: list[tuple[str, tuple[str, bytes] | str]]) -> tuple[str, bytes]:
    """A multipart body with the parts in the given order (httpx puts data before files, so build it)."""
    boundary = "----dockyard-test-boundary"
    out = b""
    for name, value in fields:
        out += f"--{boundary}\r\n".encode()
        if isinstance(value, tuple):
            out += f'Content-Disposition: form-data; name="{name}"; filename="{value[0]}"\r\n'.encode()
            out += b"Content-Type: application/octet-stream\r\n\r\n" + value[1] + b"\r\n"
        else:
            out += f'Content-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
    out += f"--{boundary}--\r\n".encode()
    return f"multipart/form-data; boundary={boundary}", out


class Harness:
    def __init__(self, tmp_path: Path, total_chunks: int = 10) -> None:
        self.store = ModelStore(tmp_path)
        self.store.ensure()
        now = datetime.now(UTC)
        declared = Upload(file_context="model", file_name="m.tar", file_extension="tar", file_size=10**9,
                          total_chunks=total_chunks)  # fmt: skip
        self.meta = SessionMeta("d" * 32, "ns", "env", "m", declared, now, now + timedelta(hours=1))
        self.store.create(self.meta)
        self.opened = 0
        self.pieces = 0

    def open_writer(self) -> ChunkWriter:
        self.opened += 1
        return self.store.writer(self.meta, LIMIT)

    def check(self, raw: str) -> int:
        return parse_chunk_number(raw, self.meta.upload.total_chunks)

    def temp_files(self) -> list[str]:
        return [p.name for p in self.store.chunks_dir(self.meta.session_id).iterdir()]

    def read(self, content_type: str | None, body: bytes, piece: int = 7000) -> tuple[int, ReceivedChunk]:
        async def stream() -> AsyncIterator[bytes]:
            for i in range(0, len(body), piece):
                self.pieces += 1
                yield body[i : i + piece]

        async def go() -> tuple[int, ReceivedChunk]:
            return await ChunkUpload(self.open_writer, self.check).read(content_type, stream())

        return anyio.run(go)


@pytest.mark.parametrize("file_first", [True, False])
def test_the_file_part_is_streamed_to_a_temporary_file(tmp_path: Path, file_first: bool) -> None:
    h = Harness(tmp_path)
    data = bytes(range(256)) * 800  # 200 KiB, crosses many stream pieces, contains CR/LF and "--"
    parts: list[tuple[str, tuple[str, bytes] | str]] = [("file", ("blob", data)), ("chunkNumber", "7")]
    ctype, body = encoded(parts if file_first else parts[::-1])
    number, chunk = h.read(ctype, body)
    assert number == 7
    assert chunk.size == len(data)
    assert chunk.path.read_bytes() == data
    assert h.temp_files() == [chunk.path.name]


def test_httpx_multipart_with_extra_fields_parses(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    request = httpx.Request("POST", "http://x/", data={"chunkNumber": "3", "note": "x" * 500},
                            files={"file": ("c", b"abc", "application/octet-stream")})  # fmt: skip
    number, chunk = h.read(request.headers["content-type"], request.read())
    assert (number, chunk.size) == (3, 3)


def test_a_bad_chunk_number_sent_first_stops_before_the_file_is_read(tmp_path: Path) -> None:
    h = Harness(tmp_path, total_chunks=5)
    ctype, body = encoded([("chunkNumber", "5"), ("file", ("blob", b"x" * 200_000))])
    with pytest.raises(InvalidChunkNumber):
        h.read(ctype, body, piece=1000)
    assert h.opened == 0, "no temporary file was created"
    assert h.pieces < 5, "the file part was not read"


def test_a_bad_chunk_number_after_the_file_deletes_the_file(tmp_path: Path) -> None:
    h = Harness(tmp_path, total_chunks=5)
    ctype, body = encoded([("file", ("blob", b"x" * 1000)), ("chunkNumber", "abc")])
    with pytest.raises(InvalidChunkNumber):
        h.read(ctype, body)
    assert h.opened == 1
    assert h.temp_files() == []


def test_a_chunk_over_the_limit_stops_the_read_and_deletes_the_file(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    ctype, body = encoded([("chunkNumber", "1"), ("file", ("blob", b"x" * (4 * LIMIT)))])
    with pytest.raises(ChunkTooLarge) as err:
        h.read(ctype, body, piece=8192)
    assert err.value.status_code == 413
    assert h.pieces * 8192 < 2 * LIMIT, "reading stopped soon after the limit"
    assert h.temp_files() == []


@pytest.mark.parametrize(
    ("parts", "error", "fragment"),
    [
        ([("chunkNumber", "1")], InvalidUpload, "file"),
        ([("file", ("blob", b"x"))], InvalidUpload, "chunkNumber"),
        ([("chunkNumber", "1"), ("chunkNumber", "2"), ("file", ("b", b"x"))], InvalidUpload, "twice"),
        ([("file", ("a", b"x")), ("file", ("b", b"y")), ("chunkNumber", "1")], InvalidUpload, "more than one"),
        ([("chunkNumber", "1" * 100), ("file", ("b", b"x"))], InvalidUpload, "too long"),
    ],
)
def test_incomplete_or_odd_forms_are_refused(
    tmp_path: Path, parts: list[tuple[str, tuple[str, bytes] | str]], error: type[DockyardError], fragment: str
) -> None:
    h = Harness(tmp_path)
    ctype, body = encoded(parts)
    with pytest.raises(error) as err:
        h.read(ctype, body)
    assert fragment in err.value.message
    assert h.temp_files() == []


def test_a_truncated_body_is_refused(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    ctype, body = encoded([("chunkNumber", "1"), ("file", ("b", b"x" * 5000))])
    with pytest.raises(InvalidUpload, match="missing or incomplete"):
        h.read(ctype, body[:3000])
    assert h.temp_files() == []


@pytest.mark.parametrize("ctype", [None, "application/json", "multipart/form-data", "text/plain; boundary=x"])
def test_other_content_types_are_415(tmp_path: Path, ctype: str | None) -> None:
    with pytest.raises(UnsupportedMediaType) as err:
        Harness(tmp_path).read(ctype, b"{}")
    assert err.value.status_code == 415


class SlowWriter(ChunkWriter):
    """A real writer whose first batch's write blocks until released (a write thread late to run)."""

    def __init__(self, directory: Path, limit: int) -> None:
        super().__init__(directory, limit, fsync=False)
        self.release = threading.Event()
        self.batches: list[int] = []

    def write_all(self, pieces: list[memoryview]) -> None:
        if not self.batches:
            assert self.release.wait(10), "the write was never released"
        self.batches.append(sum(len(p) for p in pieces))
        super().write_all(pieces)


def test_receipt_goes_on_while_a_batch_is_written_within_the_gathering_bound(tmp_path: Path) -> None:
    """While a batch is being written the stream is read on (gathering the pieces), up to
    MAX_GATHERED_BYTES; only then does the receipt wait for the write. Every byte reaches the file."""
    h = Harness(tmp_path)
    size = 12 * 1024 * 1024
    data = os.urandom(size)
    ctype, body = encoded([("chunkNumber", "3"), ("file", ("blob", data))])
    writer = SlowWriter(h.store.chunks_dir(h.meta.session_id), size)
    piece = 256 * 1024
    position = 0
    read_when_it_waited: list[int] = []

    async def stream() -> AsyncIterator[bytes]:
        nonlocal position
        for i in range(0, len(body), piece):
            position = i + piece
            yield body[i : i + piece]

    async def release_when_waiting() -> None:
        # the stream never awaits, so this task runs only once the receipt awaits the blocked write
        await anyio.sleep(0.05)
        read_when_it_waited.append(position)
        writer.release.set()

    async def go() -> tuple[int, ReceivedChunk]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(release_when_waiting)
            return await ChunkUpload(lambda: writer, h.check).read(ctype, stream())

    number, chunk = anyio.run(go)
    assert number == 3
    assert chunk.path.read_bytes() == data
    # it read on past the first batch while its write was blocked, and stopped at the bound
    assert FLUSH_BYTES + MAX_GATHERED_BYTES <= read_when_it_waited[0] <= FLUSH_BYTES + MAX_GATHERED_BYTES + 2 * piece
    assert writer.batches[0] >= FLUSH_BYTES
    assert writer.batches[1] >= MAX_GATHERED_BYTES
    assert max(writer.batches) <= MAX_GATHERED_BYTES + piece


class CountingParser(MultipartParser):
    writes = 0

    def write(self, data: bytes) -> int:
        CountingParser.writes += 1
        return super().write(data)


def test_file_pieces_without_a_delimiter_skip_the_parser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside the file part, a piece that holds no delimiter (nor the start of one at its end) is taken as
    file data after one search, without the parser: only the first piece (the headers) and the last (the
    closing delimiter) go through it."""
    monkeypatch.setattr(chunks, "MultipartParser", CountingParser)
    CountingParser.writes = 0
    h = Harness(tmp_path)
    data = os.urandom(LIMIT).replace(b"\r", b"\n")  # no CR: no delimiter can start anywhere
    ctype, body = encoded([("chunkNumber", "2"), ("file", ("blob", data))])
    number, chunk = h.read(ctype, body, piece=16 * 1024)
    assert (number, chunk.path.read_bytes()) == (2, data)
    assert h.pieces == len(body) // (16 * 1024) + 1
    assert CountingParser.writes == 2


@pytest.mark.parametrize("piece", [1, 2, 5, 29, 30, 31, 97, 1000, 4096])
def test_delimiter_prefixes_in_the_file_data_are_data(tmp_path: Path, piece: int) -> None:
    """File data full of prefixes of the delimiter, cut at every piece size around the delimiter's length:
    whether a piece is taken by the fast path or the parser, the file holds exactly the data."""
    boundary = b"\r\n------dockyard-test-boundary"
    data = b"".join(boundary[:k] + bytes([k]) * (k % 7) for k in range(len(boundary))) * 20
    data += b"\r\n--" + os.urandom(3000) + boundary[:-1]  # ends with all of the delimiter but its last byte
    ctype, body = encoded([("file", ("blob", data)), ("chunkNumber", "4")])
    number, chunk = Harness(tmp_path).read(ctype, body, piece=piece)
    assert (number, chunk.path.read_bytes()) == (4, data)


def test_the_delimiter_search_matches_bytes_find() -> None:
    delimiter = b"\r\n--dockyard"
    for data in (b"", b"x" * 100, b"\r\n--dockyar", b"ab\r\n--dockyardcd", os.urandom(5000) + delimiter):
        assert chunks.has_delimiter(data, delimiter) == (data.find(delimiter) >= 0)
