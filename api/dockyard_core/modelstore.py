"""The model store: a directory on a volume shared by every facade replica and the operator.

Layout (relative to the store root)::

    sessions/<sessionId>/session.json        the session's metadata (written atomically)
    sessions/<sessionId>/chunks/<n>          chunk n, complete or absent
    sessions/<sessionId>/chunks/.part-*      chunks being received (never read as chunks)
    models/<namespace>/<modelId>/            an imported model (written by the operator)
    models/<namespace>/<modelId>/.dockyard-import.json   its manifest: the import job, and every file
                                             with its size and SHA-256 (what pods download and verify)

Two backends share this interface: :class:`ModelStore` (a directory on a local or shared file system,
the embedded default) and :class:`dockyard_core.s3store.S3ModelStore` (S3-compatible object storage,
for clusters and several facade replicas); :func:`open_store` picks one from the settings.

Nothing is kept only in memory: every replica sees the same sessions, chunks arrive in any order and in
parallel, and a restart loses nothing but the chunks in flight (what a store remembers, the sizes of the
published chunks it has seen, is read from the disk and never changes there: :class:`ChunkSizes`). A
chunk is streamed to a temporary file in its session's ``chunks/`` directory, flushed to disk, then
published with ``link(2)``, which creates the chunk's name atomically and only if it does not exist yet:
the first complete copy of a chunk wins, a re-sent identical copy is accepted (idempotent), a different
one is refused (:class:`ChunkConflict`). A rename would let a later copy silently replace an accepted one.

This module is pure file-system logic (no FastAPI, no Kubernetes); its errors
(:mod:`dockyard_core.storeerrors`) are :class:`~dockyard_core.errors.DockyardError` subclasses carrying
the HTTP status and error code the facade answers with (one handler turns every one of them into the JSON
error shape). The file primitives are in :mod:`dockyard_core.storefiles`, a stored model's manifest in
:mod:`dockyard_core.modelmanifest`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path

from dockyard_core.clock import iso, utcnow
from dockyard_core.modelmanifest import MANIFEST, ModelManifest, list_files
from dockyard_core.storeerrors import (
    ChunkConflict,
    EmptyChunk,
    ModelFileNotFound,
    SessionGone,
    SessionNotFound,
    SizeExceeded,
)
from dockyard_core.storefiles import (
    COPY_BUFFER,
    ChunkInfo,
    ChunkWriter,
    ReceivedChunk,
    fsync_dir,
    link_exclusive,
    same_bytes,
    write_atomically,
)
from dockyard_core.upload import Upload

SESSION_ID_RE = re.compile(r"^[0-9a-f]{32}$")
CHUNK_NAME_RE = re.compile(r"^(0|[1-9][0-9]{0,8})$")


# --- sessions ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SessionMeta:
    """What a session is: written once at start, rewritten (atomically) when it completes. ``upload`` is
    what the start call declared, as validated then (:class:`~dockyard_core.upload.Upload`)."""

    session_id: str
    namespace: str
    environment: str
    model_id: str
    upload: Upload
    created_at: datetime
    expires_at: datetime
    dock_status_id: str | None = None
    """Set when the session is completed: the import job it became."""

    def expired(self, now: datetime | None = None) -> bool:
        return (now or utcnow()) >= self.expires_at

    def to_json(self) -> str:
        data = {
            "session_id": self.session_id,
            "namespace": self.namespace,
            "environment": self.environment,
            "model_id": self.model_id,
            "upload": self.upload.stored(),
            "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at),
            "dock_status_id": self.dock_status_id,
        }
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> SessionMeta:
        data = json.loads(text)
        upload = data.get("upload")
        if upload is None:  # written before the upload type, with its fields at the top (sessions of an upgrade)
            upload = {name: data[name] for name in Upload.model_fields if name in data}
        return cls(
            session_id=data["session_id"],
            namespace=data["namespace"],
            environment=data["environment"],
            model_id=data["model_id"],
            upload=Upload.model_validate(upload),
            created_at=datetime.fromisoformat(data["created_at"]),
            expires_at=datetime.fromisoformat(data["expires_at"]),
            dock_status_id=data.get("dock_status_id"),
        )


def check_session_id(session_id: str) -> str:
    if not SESSION_ID_RE.match(session_id):
        raise SessionNotFound(f"no import session {session_id[:64]!r}", {"sessionId": session_id[:64]})
    return session_id


SIZE_MEMO_SESSIONS = 64
"""Sessions whose chunk sizes a store remembers (:class:`ChunkSizes`); the least recently used is forgotten."""


class _Received:
    """What one session's publications have seen of its chunks directory."""

    __slots__ = ("lock", "names", "sizes", "total")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: set[str] = set()
        """Every name of the directory that was looked at: the chunks' and the temporary files' seen so far."""
        self.sizes: dict[int, int] = {}
        self.total = 0


class ChunkSizes:
    """The bytes of each session's published chunks, for :meth:`ModelStore.publish`'s check against the
    file's size. The directory is listed every time (other replicas publish into it too), but each chunk is
    stat'ed once: a published chunk never changes (``link(2)`` creates its name once, and only the whole
    session is ever removed). Stat'ing every chunk for every new one made a session's publications
    quadratic: 27 ms per chunk at 8,750 chunks (140 GB in 16 MiB chunks; docs/benchmarks.md). Kept for the
    :data:`SIZE_MEMO_SESSIONS` sessions published to last; a forgotten one is read again, nothing is lost."""

    def __init__(self, sessions: int = SIZE_MEMO_SESSIONS) -> None:
        self._sessions = sessions
        self._lock = threading.Lock()
        self._by_session: OrderedDict[str, _Received] = OrderedDict()

    def _of(self, session_id: str) -> _Received:
        with self._lock:
            received = self._by_session.pop(session_id, None) or _Received()
            self._by_session[session_id] = received  # the most recently used last
            if len(self._by_session) > self._sessions:
                self._by_session.popitem(last=False)
            return received

    def others(self, directory: Path, session_id: str, number: int) -> int:
        """The bytes of the chunks in ``directory`` now, chunk ``number`` left out."""
        received = self._of(session_id)
        with received.lock:  # the listing too: what it holds is what is counted, in the order it happened
            try:
                listed = set(os.listdir(directory))
            except FileNotFoundError:
                listed = set()
            for name in received.names - listed:  # temporary files come and go; chunks go with their session
                received.names.discard(name)
                size = received.sizes.pop(int(name), None) if CHUNK_NAME_RE.match(name) else None
                received.total -= size or 0
            for name in listed - received.names:
                received.names.add(name)
                if CHUNK_NAME_RE.match(name):
                    try:
                        size = os.stat(directory / name, follow_symlinks=False).st_size
                    except FileNotFoundError:  # the session is being removed
                        received.names.discard(name)
                        continue
                    received.sizes[int(name)] = size
                    received.total += size
            return received.total - received.sizes.get(number, 0)

    def published(self, session_id: str, number: int, size: int) -> None:
        """This store just published chunk ``number``: its size is known without a stat."""
        received = self._of(session_id)
        with received.lock:
            if number not in received.sizes:
                received.names.add(str(number))
                received.sizes[number] = size
                received.total += size

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._by_session.pop(session_id, None)


FileIdentity = tuple[int, int, int, int, int]


def file_identity(st: os.stat_result) -> FileIdentity:
    """Which file, and which version of it: device, inode, size, modification and change times (a file replaced by
    another, even one that reused the inode number, differs in its times or its size)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class LoadedSessions:
    """The session metadata a store read last, each with the identity of its file (:meth:`ModelStore.loaded`); at
    most ``limit``, the least recently used forgotten first. Shared by the threads that load and the
    event loop that asks."""

    def __init__(self, limit: int = 1024) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._by_session: OrderedDict[str, tuple[FileIdentity, SessionMeta]] = OrderedDict()

    def get(self, session_id: str) -> tuple[FileIdentity, SessionMeta] | None:
        with self._lock:
            known = self._by_session.get(session_id)
            if known is not None:
                self._by_session.move_to_end(session_id)
            return known

    def remember(self, session_id: str, identity: FileIdentity, meta: SessionMeta) -> None:
        with self._lock:
            self._by_session[session_id] = (identity, meta)
            self._by_session.move_to_end(session_id)
            while len(self._by_session) > self.limit:
                self._by_session.popitem(last=False)

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._by_session.pop(session_id, None)


class ModelStore:
    """The model store under ``root`` (see the module docstring for the layout)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.sessions = self.root / "sessions"
        self.models = self.root / "models"
        self.chunk_sizes = ChunkSizes()
        self.loaded_sessions = LoadedSessions()

    def ensure(self) -> None:
        self.sessions.mkdir(parents=True, exist_ok=True)
        self.models.mkdir(parents=True, exist_ok=True)

    # -- sessions --

    def session_dir(self, session_id: str) -> Path:
        return self.sessions / check_session_id(session_id)

    def chunks_dir(self, session_id: str) -> Path:
        return self.session_dir(session_id) / "chunks"

    def create(self, meta: SessionMeta) -> None:
        directory = self.session_dir(meta.session_id)
        (directory / "chunks").mkdir(parents=True)
        write_atomically(directory / "session.json", meta.to_json())

    def load(self, session_id: str) -> SessionMeta | None:
        """The session's metadata; None when there is no such session (never created, or removed). What was read
        is remembered with the identity of the file it came from, for :meth:`loaded`."""
        path = self.session_dir(session_id) / "session.json"
        try:
            with path.open("rb") as f:
                identity = file_identity(os.fstat(f.fileno()))
                text = f.read().decode("utf-8")
        except (FileNotFoundError, NotADirectoryError):
            self.loaded_sessions.forget(session_id)
            return None
        meta = SessionMeta.from_json(text)
        self.loaded_sessions.remember(session_id, identity, meta)
        return meta

    def loaded(self, session_id: str) -> SessionMeta | None:
        """The session's metadata as this store last read it (:meth:`load`), if ``session.json`` is still the file
        read then: one ``stat`` instead of a read and a parse, cheap enough for the event loop (a chunk upload's
        every request asks for its session). None when this store has not read it, or the file changed or is gone:
        then :meth:`load` it (in a thread). The file is only ever replaced whole (:func:`write_atomically`: a new
        inode) or removed with its session, so an unchanged identity means unchanged content."""
        known = self.loaded_sessions.get(session_id)
        if known is None:
            return None
        identity, meta = known
        try:
            current = os.stat(self.session_dir(session_id) / "session.json")
        except OSError:
            return None
        return meta if file_identity(current) == identity else None

    def save(self, meta: SessionMeta) -> None:
        write_atomically(self.session_dir(meta.session_id) / "session.json", meta.to_json())

    def mark_completed(self, meta: SessionMeta, dock_status_id: str) -> SessionMeta:
        done = replace(meta, dock_status_id=dock_status_id)
        self.save(done)
        return done

    def session_ids(self) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(self.sessions) if SESSION_ID_RE.match(e.name))
        except FileNotFoundError:
            return []

    def remove(self, session_id: str) -> int:
        """Delete the session and its chunks; returns the bytes freed (0 if it was gone already)."""
        directory = self.session_dir(session_id)
        freed = 0
        for chunk in _scan(directory / "chunks"):
            with contextlib.suppress(FileNotFoundError):
                freed += chunk.stat().st_size
        shutil.rmtree(directory, ignore_errors=True)
        self.chunk_sizes.forget(session_id)
        self.loaded_sessions.forget(session_id)
        return freed

    # -- chunks --

    def chunks(self, session_id: str) -> list[ChunkInfo]:
        """The chunks received so far, by number."""
        entries = _scan(self.chunks_dir(session_id))
        found = [ChunkInfo(int(e.name), _size(e)) for e in entries if CHUNK_NAME_RE.match(e.name)]
        return sorted(found, key=lambda c: c.number)

    def missing(self, meta: SessionMeta) -> list[int]:
        have = {c.number for c in self.chunks(meta.session_id)}
        return [n for n in range(meta.upload.total_chunks) if n not in have]

    def chunk_path(self, session_id: str, number: int) -> Path:
        return self.chunks_dir(session_id) / str(number)

    def writer(self, meta: SessionMeta, max_chunk_bytes: int, *, fsync: bool = True) -> ChunkWriter:
        """A writer for one chunk of ``meta``: at most ``max_chunk_bytes`` and at most the file's size."""
        try:
            return ChunkWriter(
                self.chunks_dir(meta.session_id), min(max_chunk_bytes, meta.upload.file_size), fsync=fsync
            )
        except FileNotFoundError:
            raise SessionGone(f"import session {meta.session_id} was aborted", code="session_aborted") from None

    def publish(self, meta: SessionMeta, number: int, chunk: ReceivedChunk) -> bool:
        """Make ``chunk`` chunk ``number`` of the session. True: stored now; False: the same bytes were
        there already. Raises :class:`ChunkConflict` when different bytes are there, :class:`EmptyChunk`,
        or :class:`SizeExceeded` when the chunks would hold more than ``fileSize`` bytes. The temporary
        file is gone afterwards in every case."""
        try:
            if chunk.size == 0:
                raise EmptyChunk("the chunk is empty", {"chunkNumber": number})
            final = self.chunk_path(meta.session_id, number)
            if final.exists():
                return self._same(final, number, chunk)
            others = self.chunk_sizes.others(final.parent, meta.session_id, number)
            if others + chunk.size > meta.upload.file_size:
                raise SizeExceeded(
                    f"with this chunk the session would hold {others + chunk.size} bytes, more than fileSize "
                    f"{meta.upload.file_size}",
                    {
                        "chunkNumber": number,
                        "fileSize": meta.upload.file_size,
                        "received": others,
                        "chunkSize": chunk.size,
                    },
                )
            try:
                link_exclusive(chunk.path, final)
            except FileExistsError:
                return self._same(final, number, chunk)  # a parallel upload of the same chunk won
            except FileNotFoundError:
                raise SessionGone(f"import session {meta.session_id} was aborted", code="session_aborted") from None
            self.chunk_sizes.published(meta.session_id, number, chunk.size)
            fsync_dir(final.parent)
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(chunk.path)

    def _same(self, final: Path, number: int, chunk: ReceivedChunk) -> bool:
        if same_bytes(final, chunk.path):
            return False
        raise ChunkConflict(
            f"chunk {number} was already received with different bytes",
            {"chunkNumber": number},
        )

    def received_bytes(self, session_id: str) -> int:
        return sum(c.size for c in self.chunks(session_id))

    # -- models --

    def model_dir(self, namespace: str, model_id: str) -> Path:
        return self.models / namespace / model_id

    def relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def session_age(self, session_id: str) -> float:
        """Seconds since the session's directory last changed (0 when it is gone)."""
        return age_seconds(self.session_dir(session_id))

    def model_manifest(self, namespace: str, model_id: str) -> ModelManifest | None:
        """The stored model's manifest; None when the model has no finished import."""
        directory = self.model_dir(namespace, model_id)
        try:
            data = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if "files" not in data:  # imported before manifests listed the files: list them now
            data["files"] = [asdict(f) for f in list_files(directory)]
        return ModelManifest.from_dict(data)

    def read_model_file(self, namespace: str, model_id: str, path: str, start: int, end: int) -> Iterator[bytes]:
        """Bytes ``[start, end)`` of one file of the model (a path of its manifest), block by block."""
        target = self.model_dir(namespace, model_id).joinpath(*path.split("/"))
        try:
            f = target.open("rb")
        except FileNotFoundError:
            raise ModelFileNotFound(f"model {namespace}/{model_id} has no file {path}") from None
        with f:
            f.seek(start)
            left = end - start
            while left > 0:
                block = f.read(min(COPY_BUFFER, left))
                if not block:
                    return
                left -= len(block)
                yield block

    def delete_model(self, namespace: str, model_id: str) -> None:
        shutil.rmtree(self.model_dir(namespace, model_id), ignore_errors=True)


def _scan(directory: Path) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            yield from entries
    except FileNotFoundError:
        return


def _size(entry: os.DirEntry[str]) -> int:
    try:
        return entry.stat(follow_symlinks=False).st_size
    except FileNotFoundError:
        return 0


def age_seconds(path: Path) -> float:
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def default_root() -> Path:
    """``<checkout>/.dockyard/model-store`` for local runs (beside the local control plane's state);
    the working directory's ``.dockyard/model-store`` when not run from a checkout."""
    here = Path(__file__).resolve().parents[2]
    base = here if (here / "pyproject.toml").is_file() else Path.cwd()
    return base / ".dockyard" / "model-store"
