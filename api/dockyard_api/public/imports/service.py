"""Chunked model import (docs/public-api.md, 'Chunked model import'): sessions in the model store, Models in Kubernetes.

The facade keeps no state of its own: a session is a directory of the model store (shared by every
replica) and a Model object; the job that completion starts is recorded on the Model (status.job and
the dock-status-id label), and the operator does the rest (assembly, verification, extraction).

The service is async: its Kubernetes calls go through core's typed repository over the one async client
(:mod:`dockyard_api.public.imports.models`) and only the model store's file work runs in threads. The
parts: :mod:`~dockyard_api.public.imports.sessions` (finding a session and saying why it cannot act),
:mod:`~dockyard_api.public.imports.sweeper` (what expired sessions leave behind); this module starts,
receives, aborts and completes.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import anyio

from dockyard_api.public.imports.chunks import ChunkUpload, RawReader
from dockyard_api.public.imports.documents import DocumentImports, is_document
from dockyard_api.public.imports.models import (
    ImportModels,
    check_checksum,
    conditions,
    expected_sha256,
    import_job,
    model_id_for,
    session_of,
)
from dockyard_api.public.imports.sessions import Sessions, files
from dockyard_api.public.imports.sweeper import Sweeper
from dockyard_api.public.schemas import ChunkReceived, JobRecord, SessionAborted, SessionStarted, SessionState
from dockyard_api.settings import ApiSettings
from dockyard_core import clock, import_status, requestid
from dockyard_core.clock import iso
from dockyard_core.errors import ConflictError, UpstreamError
from dockyard_core.import_status import IMPORT_ENVIRONMENT_ANNOTATION, IMPORT_SESSION_LABEL
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.modelstore import ModelStore, SessionMeta
from dockyard_core.resources.v1alpha1 import (
    DOCK_STATUS_ID_LABEL,
    Model,
    ModelSource,
    ModelSpec,
    ObjectMeta,
    UploadSource,
)
from dockyard_core.storeerrors import (
    MissingChunks,
    SessionCompleted,
    SessionGone,
    SizeMismatch,
    parse_chunk_number,
)
from dockyard_core.storefiles import ChunkWriter, ReceivedChunk
from dockyard_core.upload import Upload, UploadLimits

log = logging.getLogger("dockyard.imports")
MISSING_LISTED = 1000
"""At most this many missing chunk numbers are listed in a 409 (the count is always given)."""


class ImportService:
    """The import endpoints' logic over the model store and the Kubernetes API."""

    def __init__(self, settings: ApiSettings, kube: AsyncKube) -> None:
        self.settings = settings
        self.limits = UploadLimits(settings.max_chunk_bytes, settings.max_file_bytes)
        self.store: ModelStore = settings.open_model_store()
        self.models = ImportModels(kube)
        self.sessions = Sessions(self.store, self.models)
        self.sweeper = Sweeper(self.store, self.models, settings.session_lifetime_seconds)
        self.documents = DocumentImports(
            self.store, settings.document_files(self.store), settings.session_lifetime_seconds
        )

    # -- start --

    def upload_of(self, body: Mapping[str, Any]) -> Upload:
        """The start call's body as the one upload type, checked against this facade's limits (pydantic's
        ValidationError for the field errors; the checks on whole values raise their DockyardError)."""
        return Upload.model_validate(body, context=self.limits.context())

    async def start(self, namespace: str, environment: str, upload: Upload) -> SessionStarted:
        """Start a session for ``upload`` (validated with :meth:`upload_of`); a document's (fileContext
        document or dataset) has no Model (:mod:`~dockyard_api.public.imports.documents`)."""
        if is_document(upload):
            return await self.documents.start(namespace, environment, upload)
        await files(self.store.ensure)
        at = clock.now()
        expires = at + timedelta(seconds=self.settings.session_lifetime_seconds)
        session_id = uuid.uuid4().hex
        meta = SessionMeta(
            session_id=session_id,
            namespace=namespace,
            environment=environment,
            model_id="",
            upload=upload,
            created_at=at,
            expires_at=expires,
        )
        model, meta = await self._create_model(meta)
        try:
            # unguarded: the Model is new and only this call sets its first status (the operator may have
            # added its annotations meanwhile)
            await self.models.patch_status(model, import_status.started(session_id, expires, at), guarded=False)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await files(self.store.remove, session_id)
                await self.models.discard(namespace, meta.model_id)
            raise
        return SessionStarted(session_id=session_id, model_id=meta.model_id, expiration_date=iso(expires))

    def _new_session_files(self, meta: SessionMeta) -> None:
        if self.store.load(meta.session_id) is None:
            self.store.create(meta)
        else:
            self.store.save(meta)

    async def _create_model(self, meta: SessionMeta) -> tuple[Model, SessionMeta]:
        """Session directory first, then the Model: a Model never names a session that does not exist,
        and a directory whose Model was never created is deleted by the sweeper once expired."""
        for _ in range(5):
            model_id = model_id_for(meta.upload.file_name)
            meta = replace(meta, model_id=model_id)
            await files(self._new_session_files, meta)
            model = Model(
                metadata=ObjectMeta(
                    name=model_id,
                    namespace=meta.namespace,
                    labels={IMPORT_SESSION_LABEL: meta.session_id},
                    annotations={IMPORT_ENVIRONMENT_ANNOTATION: meta.environment, **requestid.as_annotation()},
                ),
                spec=ModelSpec(
                    source=ModelSource(upload=UploadSource(**meta.upload.model_dump(exclude={"is_adapter"}))),
                    is_adapter=meta.upload.is_adapter,
                ),
            )
            try:
                return await self.models.create(model), meta
            except ConflictError:  # that name is taken: draw another
                continue
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await files(self.store.remove, meta.session_id)
                raise
        await files(self.store.remove, meta.session_id)
        raise UpstreamError("no free Model name was found")

    # -- chunks and state --

    async def receive_chunk(
        self,
        namespace: str,
        environment: str,
        session_id: str,
        content_type: str | None,
        stream: AsyncIterator[bytes],
        raw: RawReader | None = None,
    ) -> tuple[ChunkReceived, int, bool]:
        """Stream one multipart chunk into the session's store (without holding it in memory) and publish
        it: (the answer, the chunk's size, whether it was new; a retry of a stored chunk is not). Only the
        file work runs in threads; ``raw``: the rest of the body read by one of them (:class:`ChunkUpload`);
        the publication follows the chunk's flush in the same thread."""
        meta = await self.sessions.open(namespace, environment, session_id)
        limit, fsync = self.settings.max_chunk_bytes, self.settings.fsync_chunks

        def open_writer() -> ChunkWriter:
            return self.store.writer(meta, limit, fsync=fsync)

        def check_number(raw: str) -> int:
            return parse_chunk_number(raw, meta.upload.total_chunks)

        def publish(number: int, chunk: ReceivedChunk) -> bool:
            return self.store.publish(meta, number, chunk)

        upload = ChunkUpload(open_writer, check_number)
        number, chunk = await upload.read(content_type, stream, raw, publish)  # published in the flushing thread
        assert upload.published is not None
        return ChunkReceived(chunk_number=number, session_id=session_id), chunk.size, upload.published

    async def describe(self, namespace: str, environment: str, session_id: str) -> SessionState:
        """What a client needs to resume: the chunks received (number and size) and those missing."""
        return await self.sessions.describe(namespace, environment, session_id)

    # -- abort --

    async def abort(self, namespace: str, environment: str, session_id: str) -> SessionAborted:
        """Delete the session's chunks; its Model becomes Failed (reason ImportAborted) and stays, so
        that ``kubectl get models`` tells what happened (delete it like any object)."""
        meta = await self.sessions.not_completed(namespace, environment, session_id, "its import job owns the files")
        for _ in range(5):
            model = await self.models.find(namespace, meta.model_id)
            if model is None or session_of(model) != session_id:
                break
            if import_job(model) is not None:
                raise SessionCompleted(f"import session {session_id} is completed", {"sessionId": session_id})
            if model.status.phase == "Failed":
                break
            patch = import_status.failed(
                None,
                import_status.IMPORT_ABORTED,
                f"import session {session_id} was aborted by the client",
                conditions(model),
                clock.now(),
            )
            try:
                await self.models.patch_status(model, patch)
                break
            except ConflictError:  # changed meanwhile: read again
                continue
        freed = await files(self.store.remove, session_id)
        log.info("import session %s aborted, %d bytes freed", session_id, freed)
        return SessionAborted(session_id=session_id, model_id=meta.model_id, freed_bytes=freed)

    # -- complete --

    def _check_received(self, meta: SessionMeta) -> None:
        """409 unless every chunk is there and they hold fileSize bytes (file work: run in a thread)."""
        missing = self.store.missing(meta)
        if missing:
            raise MissingChunks(
                f"{len(missing)} of {meta.upload.total_chunks} chunks are missing",
                {"missingChunks": missing[:MISSING_LISTED], "missingCount": len(missing)},
            )
        received = self.store.received_bytes(meta.session_id)
        if received != meta.upload.file_size:
            raise SizeMismatch(
                f"the chunks hold {received} bytes, fileSize is {meta.upload.file_size}; abort the session "
                "(DELETE) and upload the file again",
                {"fileSize": meta.upload.file_size, "receivedBytes": received},
            )

    def _mark_completed(self, meta: SessionMeta, dock_status_id: str) -> None:
        # the import job may finish (and remove the session) between the two steps: nothing left to mark
        with contextlib.suppress(FileNotFoundError):
            if self.store.load(meta.session_id) is not None:
                self.store.mark_completed(meta, dock_status_id)

    async def complete(self, namespace: str, environment: str, session_id: str, sha256: str | None = None) -> JobRecord:
        """Start the import job (once). ``sha256``: the file's SHA-256, when the client computed it while
        uploading (a Dockyard extension; it must agree with one sent at start)."""
        meta = await self.sessions.meta(namespace, environment, session_id)
        if meta is None:
            completed, completed_job = await self.sessions.completed(namespace, environment, session_id)
            check_checksum(completed, None, sha256)
            return JobRecord.imported(completed_job, completed.metadata.name or "")
        if not meta.dock_status_id:
            if meta.expired():
                await self.sessions.open(namespace, environment, session_id)  # raises 410
            await files(self._check_received, meta)
        if is_document(meta.upload):
            return await self.documents.complete(meta, sha256)
        for _ in range(5):
            model = await self.models.find(namespace, meta.model_id)
            if model is None or session_of(model) != session_id:
                raise SessionGone(
                    f"the Model {meta.model_id} of import session {session_id} was deleted",
                    {"sessionId": session_id, "modelId": meta.model_id},
                    code="model_deleted",
                )
            check_checksum(model, meta.upload.sha256, sha256)
            job = import_job(model)
            if job is None and sha256 and expected_sha256(model) != sha256:
                # before the job exists: the operator reads the checksum when the job appears
                await self.models.annotate(namespace, meta.model_id, {import_status.UPLOAD_SHA256_ANNOTATION: sha256})
                continue
            if job is None:
                if model.status.phase == "Failed":
                    await self.sessions.gone(namespace, environment, session_id, model)
                at = clock.now()
                new = import_status.new_job(str(uuid.uuid4()), at)
                try:
                    model = await self.models.patch_status(model, import_status.completed(new, conditions(model), at))
                except ConflictError:  # changed meanwhile (another replica completing?): read again
                    continue
                job = import_job(model)
                assert job is not None
                log.info("import session %s completed: job %s", session_id, job.dock_status_id)
            if (model.metadata.labels or {}).get(DOCK_STATUS_ID_LABEL) != job.dock_status_id:
                await self.models.label(namespace, meta.model_id, {DOCK_STATUS_ID_LABEL: job.dock_status_id})
            if meta.dock_status_id != job.dock_status_id:
                await files(self._mark_completed, meta, job.dock_status_id)
            return JobRecord.imported(job, meta.model_id)
        raise UpstreamError("the Model kept changing; try again")

    # -- sweeper --

    async def sweep(self, now: datetime | None = None) -> dict[str, int]:
        """Delete what expired sessions leave behind; their Models become Failed (ImportExpired)
        (:class:`~dockyard_api.public.imports.sweeper.Sweeper`)."""
        return await self.sweeper.sweep(now)
