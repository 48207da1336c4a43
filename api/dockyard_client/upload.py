"""Chunked model import with parallel chunks and resume (docs/public-api.md, 'Chunked model import').

- The file's SHA-256 is computed while the chunks go up (a thread reads the file in order) and sent with
  the completion call (the facade's ``sha256`` extension): the import job FAILS with
  ``ChecksumMismatch`` when the bytes that arrived hash differently. No extra pass over a large file
  before the upload starts.
- Chunks go up ``parallel`` at a time, each read with ``pread`` (only the chunks in flight are in memory).
- A resume record (session id, chunk size) is kept per file under ``$XDG_STATE_HOME/dockyard/uploads``
  until the import job ends. Run the same import again after Ctrl-C, a lost connection or a facade
  restart: the session is asked which chunks arrived (``GET .../files/session/{id}``) and only the
  missing ones are sent.
- ``max_rate`` caps the bandwidth (bytes per second over all workers), like ``curl --limit-rate``.
- Transport errors and 5xx answers (a facade restarting) are retried with backoff for ``retry_for``
  seconds; a 409 ``chunk_conflict`` (the file changed) or a 410 (the session expired) stops the upload.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dockyard_client.client import DockyardClient
from dockyard_client.errors import ApiError, ConfigurationError, Gone, NotFound, ServerError, TransportError
from dockyard_client.models import JobRecord, SessionState

MiB = 1024 * 1024
DEFAULT_CHUNK_SIZE = 16 * MiB
EXTENSIONS = ("tar.gz", "tgz", "tar", "zip", "safetensors", "gguf", "bin", "pt", "pth")


def detect_extension(name: str) -> str:
    lower = name.lower()
    for ext in EXTENSIONS:
        if lower.endswith("." + ext):
            return ext
    raise ConfigurationError(
        f"cannot tell the file type of {name!r} from its name; pass --extension (one of {', '.join(EXTENSIONS)})"
    )


def file_sha256(
    path: Path,
    progress: Callable[[int], None] | None = None,
    block: int = 4 * MiB,
    stop: threading.Event | None = None,
) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while data := handle.read(block):
            if stop is not None and stop.is_set():
                raise InterruptedError("hashing stopped")
            digest.update(data)
            if progress is not None:
                progress(len(data))
    return digest.hexdigest()


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = Path(env.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "dockyard" / "uploads"


@dataclass
class ResumeRecord:
    session_id: str
    model_id: str
    chunk_size: int
    total_chunks: int
    sha256: str
    path: str
    expiration_date: str = ""


class ResumeStore:
    """One small JSON file per (file, size, mtime, facade, environment): the session to resume."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or state_dir()

    def key(self, path: Path, client: DockyardClient) -> str:
        st = path.stat()
        ident = (
            f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{client.url}\0{client.namespace}\0{client.environment}"
        )
        return hashlib.sha256(ident.encode()).hexdigest()[:32]

    def load(self, key: str) -> ResumeRecord | None:
        try:
            return ResumeRecord(**json.loads((self.directory / f"{key}.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def save(self, key: str, record: ResumeRecord) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.directory / f".{key}.tmp"
        tmp.write_text(json.dumps(asdict(record)))
        tmp.replace(self.directory / f"{key}.json")

    def remove(self, key: str) -> None:
        (self.directory / f"{key}.json").unlink(missing_ok=True)


@dataclass
class Plan:
    """What :meth:`ChunkedUpload.prepare` found: a new session, or one to resume."""

    record: ResumeRecord
    file_size: int
    resumed: bool
    missing: list[int]
    received_bytes: int
    completed_job: str | None = None
    """The session was completed already: its job id (only the job is left to follow)."""
    uploaded_chunks: list[int] = field(default_factory=list)


class RateLimit:
    """At most ``rate`` bytes per second over all workers (``--max-rate``): each chunk reserves its slot."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._lock = threading.Lock()
        self._next = time.monotonic()

    def take(self, size: int, stop: threading.Event) -> None:
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + size / self.rate
        if start > now:
            stop.wait(start - now)


class ChunkedUpload:
    def __init__(
        self,
        client: DockyardClient,
        path: Path,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        parallel: int = 4,
        retry_for: float = 120.0,
        extension: str | None = None,
        file_context: str = "model",
        is_adapter: bool = False,
        store: ResumeStore | None = None,
        resume: bool = True,
        max_rate: float | None = None,
        on_retry: Callable[[Exception], None] | None = None,
    ) -> None:
        if chunk_size < 1 or parallel < 1:
            raise ConfigurationError("chunk size and parallelism must be at least 1")
        self.client = client
        self.path = path
        self.size = path.stat().st_size
        if self.size < 1:
            raise ConfigurationError(f"{path} is empty")
        self.chunk_size = chunk_size
        self.parallel = parallel
        self.retry_for = retry_for
        self.extension = extension or detect_extension(path.name)
        self.file_context = file_context
        self.is_adapter = is_adapter
        self.store = store or ResumeStore()
        self.resume = resume
        self.key = self.store.key(path, client)
        self.stop = threading.Event()
        self.limit = RateLimit(max_rate) if max_rate else None
        self._hasher: threading.Thread | None = None
        self._digest: str | None = None
        self._hash_error: BaseException | None = None
        self.last_transient: Exception | None = None
        """The latest error that was retried (a facade restarting, a lost connection)."""
        self.on_retry = on_retry
        self._told = 0.0

    # --- a session: resumed or new ---------------------------------------------------------------

    def prepare(self) -> Plan:
        if self.resume and (record := self.store.load(self.key)) is not None:
            state = self._state(record.session_id)
            if state is not None:
                if state.state == "completed" and state.dock_status_id:
                    return Plan(record, self.size, True, [], self.size, completed_job=state.dock_status_id)
                if state.state == "open":
                    missing = state.missing()
                    return Plan(record, self.size, True, missing, state.received_bytes)
            self.store.remove(self.key)  # expired, aborted or gone: start again
        total = -(-self.size // self.chunk_size)
        session = self._retrying(
            lambda: self.client.start_import(
                file_name=self.path.name,
                file_size=self.size,
                total_chunks=total,
                file_extension=self.extension,
                file_context=self.file_context,
                is_adapter=self.is_adapter,
            )
        )
        record = ResumeRecord(
            session_id=session.session_id,
            model_id=session.model_id,
            chunk_size=self.chunk_size,
            total_chunks=total,
            sha256="",
            path=str(self.path.resolve()),
            expiration_date=session.expiration_date,
        )
        self.store.save(self.key, record)
        return Plan(record, self.size, False, list(range(total)), 0)

    def _state(self, session_id: str) -> SessionState | None:
        try:
            state: SessionState = self._retrying(lambda: self.client.import_session(session_id))
            return state
        except (NotFound, Gone):
            return None

    # --- the chunks ------------------------------------------------------------------------------

    def _retrying(self, fn: Callable[[], Any]) -> Any:
        deadline = time.monotonic() + self.retry_for
        delay = 0.2
        while True:
            try:
                return fn()
            except (TransportError, ServerError) as exc:
                if self.stop.is_set() or time.monotonic() + delay > deadline:
                    raise
                self.last_transient = exc
                if self.on_retry is not None and time.monotonic() - self._told > 10:
                    self._told = time.monotonic()
                    self.on_retry(exc)
                self.stop.wait(delay)
                delay = min(delay * 2, 5.0)

    def _send(self, plan: Plan, number: int, fd: int, on_bytes: Callable[[int], None]) -> None:
        if self.stop.is_set():
            return
        record = plan.record
        offset = number * record.chunk_size
        length = min(record.chunk_size, plan.file_size - offset)
        if self.limit is not None:
            self.limit.take(length, self.stop)
            if self.stop.is_set():
                return
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise ConfigurationError(f"{self.path} changed while it was uploaded (short read of chunk {number})")
        self._retrying(lambda: self.client.upload_chunk(record.session_id, number, data))
        plan.uploaded_chunks.append(number)
        on_bytes(length)

    def upload(self, plan: Plan, on_bytes: Callable[[int], None]) -> None:
        """Send the plan's missing chunks, ``parallel`` at a time, then ask the session whether any is still
        missing (and send those). Ctrl-C (KeyboardInterrupt) stops it; the resume record stays."""
        fd = os.open(self.path, os.O_RDONLY)
        pool = ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="chunk")
        try:
            todo = plan.missing
            for _ in range(3):
                futures: list[Future[None]] = [pool.submit(self._send, plan, n, fd, on_bytes) for n in todo]
                pending: set[Future[None]] = set(futures)
                while pending:
                    done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
                    for fut in done:
                        if fut.exception() is not None:
                            raise fut.exception()  # type: ignore[misc]
                state = self._state(plan.record.session_id)
                if state is None:
                    raise Gone(410, {"error": {"code": "session_gone", "message": "the import session is gone"}})
                if state.state != "open":
                    return  # completed meanwhile (by another run of the same import)
                todo = state.missing()
                if not todo:
                    return
            raise ConfigurationError(f"chunks {todo[:10]} did not arrive after three rounds")
        except BaseException:
            self.stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        finally:
            pool.shutdown(wait=True)
            os.close(fd)

    def start_hashing(self, on_bytes: Callable[[int], None] | None = None) -> None:
        """Hash the file in a thread, in order, while the chunks go up (``sha256()`` waits for it)."""

        def run() -> None:
            try:
                self._digest = file_sha256(self.path, on_bytes, stop=self.stop)
            except BaseException as exc:  # handed to the caller of sha256()
                self._hash_error = exc

        self._hasher = threading.Thread(target=run, name="sha256", daemon=True)
        self._hasher.start()

    def sha256(self) -> str:
        if self._hasher is None:
            self.start_hashing()
        assert self._hasher is not None
        while self._hasher.is_alive():
            self._hasher.join(timeout=0.2)  # short joins: Ctrl-C stays deliverable
        if self._hash_error is not None:
            raise self._hash_error
        assert self._digest is not None
        return self._digest

    def complete(self, plan: Plan) -> JobRecord:
        """Complete the session with the file's SHA-256 (or follow the job of a session completed already)."""
        if plan.completed_job:
            return self.client.dock_status(plan.completed_job)
        sha = self.sha256()
        plan.record.sha256 = sha
        job: JobRecord = self._retrying(lambda: self.client.complete_import(plan.record.session_id, sha))
        return job

    def finished(self) -> None:
        """The import job ended: the resume record is not needed any more."""
        self.store.remove(self.key)

    def abort(self, plan: Plan) -> None:
        with contextlib.suppress(ApiError):
            self.client.abort_import(plan.record.session_id)
        self.store.remove(self.key)
