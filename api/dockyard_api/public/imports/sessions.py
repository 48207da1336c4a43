"""Finding an import session (docs/public-api.md, 'Chunked model import', 'Errors'): its files in the model
store while it is open, its Model once the files are gone, and the answer for a session that can no
longer act (404 never existed here, 409 completed, 410 expired, aborted or lost).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NoReturn, TypeVar

import anyio

from dockyard_api.public.imports.models import (
    ImportModels,
    environment_of,
    failed_reason,
    import_job,
)
from dockyard_api.public.schemas import ReceivedChunk, SessionState
from dockyard_core import import_status
from dockyard_core.clock import iso
from dockyard_core.modelstore import ModelStore, SessionMeta
from dockyard_core.resources.v1alpha1 import DockJob, Model
from dockyard_core.storeerrors import SessionCompleted, SessionGone, SessionNotFound

T = TypeVar("T")


async def files(fn: Callable[..., T], *args: Any) -> T:
    """Run one piece of the model store's file work in a thread (the only blocking work of the import)."""
    return await anyio.to_thread.run_sync(partial(fn, *args))


class Sessions:
    """The import sessions of the model store and their Models."""

    def __init__(self, store: ModelStore, models: ImportModels) -> None:
        self.store = store
        self.models = models

    async def meta(self, namespace: str, environment: str, session_id: str) -> SessionMeta | None:
        """The session's files (None once they are gone); 404 for a session of another environment. A session
        this store read before and whose file did not change since is not read again (:meth:`ModelStore.loaded`:
        one ``stat`` here instead of a hop to a thread; a chunk upload's every request asks)."""
        meta = self.store.loaded(session_id)
        if meta is None:
            meta = await files(self.store.load, session_id)  # validates the id's format first (404)
        if meta is not None and (meta.namespace, meta.environment) != (namespace, environment):
            raise SessionNotFound(f"no import session {session_id!r}", {"sessionId": session_id})
        return meta

    async def not_completed(self, namespace: str, environment: str, session_id: str, why: str) -> SessionMeta:
        """The session's files, unless it is gone (see :meth:`gone`) or completed (409, saying ``why``
        the request cannot act on it)."""
        meta = await self.meta(namespace, environment, session_id)
        if meta is None:
            await self.gone(namespace, environment, session_id)
        if meta.dock_status_id:
            raise SessionCompleted(
                f"import session {session_id} is completed; {why}",
                {"sessionId": session_id, "dockStatusId": meta.dock_status_id},
            )
        return meta

    async def open(self, namespace: str, environment: str, session_id: str) -> SessionMeta:
        """The session, if it may still receive chunks; else the error that says why not."""
        meta = await self.not_completed(namespace, environment, session_id, "it takes no more chunks")
        if meta.expired():
            raise SessionGone(
                f"import session {session_id} expired at {iso(meta.expires_at)}",
                {"sessionId": session_id, "expirationDate": iso(meta.expires_at)},
            )
        return meta

    async def model_of(self, namespace: str, environment: str, session_id: str) -> Model | None:
        """The session's Model, if the session was started in this environment."""
        model = await self.models.by_session(namespace, session_id)
        if model is None or environment_of(model) != environment:
            return None
        return model

    async def completed(self, namespace: str, environment: str, session_id: str) -> tuple[Model, DockJob]:
        """The Model and import job of a session whose files are gone because it was completed; any
        other gone session raises its answer (see :meth:`gone`)."""
        model = await self.model_of(namespace, environment, session_id)
        job = import_job(model) if model else None
        if model is None or job is None:
            await self.gone(namespace, environment, session_id, model)
        return model, job

    async def gone(self, namespace: str, environment: str, session_id: str, model: Model | None = None) -> NoReturn:
        """Raise the answer for a session whose files are gone: 409 if completed, 410 if it expired or
        was aborted, 404 if it never existed here."""
        model = model or await self.model_of(namespace, environment, session_id)
        if model is None:
            raise SessionNotFound(f"no import session {session_id!r}", {"sessionId": session_id})
        job = import_job(model)
        if job is not None:
            raise SessionCompleted(
                f"import session {session_id} is completed",
                {"sessionId": session_id, "dockStatusId": job.dock_status_id},
            )
        reason = failed_reason(model)
        details = {"sessionId": session_id, "modelId": model.metadata.name, "reason": reason}
        if reason == import_status.IMPORT_ABORTED:
            raise SessionGone(f"import session {session_id} was aborted", details, code="session_aborted")
        if reason == import_status.IMPORT_EXPIRED:
            raise SessionGone(f"import session {session_id} expired", details)
        raise SessionGone(f"the files of import session {session_id} are gone", details, code="session_lost")

    async def describe(self, namespace: str, environment: str, session_id: str) -> SessionState:
        """What a client needs to resume: the chunks received (number and size) and those missing."""
        meta = await self.meta(namespace, environment, session_id)
        if meta is None:
            model, job = await self.completed(namespace, environment, session_id)
            upload = model.spec.source.upload
            assert upload is not None  # an uploaded Model (it carries the session's label)
            return SessionState(
                session_id=session_id,
                model_id=model.metadata.name or "",
                state="completed",
                dock_status_id=job.dock_status_id,
                file_name=upload.file_name,
                file_size=upload.file_size,
                total_chunks=upload.total_chunks,
                received_chunks=[],
                received_bytes=upload.file_size,
                missing_chunks=[],
            )
        if not meta.dock_status_id and meta.expired():
            await self.open(namespace, environment, session_id)  # raises 410
        chunks = await files(self.store.chunks, session_id)
        have = {c.number for c in chunks}
        return SessionState(
            session_id=session_id,
            model_id=meta.model_id,
            state="completed" if meta.dock_status_id else "open",
            dock_status_id=meta.dock_status_id,
            expiration_date=iso(meta.expires_at),
            file_name=meta.upload.file_name,
            file_extension=meta.upload.file_extension,
            file_size=meta.upload.file_size,
            total_chunks=meta.upload.total_chunks,
            received_chunks=[ReceivedChunk(chunk_number=c.number, size=c.size) for c in chunks],
            received_bytes=sum(c.size for c in chunks),
            missing_chunks=[n for n in range(meta.upload.total_chunks) if n not in have],
        )
