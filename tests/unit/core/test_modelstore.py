"""The model store (sessions and chunks on disk) and the checks of the start body, without a cluster."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dockyard_core.modelstore import ChunkSizes, ModelStore, SessionMeta
from dockyard_core.storeerrors import (
    ChunkConflict,
    ChunkTooLarge,
    EmptyChunk,
    InvalidChunkNumber,
    SessionGone,
    SessionNotFound,
    SizeExceeded,
    parse_chunk_number,
)
from dockyard_core.upload import FileTooLarge, InvalidUpload, Upload, check_file_name, check_sizes, normalize_extension

MiB = 1024 * 1024


def meta(
    session_id: str = "a" * 32, file_size: int = 100, total_chunks: int = 4, sha256: str | None = None
) -> SessionMeta:
    now = datetime.now(UTC)
    declared = Upload(file_context="model", file_name="m.tar", file_extension="tar", file_size=file_size,
                      total_chunks=total_chunks, sha256=sha256)  # fmt: skip
    return SessionMeta(session_id=session_id, namespace="ns", environment="prod", model_id="m-1", upload=declared,
                       created_at=now, expires_at=now + timedelta(hours=1))  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    s = ModelStore(tmp_path / "store")
    s.ensure()
    return s


def put(store: ModelStore, m: SessionMeta, number: int, data: bytes, limit: int = 64 * MiB) -> bool:
    writer = store.writer(m, limit)
    writer.write_all([memoryview(data)])
    return store.publish(m, number, writer.finish())


def leftovers(store: ModelStore, m: SessionMeta) -> list[str]:
    return sorted(p.name for p in store.chunks_dir(m.session_id).iterdir() if p.name.startswith("."))


# --- the start body ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file_size", "total", "ok"),
    [
        (100, 1, True),  # one chunk of 100 bytes <= max 100
        (101, 1, False),  # needs 2 chunks of at most 100
        (101, 2, True),
        (100, 100, True),  # 1 byte each
        (100, 101, False),  # a chunk would be empty
        (1, 1, True),
    ],
)
def test_total_chunks_must_fit_the_chunk_limit_and_the_file(file_size: int, total: int, ok: bool) -> None:
    if ok:
        check_sizes(file_size, total, max_chunk_bytes=100, max_file_bytes=10**9)
    else:
        with pytest.raises(InvalidUpload) as err:
            check_sizes(file_size, total, max_chunk_bytes=100, max_file_bytes=10**9)
        assert err.value.details["field"] == "totalChunks"


def test_file_size_over_the_limit_is_413() -> None:
    with pytest.raises(FileTooLarge) as err:
        check_sizes(10**9 + 1, 10**4, max_chunk_bytes=10**6, max_file_bytes=10**9)
    assert err.value.status_code == 413


@pytest.mark.parametrize(
    "name",
    ["../etc/passwd", "a/b.tar", "a\\b.tar", "..", ".", "x..tar", "a\x00b", "a\nb", "a\u202eb", "", "   ", "é" * 200],
)
def test_unsafe_file_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidUpload):
        check_file_name(name)


@pytest.mark.parametrize("name", ["llama-3-8b.tar", "model.v2.tar.gz", "モデル.safetensors", ".hidden.tar", "a" * 255])
def test_ordinary_file_names_pass(name: str) -> None:
    assert check_file_name(name) == name


@pytest.mark.parametrize(
    ("raw", "ext"),
    [("tar", "tar"), (".TAR.GZ", "tar.gz"), ("tgz", "tgz"), ("GGUF", "gguf"), ("safetensors", "safetensors")],
)
def test_extensions_are_normalised(raw: str, ext: str) -> None:
    assert normalize_extension(raw) == ext


@pytest.mark.parametrize("raw", ["exe", "tar/../x", "tar.gz.zip", "t ar", "", "rar"])
def test_unsupported_or_odd_extensions_are_refused(raw: str) -> None:
    with pytest.raises(InvalidUpload):
        normalize_extension(raw)


@pytest.mark.parametrize(("raw", "number"), [("0", 0), ("3", 3), (" 2 ", 2), ("9", 9)])
def test_chunk_numbers_are_decimal_text(raw: str, number: int) -> None:
    assert parse_chunk_number(raw, total_chunks=10) == number


@pytest.mark.parametrize("raw", ["-1", "1.5", "abc", "", "01", "10", "99999999999", None])
def test_bad_chunk_numbers_are_422(raw: str | None) -> None:
    with pytest.raises(InvalidChunkNumber) as err:
        parse_chunk_number(raw, total_chunks=10)
    assert err.value.status_code == 422


# --- sessions and chunks ----------------------------------------------------------------------------


def test_session_metadata_written_before_the_upload_type_is_read() -> None:
    """session.json had the start body's fields at the top; a session of an upgrade still loads."""
    m = meta(sha256="f" * 64)
    flat = {k: v for k, v in json.loads(m.to_json()).items() if k != "upload"}
    flat.update(m.upload.model_dump())
    assert SessionMeta.from_json(json.dumps(flat)) == m


def test_session_metadata_round_trips_and_leaves_no_temporary_file(store: ModelStore) -> None:
    m = meta(sha256="f" * 64)
    store.create(m)
    assert store.load(m.session_id) == m
    assert sorted(p.name for p in store.session_dir(m.session_id).iterdir()) == ["chunks", "session.json"]
    done = store.mark_completed(m, "job-1")
    assert store.load(m.session_id) == done
    assert done.dock_status_id == "job-1"
    assert store.session_ids() == [m.session_id]


def test_unknown_or_malformed_session_ids(store: ModelStore) -> None:
    assert store.load("b" * 32) is None
    for bad in ["../../etc", "A" * 32, "a" * 31, "a" * 32 + "/x"]:
        with pytest.raises(SessionNotFound):
            store.load(bad)


def test_chunks_out_of_order_are_listed_by_number(store: ModelStore) -> None:
    m = meta(file_size=100, total_chunks=4)
    store.create(m)
    for number, size in [(3, 10), (0, 30), (2, 30)]:
        assert put(store, m, number, bytes([number]) * size) is True
    assert [(c.number, c.size) for c in store.chunks(m.session_id)] == [(0, 30), (2, 30), (3, 10)]
    assert store.missing(m) == [1]
    assert store.received_bytes(m.session_id) == 70
    assert leftovers(store, m) == []


def test_resending_the_same_bytes_is_idempotent_and_different_bytes_conflict(store: ModelStore) -> None:
    m = meta()
    store.create(m)
    assert put(store, m, 1, b"x" * 25) is True
    assert put(store, m, 1, b"x" * 25) is False
    with pytest.raises(ChunkConflict) as err:
        put(store, m, 1, b"y" * 25)
    assert err.value.status_code == 409
    with pytest.raises(ChunkConflict):
        put(store, m, 1, b"x" * 24)  # a different size
    with pytest.raises(ChunkConflict):
        put(store, m, 1, b"x" * 24 + b"y")  # the same size, the last byte differs
    assert store.chunk_path(m.session_id, 1).read_bytes() == b"x" * 25
    assert leftovers(store, m) == []


def test_parallel_copies_of_one_chunk_with_different_bytes_have_one_winner(store: ModelStore) -> None:
    m = meta(file_size=10**6, total_chunks=10)
    store.create(m)
    results: list[str] = []
    barrier = threading.Barrier(8)

    def send(i: int) -> None:
        writer = store.writer(m, MiB)
        writer.write_all([memoryview(bytes([i]) * 1000)])
        chunk = writer.finish()
        barrier.wait()
        try:
            store.publish(m, 5, chunk)
            results.append(f"ok{i}")
        except ChunkConflict:
            results.append("conflict")

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [r for r in results if r.startswith("ok")]
    assert len(winners) == 1, results
    winner = int(winners[0][2:])
    assert store.chunk_path(m.session_id, 5).read_bytes() == bytes([winner]) * 1000
    assert leftovers(store, m) == []


def test_a_chunk_over_the_limit_is_refused_while_streaming_and_leaves_nothing(store: ModelStore) -> None:
    m = meta(file_size=10 * MiB, total_chunks=10)
    store.create(m)
    writer = store.writer(m, MiB)
    writer.write_all([memoryview(b"a" * (MiB // 2))])
    with pytest.raises(ChunkTooLarge) as err:
        writer.write_all([memoryview(b"a" * (MiB // 2 + 1))])
    assert err.value.status_code == 413
    assert leftovers(store, m) == []
    assert store.chunks(m.session_id) == []


def test_the_writer_limit_is_also_the_file_size(store: ModelStore) -> None:
    m = meta(file_size=10, total_chunks=1)
    store.create(m)
    writer = store.writer(m, MiB)
    with pytest.raises(ChunkTooLarge):
        writer.write_all([memoryview(b"a" * 11)])


def test_writer_writes_every_piece_in_order(store: ModelStore) -> None:
    m = meta(file_size=10**6, total_chunks=1)
    store.create(m)
    writer = store.writer(m, MiB)
    for piece in (b"abc", bytearray(b"def"), memoryview(b"ghi")):
        writer.write_all([memoryview(piece)])
    writer.write_all([memoryview(b"jk"), memoryview(b"x" * 3000)[:3], memoryview(b"")])
    chunk = writer.finish()
    assert chunk.size == 14
    assert chunk.path.read_bytes() == b"abcdefghijkxxx"


def test_write_all_refuses_a_batch_over_the_limit(store: ModelStore) -> None:
    m = meta(file_size=10**6, total_chunks=1)
    store.create(m)
    writer = store.writer(m, 10)
    writer.write_all([memoryview(b"12345")])
    with pytest.raises(ChunkTooLarge):
        writer.write_all([memoryview(b"12345"), memoryview(b"6")])
    assert leftovers(store, m) == []


def test_empty_chunks_and_chunks_beyond_the_file_size_are_refused(store: ModelStore) -> None:
    m = meta(file_size=50, total_chunks=3)
    store.create(m)
    with pytest.raises(EmptyChunk):
        put(store, m, 0, b"")
    put(store, m, 0, b"a" * 30)
    with pytest.raises(SizeExceeded) as err:
        put(store, m, 1, b"b" * 21)
    assert err.value.details["received"] == 30
    put(store, m, 1, b"b" * 20)
    assert leftovers(store, m) == []


class StatCounter:
    """Counts the stats of a directory's entries, whichever way they are made (``os.stat`` or a listing's
    ``DirEntry.stat``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
        self.directory, self.count = str(directory), 0
        real_stat, real_scandir = os.stat, os.scandir

        def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            if os.path.dirname(os.fspath(path)) == self.directory:
                self.count += 1
            return real_stat(path, *args, **kwargs)

        class Entry:
            def __init__(self, entry: os.DirEntry[str]) -> None:
                self._entry, self.name, self.path = entry, entry.name, entry.path

            def stat(self, *args: Any, **kwargs: Any) -> os.stat_result:
                stat(self.path)
                return self._entry.stat(*args, **kwargs)

            def __getattr__(self, name: str) -> Any:
                return getattr(self._entry, name)

        @contextlib.contextmanager
        def scandir(path: Any = ".") -> Iterator[list[Entry]]:
            with real_scandir(path) as entries:
                yield [Entry(e) for e in entries]

        monkeypatch.setattr(os, "stat", stat)
        monkeypatch.setattr(os, "scandir", scandir)


def test_each_store_stats_each_chunk_once_across_a_session_s_publications(
    store: ModelStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check against fileSize counts every published chunk, but each store stats each chunk once at most
    (none of its own): 300 publications cost their 300 checks that the chunk is not there yet and 300 stats of
    chunks, not one stat per chunk and publication (44,850 more: quadratic in the chunks)."""
    m = meta(file_size=300, total_chunks=300)
    store.create(m)
    counter = StatCounter(monkeypatch, store.chunks_dir(m.session_id))
    other = ModelStore(store.root)  # another replica on the same volume: its chunks are counted too
    for number in range(300):
        put(other if number % 3 == 0 else store, m, number, b"x")
    assert counter.count <= 300 + 300
    with pytest.raises(SizeExceeded) as err:  # the sum is still exact: 300 bytes are there
        put(store, m, 300, b"y")
    assert err.value.details["received"] == 300


def test_chunk_sizes_count_what_other_replicas_published_and_forget_a_removed_session(store: ModelStore) -> None:
    m = meta(file_size=40, total_chunks=4)
    store.create(m)
    other = ModelStore(store.root)
    put(store, m, 0, b"a" * 10)
    put(other, m, 1, b"b" * 10)
    put(store, m, 2, b"c" * 10)
    with pytest.raises(SizeExceeded) as err:
        put(other, m, 3, b"d" * 11)
    assert err.value.details["received"] == 30
    put(other, m, 3, b"d" * 10)
    assert other.remove(m.session_id) == 40  # removed by the other replica: this one counts nothing of it
    assert store.chunk_sizes.others(store.chunks_dir(m.session_id), m.session_id, 0) == 0
    store.create(m)  # (session ids are never reused; here the same directory again, anew)
    put(store, m, 0, b"a" * 40)


def test_chunk_sizes_remember_a_bounded_number_of_sessions(store: ModelStore) -> None:
    store.chunk_sizes = ChunkSizes(sessions=2)
    sessions = [meta(session_id=c * 32, file_size=20, total_chunks=2) for c in "abc"]
    for m in sessions:
        store.create(m)
        put(store, m, 0, b"x" * 10)
    assert len(store.chunk_sizes._by_session) == 2
    for m in sessions:  # a forgotten session is read again: the check stays exact
        with pytest.raises(SizeExceeded):
            put(store, m, 1, b"y" * 11)
        put(store, m, 1, b"y" * 10)


def test_remove_frees_the_bytes_and_later_chunks_are_gone(store: ModelStore) -> None:
    m = meta(file_size=300, total_chunks=3)
    store.create(m)
    put(store, m, 0, b"a" * 100)
    put(store, m, 2, b"c" * 100)
    writer = store.writer(m, MiB)  # an upload in flight while the session is aborted
    writer.write_all([memoryview(b"b" * 100)])
    chunk = writer.finish()
    assert store.remove(m.session_id) == 300
    assert not store.session_dir(m.session_id).exists()
    assert store.load(m.session_id) is None
    with pytest.raises(SessionGone) as err:
        store.publish(m, 1, chunk)
    assert err.value.code == "session_aborted"
    with pytest.raises(SessionGone):
        store.writer(m, MiB)
    assert store.remove(m.session_id) == 0


def test_expiry() -> None:
    m = meta()
    assert not m.expired()
    assert m.expired(m.expires_at)
    assert m.expired(m.expires_at + timedelta(seconds=1))


# --- a session's metadata as last read (ModelStore.loaded) ---------------------------------------------


def test_a_session_read_before_is_known_until_its_file_changes_or_goes(store: ModelStore, tmp_path: Path) -> None:
    """``loaded`` answers from what ``load`` read while ``session.json`` is the same file; a completion rewriting it
    (by this store or by another replica's), or the session's removal, makes it unknown again, and nothing is
    known before a first read."""
    m = meta()
    store.create(m)
    assert store.loaded(m.session_id) is None  # not read yet
    assert store.load(m.session_id) == m
    assert store.loaded(m.session_id) == m
    other = ModelStore(store.root)  # another replica on the same volume completes the session
    completed = other.mark_completed(m, "job-1")
    assert store.loaded(m.session_id) is None
    assert store.load(m.session_id) == completed
    assert store.loaded(m.session_id) == completed
    other.remove(m.session_id)
    assert store.loaded(m.session_id) is None
    assert store.load(m.session_id) is None
    store.create(m)
    store.load(m.session_id)
    store.remove(m.session_id)  # this store's own removal forgets it at once, as it forgets the chunks' sizes
    assert store.loaded_sessions.get(m.session_id) is None
    assert store.loaded("not a session id") is None  # unknown ids are not checked here: load() answers them (404)


def test_the_sessions_read_are_remembered_up_to_a_limit(store: ModelStore) -> None:
    store.loaded_sessions.limit = 3
    sessions = [meta(session_id=f"{i:032x}") for i in range(5)]
    for m in sessions:
        store.create(m)
        store.load(m.session_id)
    assert store.loaded(sessions[1].session_id) is None  # the least recently used went first
    assert [store.loaded(m.session_id) for m in sessions[2:]] == sessions[2:]
