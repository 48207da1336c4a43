"""Streaming parser of one chunk upload (``multipart/form-data`` with the fields ``file`` and
``chunkNumber``): the file part goes straight from the request stream to a temporary file of the model
store, in batches of :data:`FLUSH_BYTES` (larger, up to :data:`MAX_GATHERED_BYTES`, while the previous
batch is still being written), so no chunk is ever held in memory (the pieces received are written as they
are, without copying them into a buffer first). Inside the file part, a piece that holds no delimiter is
taken as file data after one search with the C library's ``memmem``, without going through the parser.
Where the server offers it (``dockyard_api.server.RawBody``), the rest of the body after the file data has
begun is read from the socket by one thread, which takes each read the same way and writes it at once (where
``dockyard_core._pump`` was built, the reads of plain file data are appended in C without the GIL:
:meth:`ChunkUpload._raw_file`).

The ``file`` part may come before or after ``chunkNumber``; when ``chunkNumber`` comes first it is
checked before the file is read. Past the chunk limit the parser stops reading and the temporary file
is deleted (413); the server discards the rest of the request body without storing it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

import anyio
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header

from dockyard_api.server import RawFile
from dockyard_core.storeerrors import ChunkTooLarge
from dockyard_core.storefiles import ChunkWriter, ReceivedChunk
from dockyard_core.upload import InvalidUpload

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

FLUSH_BYTES = 1024 * 1024
"""Bytes gathered before they are handed to a worker thread to be written, when no write is in flight."""
MAX_GATHERED_BYTES = 4 * 1024 * 1024
"""While a batch is being written, the pieces received meanwhile are gathered up to this many bytes before
the receipt waits for the write: the request stream is read on while the write thread works (waiting at
every 1 MiB stalled the receipt for about a quarter of its time on a loaded machine, the write thread
being late to get the GIL back; docs/benchmarks.md). At most one batch is written and one gathered, so an
upload holds at most 2 x MAX_GATHERED_BYTES, whatever the chunk's size."""
WRITES = ThreadPoolExecutor(max_workers=16, thread_name_prefix="chunk-writes")
"""The threads that write the batches. A batch is handed over about a thousand times per uploaded GiB;
``submit`` and ``asyncio.wrap_future`` cost a fraction of anyio's ``to_thread`` (capacity limiter,
cancel scope and checkpoints on every call; profiled in docs/benchmarks.md)."""
MAX_FIELD_BYTES = 64
MAX_HEADER_BYTES = 8 * 1024
MAX_PARTS = 16
T = TypeVar("T")


class RawReader(Protocol):
    """What :meth:`ChunkUpload.read` uses of the server's :class:`~dockyard_api.server.RawBody`."""

    def ready(self) -> bool: ...

    async def read(
        self,
        consume: Callable[[memoryview], None],
        plain_file: Callable[[], RawFile | None] | None = None,
        then: Callable[[], T] | None = None,
    ) -> T | None: ...


def _libc_memmem() -> Callable[[bytes, int, bytes, int], int | None] | None:
    try:
        memmem = ctypes.CDLL(None).memmem
    except (AttributeError, OSError):
        return None
    memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]  # bytes or an address
    memmem.restype = ctypes.c_void_p
    return cast("Callable[[bytes, int, bytes, int], int | None]", memmem)


_MEMMEM = _libc_memmem()


def has_delimiter(data: bytes | memoryview, delimiter: bytes) -> bool:
    """Whether ``delimiter`` occurs in ``data`` (bytes, or a view of a writable buffer: a raw read's): the C
    library's ``memmem`` where there is one (two to three times faster than ``bytes.find`` on a body piece, and
    it runs without the GIL, so the write threads go on meanwhile; docs/benchmarks.md), else ``bytes.find``."""
    if _MEMMEM is None:
        return (data if type(data) is bytes else bytes(data)).find(delimiter) >= 0
    if type(data) is bytes:
        return _MEMMEM(data, len(data), delimiter, len(delimiter)) is not None
    start = ctypes.addressof(ctypes.c_char.from_buffer(data)) if len(data) else 0
    return _MEMMEM(ctypes.c_void_p(start), len(data), delimiter, len(delimiter)) is not None  # type: ignore[arg-type]


def _plain(data: bytes | memoryview, delimiter: bytes) -> bool:
    """Whether ``data`` holds neither ``delimiter`` nor the start of one at its end (then, inside the file part,
    it is all file data)."""
    if has_delimiter(data, delimiter):
        return False
    end = bytes(data[max(0, len(data) - len(delimiter) + 1) :])  # at most the delimiter's length
    tail = end.rfind(delimiter[:1])
    return tail < 0 or not delimiter.startswith(end[tail:])


Publish = Callable[[int, ReceivedChunk], bool]
"""What :meth:`ChunkUpload.read` does with the received chunk right after its flush, in the same thread call (the
model store's publication: whether the chunk is new)."""


class UnsupportedMediaType(InvalidUpload):
    status_code = 415
    code = "unsupported_media_type"


class ChunkUpload:
    """One request's parse state. ``open_writer`` creates the temporary file when the file part starts;
    ``check_number`` validates ``chunkNumber`` as soon as it is complete."""

    def __init__(self, open_writer: Callable[[], ChunkWriter], check_number: Callable[[str], int]) -> None:
        self.open_writer = open_writer
        self.check_number = check_number
        self.number: int | None = None
        self.writer: ChunkWriter | None = None
        self.file_done = False
        self._parts = 0
        self._header_bytes = 0
        self._header_name = b""
        self._header_value = b""
        self._disposition = b""
        self._part: str | None = None  # "file", "chunkNumber" or "other"
        self._field = bytearray()
        self._pending: list[memoryview] = []  # views of the received pieces: no copy before the disk
        self._pending_bytes = 0
        self._writing: Future[object] | None = None
        self._received = 0
        self.raw = False
        """Whether the rest of the body was read raw (:meth:`read`'s ``raw``)."""
        self.published: bool | None = None
        """What :meth:`read`'s ``publish`` answered (None: it was not given)."""

    # -- python-multipart callbacks (synchronous, called from parser.write) --

    def _on_part_begin(self) -> None:
        self._parts += 1
        if self._parts > MAX_PARTS:
            raise InvalidUpload(f"more than {MAX_PARTS} form parts")
        self._header_bytes = 0
        self._disposition = b""
        self._part = None
        self._field = bytearray()

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]
        self._count_header(end - start)

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]
        self._count_header(end - start)

    def _count_header(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > MAX_HEADER_BYTES:
            raise InvalidUpload(f"a form part has more than {MAX_HEADER_BYTES} bytes of headers")

    def _on_header_end(self) -> None:
        if self._header_name.strip().lower() == b"content-disposition":
            self._disposition = self._header_value
        self._header_name = b""
        self._header_value = b""

    def _on_headers_finished(self) -> None:
        _, options = parse_options_header(self._disposition)
        name = options.get(b"name")
        if name == b"file":
            if self.writer is not None:
                raise InvalidUpload("the form has more than one file part", {"field": "file"})
            self.writer = self.open_writer()
            self._part = "file"
        elif name == b"chunkNumber":
            self._part = "chunkNumber"
        else:
            self._part = "other"

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._part == "file":
            assert self.writer is not None
            self._received += end - start
            if self._received > self.writer.limit:
                raise ChunkTooLarge(
                    f"the chunk is larger than {self.writer.limit} bytes", {"maxChunkBytes": self.writer.limit}
                )
            self._pending.append(memoryview(data)[start:end])
            self._pending_bytes += end - start
        else:
            self._field += data[start:end]
            if len(self._field) > MAX_FIELD_BYTES:
                if self._part == "chunkNumber":
                    raise InvalidUpload("chunkNumber is too long", {"field": "chunkNumber"})
                self._field.clear()  # other fields are ignored

    def _on_part_end(self) -> None:
        if self._part == "file":
            self.file_done = True
        elif self._part == "chunkNumber":
            if self.number is not None:
                raise InvalidUpload("chunkNumber is given twice", {"field": "chunkNumber"})
            self.number = self.check_number(self._field.decode("utf-8", "replace"))
        self._part = None

    # -- driving --

    async def read(
        self,
        content_type: str | None,
        stream: AsyncIterator[bytes],
        raw: RawReader | None = None,
        publish: Publish | None = None,
    ) -> tuple[int, ReceivedChunk]:
        """Parse the whole request; return the chunk number and the received chunk (its temporary file).
        On any error the temporary file is deleted and the error raised. ``raw``: the request's
        :class:`~dockyard_api.server.RawBody` (when the server offers one): once the file part's data has
        begun and nothing is in flight, the rest of the body is read and written by one thread
        (:meth:`_take_raw`), not through the event loop. ``publish``: called with the chunk number and the
        received chunk in the thread that flushed it, right after the flush (no hop back to the event loop and
        out again; with a raw read, the reading thread itself: :meth:`_finish`); what it answered is
        :attr:`published`."""
        kind, params = parse_options_header(content_type or "")
        if kind != b"multipart/form-data" or not params.get(b"boundary"):
            raise UnsupportedMediaType(
                "the chunk must be sent as multipart/form-data with the fields file and chunkNumber",
                {"contentType": (content_type or "")[:200]},
            )
        callbacks = {
            "on_part_begin": self._on_part_begin,
            "on_part_data": self._on_part_data,
            "on_part_end": self._on_part_end,
            "on_header_field": self._on_header_field,
            "on_header_value": self._on_header_value,
            "on_header_end": self._on_header_end,
            "on_headers_finished": self._on_headers_finished,
        }
        parser = MultipartParser(params[b"boundary"], cast("MultipartCallbacks", callbacks))
        try:
            async for data in stream:
                if not self._file_data_only(parser, data):
                    parser.write(data)
                if raw is not None and self._in_file_data(parser) and raw.ready():
                    await self._written()  # the batch in flight goes first: the raw reads write in order
                    if raw.ready():  # again: the stream may have received a piece meanwhile
                        self.raw = True
                        read_raw = await raw.read(
                            lambda view: self._take_raw(parser, view),
                            lambda: self._raw_file(parser),
                            lambda: self._finish(parser, publish),  # the end of the chunk in the reading thread
                        )
                        assert read_raw is not None
                        return read_raw
                if self._pending_bytes >= FLUSH_BYTES:
                    await self._flush(wait=self._pending_bytes >= MAX_GATHERED_BYTES)
            self._complete(parser)
            await self._written()
            finishing = WRITES.submit(self._finish, None, publish)  # one hop: last batch, fsync, publication
            self._writing = cast("Future[object]", finishing)
            finished: tuple[int, ReceivedChunk] = await asyncio.wrap_future(finishing)
            self._writing = None
            return finished
        except FormParserError as exc:
            await self._discard()
            raise InvalidUpload(f"the multipart body is malformed: {exc}") from exc
        except BaseException:
            await self._discard()
            raise

    def _complete(self, parser: MultipartParser) -> None:
        """The end of the body: the parse complete (the closing delimiter seen) and both fields there."""
        parser.finalize()
        if self.writer is None or not self.file_done:
            raise InvalidUpload("the form field file is missing or incomplete", {"field": "file"})
        if self.number is None:
            raise InvalidUpload("the form field chunkNumber is missing", {"field": "chunkNumber"})

    def _finish(self, parser: MultipartParser | None, publish: Publish | None) -> tuple[int, ReceivedChunk]:
        """In a thread, once the whole body was read: the parse completed (where ``parser`` is given: a raw read,
        whose last reads this thread parsed), the last pieces written, the chunk flushed (fsync), then
        ``publish``. The received chunk's number and file."""
        if parser is not None:
            self._complete(parser)
        writer, number = self.writer, self.number
        assert writer is not None
        assert number is not None
        pieces, self._pending, self._pending_bytes = self._pending, [], 0
        if pieces:
            writer.write_all(pieces)
        received = writer.finish()
        if publish is not None:
            self.published = publish(number, received)
        return number, received

    def _in_file_data(self, parser: MultipartParser) -> bool:
        """Whether the parser is inside the file part's data with no partial delimiter carried: a piece
        without a delimiter then is file data as it is."""
        return (
            self._part == "file"
            and parser.state == MultipartState.PART_DATA
            and parser.index == 0
            and parser.marks.get("part_data") == 0
        )

    def _file_data_only(self, parser: MultipartParser, data: bytes) -> bool:
        """Take ``data`` as file data, without the parser, when the parser is inside the file part with no
        partial delimiter carried and ``data`` holds neither a delimiter nor the start of one at its end:
        exactly what the parser would do with it (one ``part_data`` callback of the whole piece, its state
        unchanged), after one faster search (:func:`has_delimiter`). Otherwise the parser takes the piece.
        Whether the piece was taken."""
        if type(data) is not bytes or not self._in_file_data(parser) or not _plain(data, parser.boundary):
            return False
        self._on_part_data(data, 0, len(data))
        return True

    def _take_raw(self, parser: MultipartParser, view: memoryview) -> None:
        """One read of the rest of the body (:class:`~dockyard_api.server.RawBody`, in its thread): file data
        as :meth:`_file_data_only` takes it, anything else through the parser (a copy: the delimiter and the
        parts after the file, once per chunk); what the read gave the file is written before the buffer is
        read into again."""
        if self._in_file_data(parser) and _plain(view, parser.boundary):
            self._on_part_data(view, 0, len(view))  # type: ignore[arg-type]  # a view: the parser's callback reads slices
        else:
            parser.write(bytes(view))
        if self._pending:
            assert self.writer is not None
            pieces, self._pending, self._pending_bytes = self._pending, [], 0
            self.writer.write_all(pieces)

    def _raw_file(self, parser: MultipartParser) -> RawFile | None:
        """Where the raw reads may append file data without this parse (the server's C reads, which take a read
        exactly as :meth:`_take_raw` does and hand it here when it is not plain file data): the chunk's file
        while the parser is inside the file part's data, after what is pending; None otherwise."""
        if not self._in_file_data(parser):
            return None
        writer = self.writer
        assert writer is not None
        if self._pending:
            pieces, self._pending, self._pending_bytes = self._pending, [], 0
            writer.write_all(pieces)
        return RawFile(
            writer.fileno(), writer.size, writer.limit - self._received, parser.boundary, writer.advises, self._wrote
        )

    def _wrote(self, n: int) -> None:
        """``n`` bytes of file data were appended to the chunk's file by the server's C reads."""
        assert self.writer is not None
        self._received += n
        self.writer.appended(n)

    async def _flush(self, *, wait: bool) -> None:
        """Hand the pending pieces to a worker thread and go on receiving while it writes them. When the
        previous batch is still being written: keep gathering (return at once) unless ``wait`` (the
        gathered bytes reached MAX_GATHERED_BYTES, or the end of the request). At most one batch is being
        written and one gathered: memory stays within 2 x MAX_GATHERED_BYTES per upload."""
        if self._pending:
            if self._writing is not None and not self._writing.done() and not wait:
                return
            await self._written()
            assert self.writer is not None
            pieces, self._pending, self._pending_bytes = self._pending, [], 0
            self._writing = WRITES.submit(self.writer.write_all, pieces)

    async def _written(self) -> None:
        """Wait for the batch being written (raising its error, e.g. ChunkTooLarge). The batch stays
        recorded until it is done, so that :meth:`_discard` waits for it even after a cancellation."""
        if self._writing is not None:
            if self._writing.done():  # the common case: no hop through the event loop
                self._writing.result()
            else:
                await asyncio.wrap_future(self._writing)
            self._writing = None

    async def _discard(self) -> None:
        writing, writer = self._writing, self.writer
        self._writing = None

        def discard() -> None:
            if writing is not None:  # the thread cannot be interrupted: let it finish before deleting the file
                with contextlib.suppress(Exception):
                    writing.result()
            if writer is not None:
                writer.discard()

        await anyio.to_thread.run_sync(discard)
