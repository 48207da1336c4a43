"""An upload's plain file data from the socket to the chunk's file in C (dockyard_core._pump, used by
dockyard_api.server.RawBody): on a real socket pair and real files. It appends exactly the reads that are plain
file data, hands back the first that is not (a delimiter, the start of one at its end, more than the room left),
and tells a closed, silent or failing peer and a failing write apart."""

from __future__ import annotations

import errno
import os
import random
import shutil
import socket
import sysconfig
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockyard_api import server
from dockyard_api.public.imports.chunks import _plain

_pump = pytest.importorskip("dockyard_core._pump", reason="the C extension was not built (no C compiler)")
DELIMITER = b"\r\n--dockyard-test-boundary"
KiB = 1024


def test_the_pump_is_built_where_a_compiler_is() -> None:
    """pyproject.toml builds it as an optional extension: where a C compiler and Python's headers are at hand (CI
    installs both), the server must have it."""
    headers = Path(sysconfig.get_paths()["include"], "Python.h").exists()
    assert server.PUMP or shutil.which("cc") is None or not headers


def reference_plain(piece: bytes, delimiter: bytes) -> bool:
    """No delimiter in the piece, and no start of one at its end (a prefix of the delimiter the next read may
    complete)."""
    return delimiter not in piece and not any(piece.endswith(delimiter[:j]) for j in range(1, len(delimiter)))


def test_plain_is_exactly_no_delimiter_and_no_start_of_one_at_the_end() -> None:
    rng = random.Random(31)
    fragments = [DELIMITER[:j] for j in range(len(DELIMITER) + 1)] + [DELIMITER[j:] for j in range(len(DELIMITER))]
    cases = 0
    for _ in range(20_000):
        piece = b"".join(rng.choice(fragments) if rng.random() < 0.5 else rng.randbytes(rng.randrange(3)) for _ in
                         range(rng.randrange(1, 6)))  # fmt: skip
        if not piece:
            continue
        cases += 1
        assert _pump.plain(piece, DELIMITER) == reference_plain(piece, DELIMITER), piece
        assert _plain(piece, DELIMITER) == reference_plain(piece, DELIMITER), piece  # the Python test agrees
    assert cases > 15_000
    # a delimiter whose first byte repeats in it: a start of it can begin before the last such byte
    odd = b"\r\n--a\rb"
    assert not _pump.plain(b"xx\r\n--a\r", odd)
    assert _pump.plain(b"xx\r\n--a\rc", odd)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    b.setblocking(False)  # as a connection of the event loop, whose descriptor the raw reader shares
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def send_slowly(sock: socket.socket, data: bytes, seed: int = 7) -> threading.Thread:
    """Send ``data`` in pieces of random sizes from a thread (the reads end anywhere)."""

    def run() -> None:
        rng = random.Random(seed)
        at = 0
        while at < len(data):
            n = rng.choice((1, 17, 4 * KiB, 65 * KiB, 300 * KiB))
            sock.sendall(data[at : at + n])
            at += n

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def pump(receiver: socket.socket, buffer: bytearray, left: int, file: int, size: int, room: int,
         timeout_ms: int = 5000) -> tuple[int, int, int, int, int]:  # fmt: skip
    return _pump.pump(receiver.fileno(), buffer, left, file, size, room, DELIMITER, True, timeout_ms)


def test_plain_data_is_appended_exactly_until_the_body_ends(pair: tuple[socket.socket, socket.socket],
                                                            tmp_path: Path) -> None:  # fmt: skip
    """The delimiter's prefixes inside the data (never the whole of it): a read that ends in one comes back as a
    piece, which the caller appends itself (as the parser would, once it knows it is file data), and the pump goes
    on from there; in the end the file holds exactly the data, after what it held."""
    sender, receiver = pair
    data = bytearray(os.urandom(3 * 1024 * KiB))
    for at in range(1_000, len(data) - 64, 50_021):
        data[at : at + 5] = DELIMITER[:5]
    assert DELIMITER not in data
    path = tmp_path / "chunk"
    buffer = bytearray(256 * KiB)
    pieces = 0
    with path.open("ab") as f:
        f.write(b"head")
        f.flush()
        thread = send_slowly(sender, bytes(data))
        left, size = len(data), 4
        while left:
            status, left, piece, written, error = pump(receiver, buffer, left, f.fileno(), size, 1 << 30)
            assert status in (_pump.DONE, _pump.PIECE)
            assert error == 0
            size += written
            if status == _pump.PIECE:
                pieces += 1
                os.write(f.fileno(), buffer[:piece])
                size += piece
        thread.join()
    assert path.read_bytes() == b"head" + bytes(data)
    assert pieces < 60  # most reads were appended by the pump


def test_a_read_with_the_delimiter_comes_back_after_the_data_before_it(pair: tuple[socket.socket, socket.socket],
                                                                        tmp_path: Path) -> None:  # fmt: skip
    sender, receiver = pair
    data = os.urandom(600 * KiB).replace(DELIMITER[:1], b".")  # no start of the delimiter anywhere
    body = data + DELIMITER + b"--\r\n"
    sending = send_slowly(sender, data)  # first the plain data, then (later) the end of the body
    path = tmp_path / "chunk"
    buffer = bytearray(1024 * KiB)
    with path.open("wb") as f:
        written_before = 0
        while written_before < len(data):
            status, left, piece, written, _ = pump(receiver, buffer, len(body) - written_before, f.fileno(),
                                                   written_before, 1 << 30, timeout_ms=200)  # fmt: skip
            written_before += written
            if status == _pump.SILENT:  # everything sent so far is in the file
                break
        sending.join()
        assert written_before == len(data)
        assert status == _pump.SILENT
        sender.sendall(body[len(data) :])
        status, left, piece, written, _ = pump(receiver, buffer, len(body) - len(data), f.fileno(), len(data), 1 << 30)
    assert (status, left, written) == (_pump.PIECE, 0, 0)
    assert bytes(buffer[:piece]) == DELIMITER + b"--\r\n"  # for the parser
    assert path.read_bytes() == data


def test_a_read_past_the_room_left_comes_back_unwritten(pair: tuple[socket.socket, socket.socket],
                                                        tmp_path: Path) -> None:  # fmt: skip
    sender, receiver = pair
    data = os.urandom(64 * KiB).replace(DELIMITER[:1], b".")
    sender.sendall(data)
    path = tmp_path / "chunk"
    buffer = bytearray(1024 * KiB)
    with path.open("wb") as f:
        status, _left, piece, written, _ = pump(receiver, buffer, 10 * len(data), f.fileno(), 0, len(data) - 1)
    assert status == _pump.PIECE
    assert written == 0
    assert piece > 0
    assert bytes(buffer[:piece]) == data[:piece]
    assert path.read_bytes() == b""


def test_a_closed_and_a_silent_peer_and_a_failing_write(pair: tuple[socket.socket, socket.socket],
                                                                 tmp_path: Path) -> None:  # fmt: skip
    sender, receiver = pair
    path = tmp_path / "chunk"
    path.write_bytes(b"")
    buffer = bytearray(64 * KiB)
    with path.open("ab") as f:
        assert pump(receiver, buffer, 100, f.fileno(), 0, 1 << 30, timeout_ms=50)[0] == _pump.SILENT
        sender.sendall(b"abc")
        with path.open("rb") as read_only:  # a write that fails: EBADF
            status, left, _, written, error = pump(receiver, buffer, 100, read_only.fileno(), 0, 1 << 30)
        assert (status, left, written, error) == (_pump.WRITE_ERROR, 97, 0, errno.EBADF)
        sender.sendall(b"defg")
        sender.shutdown(socket.SHUT_WR)
        status, left, _, written, _ = pump(receiver, buffer, 100, f.fileno(), 0, 1 << 30)
        assert (status, left, written) == (_pump.CLOSED, 96, 4)
    assert path.read_bytes() == b"defg"
