"""Chunked model import (docs/public-api.md, 'Chunked model import'): sessions in the model store, Models in Kubernetes.

The facade keeps no state of its own: a session is a directory of the model store (shared by every
replica) and a Model object; the job that completion starts is recorded on the Model (status.job and
the dock-status-id label), and the operator does the rest (assembly, verification, extraction).

The service is async: its Kubernetes calls go through the one async client
(:class:`dockyard_core.kubeclient.AsyncKube`) and only the model store's file work runs in threads.
"""

from __future__ import annotations

import logging
import re
import secrets
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from functools import partial
from typing import Any, NoReturn, TypeVar

import anyio

from dockyard_api.public.imports.chunks import ChunkUpload
from dockyard_api.settings import ApiSettings
from dockyard_core import clock, import_status, jobs, requestid
from dockyard_core.clock import iso
from dockyard_core.errors import DockyardError, KubeUnavailableError, UpstreamError
from dockyard_core.import_status import IMPORT_ENVIRONMENT_ANNOTATION, IMPORT_SESSION_LABEL
from dockyard_core.kubeclient import MERGE, AsyncKube, KubeError
from dockyard_core.kubeclient import guarded as guard
from dockyard_core.modelstore import SESSION_ID_RE, ModelStore, SessionMeta
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
    SessionNotFound,
    SizeMismatch,
    parse_chunk_number,
)
from dockyard_core.storefiles import ChunkWriter
from dockyard_core.upload import Upload, UploadLimits

log = logging.getLogger("dockyard.imports")
PLURAL = "models"
MISSING_LISTED = 1000
"""At most this many missing chunk numbers are listed in a 409 (the count is always given)."""
T = TypeVar("T")


async def _files(fn: Callable[..., T], *args: Any) -> T:
    """Run one piece of the model store's file work in a thread (the only blocking work here)."""
    return await anyio.to_thread.run_sync(partial(fn, *args))


def model_id_for(file_name: str) -> str:
    """A new modelId: a DNS-1123 label made of the file's name and 8 random hex digits,
    e.g. ``llama-3-8b-lora-3f9a1c2e``."""
    stem = file_name.lower()
    for ext in (".tar.gz", ".tgz", ".tar", ".zip", ".safetensors", ".gguf", ".bin", ".pth", ".pt"):
        stem = stem.removesuffix(ext)
    slug = re.sub(r"[^a-z0-9]+", "-", stem).strip("-")[:40].strip("-")
    return f"{slug or 'model'}-{secrets.token_hex(4)}"


class Models:
    """The few Model calls of the import, as plain JSON, through the one async client.

    An unavailable API server (unreachable, no answer in time, throttling, failing) is a 503 with
    Retry-After, a refusing one a 502, never a 500; 404 and 409 stay :class:`KubeError` for the caller
    to decide."""

    def __init__(self, kube: AsyncKube) -> None:
        self.kube = kube

    async def _call(self, what: str, method: str, path: str, **kw: Any) -> dict[str, Any]:
        try:
            return await self.kube.request(method, path, **kw)
        except KubeError as exc:
            if exc.status in (404, 409):
                raise
            if exc.reason == "Unreachable":  # no answer at all (AsyncKube's own 503)
                raise KubeUnavailableError(f"the Kubernetes API is not reachable ({what})", exc.message) from exc
            unavailable = exc.status == 429 or exc.status >= 500
            error = KubeUnavailableError if unavailable else UpstreamError
            raise error(f"the Kubernetes API refused to {what}", {"status": exc.status, "reason": exc.reason}) from exc

    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._call("create the Model", "POST", AsyncKube.custom_path(namespace, PLURAL), json=body)

    async def delete(self, namespace: str, name: str) -> None:
        """Best effort (used to undo a half-done start)."""
        try:
            await self.kube.request("DELETE", AsyncKube.custom_path(namespace, PLURAL, name))
        except Exception:  # the start fails anyway; the sweeper and kubectl remain
            log.warning("could not delete Model %s/%s after a failed start", namespace, name, exc_info=True)

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._call("read the Model", "GET", AsyncKube.custom_path(namespace, PLURAL, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def by_session(self, namespace: str, session_id: str) -> dict[str, Any] | None:
        found = await self._call(
            "list Models",
            "GET",
            AsyncKube.custom_path(namespace, PLURAL),
            params={"labelSelector": f"{IMPORT_SESSION_LABEL}={session_id}"},
        )
        items: list[dict[str, Any]] = found.get("items") or []
        return items[0] if items else None

    async def importing(self) -> list[dict[str, Any]]:
        """Every uploaded Model (all namespaces)."""
        found = await self._call(
            "list Models", "GET", AsyncKube.all_namespaces_path(PLURAL), params={"labelSelector": IMPORT_SESSION_LABEL}
        )
        items: list[dict[str, Any]] = found.get("items") or []
        return items

    async def patch_status(
        self, model: dict[str, Any], status: dict[str, Any], *, guarded: bool = True
    ) -> dict[str, Any]:
        """Merge-patch the status; ``guarded``: only if the Model is still at the version read (else
        KubeError 409)."""
        meta = model["metadata"]
        body = guard({"status": status}, meta["resourceVersion"] if guarded else None)
        path = AsyncKube.custom_path(meta["namespace"], PLURAL, meta["name"], "status")
        return await self._call("update the Model's status", "PATCH", path, json=body, content_type=MERGE)

    async def annotate(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        path = AsyncKube.custom_path(namespace, PLURAL, name)
        body = {"metadata": {"annotations": annotations}}
        await self._call("annotate the Model", "PATCH", path, json=body, content_type=MERGE)

    async def label(self, namespace: str, name: str, labels: dict[str, str]) -> None:
        path = AsyncKube.custom_path(namespace, PLURAL, name)
        body = {"metadata": {"labels": labels}}
        await self._call("label the Model", "PATCH", path, json=body, content_type=MERGE)


def _expected_sha256(model: dict[str, Any]) -> str | None:
    source = ((model.get("spec") or {}).get("source") or {}).get("upload") or {}
    notes = model["metadata"].get("annotations") or {}
    found = source.get("sha256") or notes.get(import_status.UPLOAD_SHA256_ANNOTATION)
    return str(found) if found else None


def _check_checksum(model: dict[str, Any], at_start: str | None, sent: str | None) -> None:
    """409 when the completion's SHA-256 contradicts the one the import already has."""
    expected = at_start or _expected_sha256(model)
    if sent and expected and sent != expected:
        raise ChecksumConflict(
            f"the SHA-256 sent with the completion ({sent}) is not the one this import already has ({expected})",
            {"sha256": sent, "expected": expected},
        )


class ChecksumConflict(DockyardError):
    status_code = 409
    code = "checksum_conflict"


def _job(model: dict[str, Any]) -> dict[str, Any] | None:
    job = (model.get("status") or {}).get("job")
    return job if job and job.get("action") == "EXPORT" else None


def _session_of(model: dict[str, Any]) -> str | None:
    return (model["metadata"].get("labels") or {}).get(IMPORT_SESSION_LABEL)


class ImportService:
    """The import endpoints' logic over the model store and the Kubernetes API."""

    def __init__(self, settings: ApiSettings, kube: AsyncKube) -> None:
        self.settings = settings
        self.limits = UploadLimits(settings.max_chunk_bytes, settings.max_file_bytes)
        self.store: ModelStore = settings.open_model_store()
        self.models = Models(kube)

    # -- start --

    def upload_of(self, body: Mapping[str, Any]) -> Upload:
        """The start call's body as the one upload type, checked against this facade's limits (pydantic's
        ValidationError for the field errors; the checks on whole values raise their DockyardError)."""
        return Upload.model_validate(body, context=self.limits.context())

    async def start(self, namespace: str, environment: str, upload: Upload) -> dict[str, Any]:
        """Start a session for ``upload`` (validated with :meth:`upload_of`)."""
        await _files(self.store.ensure)
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
                await _files(self.store.remove, session_id)
                await self.models.delete(namespace, meta.model_id)
            raise
        return {"sessionId": session_id, "modelId": meta.model_id, "expirationDate": iso(expires)}

    def _new_session_files(self, meta: SessionMeta) -> None:
        if self.store.load(meta.session_id) is None:
            self.store.create(meta)
        else:
            self.store.save(meta)

    async def _create_model(self, meta: SessionMeta) -> tuple[dict[str, Any], SessionMeta]:
        """Session directory first, then the Model: a Model never names a session that does not exist,
        and a directory whose Model was never created is deleted by the sweeper once expired."""
        for _ in range(5):
            model_id = model_id_for(meta.upload.file_name)
            meta = replace(meta, model_id=model_id)
            await _files(self._new_session_files, meta)
            body = Model(
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
            ).to_manifest()
            try:
                return await self.models.create(meta.namespace, body), meta
            except KubeError as exc:
                if exc.status == 409:  # that name is taken: draw another
                    continue
                await _files(self.store.remove, meta.session_id)
                raise DockyardError(f"the Model could not be created: {exc.reason}", {"status": exc.status}) from exc
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await _files(self.store.remove, meta.session_id)
                raise
        await _files(self.store.remove, meta.session_id)
        raise UpstreamError("no free Model name was found")

    # -- sessions --

    async def _not_completed(self, namespace: str, environment: str, session_id: str, why: str) -> SessionMeta:
        """The session's files, unless it is gone (see :meth:`_gone`) or completed (409, saying ``why``
        the request cannot act on it)."""
        meta = await self._meta(namespace, environment, session_id)
        if meta is None:
            await self._gone(namespace, environment, session_id)
        if meta.dock_status_id:
            raise SessionCompleted(
                f"import session {session_id} is completed; {why}",
                {"sessionId": session_id, "dockStatusId": meta.dock_status_id},
            )
        return meta

    async def open_session(self, namespace: str, environment: str, session_id: str) -> SessionMeta:
        """The session, if it may still receive chunks; else the error that says why not."""
        meta = await self._not_completed(namespace, environment, session_id, "it takes no more chunks")
        if meta.expired():
            raise SessionGone(
                f"import session {session_id} expired at {iso(meta.expires_at)}",
                {"sessionId": session_id, "expirationDate": iso(meta.expires_at)},
            )
        return meta

    async def receive_chunk(
        self, namespace: str, environment: str, session_id: str, content_type: str | None, stream: AsyncIterator[bytes]
    ) -> tuple[int, int, bool]:
        """Stream one multipart chunk into the session's store (without holding it in memory) and publish
        it: (chunk number, its size, whether it was new; a retry of a stored chunk is not). Only the file
        work runs in threads."""
        meta = await self.open_session(namespace, environment, session_id)
        limit, fsync = self.settings.max_chunk_bytes, self.settings.fsync_chunks

        def open_writer() -> ChunkWriter:
            return self.store.writer(meta, limit, fsync=fsync)

        def check_number(raw: str) -> int:
            return parse_chunk_number(raw, meta.upload.total_chunks)

        number, chunk = await ChunkUpload(open_writer, check_number).read(content_type, stream)
        size = chunk.size
        new = await _files(self.store.publish, meta, number, chunk)
        return number, size, new

    async def _meta(self, namespace: str, environment: str, session_id: str) -> SessionMeta | None:
        meta = await _files(self.store.load, session_id)  # validates the id's format first (404)
        if meta is not None and (meta.namespace, meta.environment) != (namespace, environment):
            raise SessionNotFound(f"no import session {session_id!r}", {"sessionId": session_id})
        return meta

    async def _model_of(self, namespace: str, environment: str, session_id: str) -> dict[str, Any] | None:
        model = await self.models.by_session(namespace, session_id)
        if model is None:
            return None
        annotations = model["metadata"].get("annotations") or {}
        if annotations.get(IMPORT_ENVIRONMENT_ANNOTATION) != environment:
            return None
        return model

    async def _completed(
        self, namespace: str, environment: str, session_id: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The Model and import job of a session whose files are gone because it was completed; any
        other gone session raises its answer (see :meth:`_gone`)."""
        model = await self._model_of(namespace, environment, session_id)
        job = _job(model) if model else None
        if model is None or job is None:
            await self._gone(namespace, environment, session_id, model)
        return model, job

    async def _gone(
        self, namespace: str, environment: str, session_id: str, model: dict[str, Any] | None = None
    ) -> NoReturn:
        """Raise the answer for a session whose files are gone: 409 if completed, 410 if it expired or
        was aborted, 404 if it never existed here."""
        model = model or await self._model_of(namespace, environment, session_id)
        if model is None:
            raise SessionNotFound(f"no import session {session_id!r}", {"sessionId": session_id})
        job = _job(model)
        if job is not None:
            raise SessionCompleted(
                f"import session {session_id} is completed",
                {"sessionId": session_id, "dockStatusId": job["dockStatusId"]},
            )
        status = model.get("status") or {}
        reason = import_status.failed_reason(status)
        details = {"sessionId": session_id, "modelId": model["metadata"]["name"], "reason": reason}
        if reason == import_status.IMPORT_ABORTED:
            raise SessionGone(f"import session {session_id} was aborted", details, code="session_aborted")
        if reason == import_status.IMPORT_EXPIRED:
            raise SessionGone(f"import session {session_id} expired", details)
        raise SessionGone(f"the files of import session {session_id} are gone", details, code="session_lost")

    async def describe(self, namespace: str, environment: str, session_id: str) -> dict[str, Any]:
        """What a client needs to resume: the chunks received (number and size) and those missing."""
        meta = await self._meta(namespace, environment, session_id)
        if meta is None:
            model, job = await self._completed(namespace, environment, session_id)
            upload = UploadSource.model_validate(model["spec"]["source"]["upload"])
            return {
                "sessionId": session_id,
                "modelId": model["metadata"]["name"],
                "state": "completed",
                "dockStatusId": job["dockStatusId"],
                "fileName": upload.file_name,
                "fileSize": upload.file_size,
                "totalChunks": upload.total_chunks,
                "receivedChunks": [],
                "receivedBytes": upload.file_size,
                "missingChunks": [],
            }
        if not meta.dock_status_id and meta.expired():
            await self.open_session(namespace, environment, session_id)  # raises 410
        chunks = await _files(self.store.chunks, session_id)
        have = {c.number for c in chunks}
        return {
            "sessionId": session_id,
            "modelId": meta.model_id,
            "state": "completed" if meta.dock_status_id else "open",
            "dockStatusId": meta.dock_status_id,
            "expirationDate": iso(meta.expires_at),
            "fileName": meta.upload.file_name,
            "fileExtension": meta.upload.file_extension,
            "fileSize": meta.upload.file_size,
            "totalChunks": meta.upload.total_chunks,
            "receivedChunks": [{"chunkNumber": c.number, "size": c.size} for c in chunks],
            "receivedBytes": sum(c.size for c in chunks),
            "missingChunks": [n for n in range(meta.upload.total_chunks) if n not in have],
        }

    # -- abort --

    async def abort(self, namespace: str, environment: str, session_id: str) -> dict[str, Any]:
        """Delete the session's chunks; its Model becomes Failed (reason ImportAborted) and stays, so
        that ``kubectl get models`` tells what happened (delete it like any object)."""
        meta = await self._not_completed(namespace, environment, session_id, "its import job owns the files")
        for _ in range(5):
            model = await self.models.get(namespace, meta.model_id)
            if model is None or _session_of(model) != session_id:
                break
            if _job(model) is not None:
                raise SessionCompleted(f"import session {session_id} is completed", {"sessionId": session_id})
            status = model.get("status") or {}
            if status.get("phase") == "Failed":
                break
            patch = import_status.failed(
                None,
                import_status.IMPORT_ABORTED,
                f"import session {session_id} was aborted by the client",
                status.get("conditions"),
                clock.now(),
            )
            try:
                await self.models.patch_status(model, patch)
                break
            except KubeError as exc:
                if exc.status != 409:
                    raise
        freed = await _files(self.store.remove, session_id)
        log.info("import session %s aborted, %d bytes freed", session_id, freed)
        return {"sessionId": session_id, "modelId": meta.model_id, "freedBytes": freed}

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
        if self.store.load(meta.session_id) is not None:
            self.store.mark_completed(meta, dock_status_id)

    async def complete(
        self, namespace: str, environment: str, session_id: str, sha256: str | None = None
    ) -> dict[str, Any]:
        """Start the import job (once). ``sha256``: the file's SHA-256, when the client computed it while
        uploading (a Dockyard extension; it must agree with one sent at start)."""
        meta = await self._meta(namespace, environment, session_id)
        if meta is None:
            completed, completed_job = await self._completed(namespace, environment, session_id)
            _check_checksum(completed, None, sha256)
            return jobs.import_record(completed_job, completed["metadata"]["name"])
        if not meta.dock_status_id:
            if meta.expired():
                await self.open_session(namespace, environment, session_id)  # raises 410
            await _files(self._check_received, meta)
        for _ in range(5):
            model = await self.models.get(namespace, meta.model_id)
            if model is None or _session_of(model) != session_id:
                raise SessionGone(
                    f"the Model {meta.model_id} of import session {session_id} was deleted",
                    {"sessionId": session_id, "modelId": meta.model_id},
                    code="model_deleted",
                )
            _check_checksum(model, meta.upload.sha256, sha256)
            job = _job(model)
            if job is None and sha256 and _expected_sha256(model) != sha256:
                # before the job exists: the operator reads the checksum when the job appears
                await self.models.annotate(namespace, meta.model_id, {import_status.UPLOAD_SHA256_ANNOTATION: sha256})
                continue
            if job is None:
                status = model.get("status") or {}
                if status.get("phase") == "Failed":
                    await self._gone(namespace, environment, session_id, model)
                at = clock.now()
                new = import_status.new_job(str(uuid.uuid4()), at)
                try:
                    model = await self.models.patch_status(
                        model, import_status.completed(new, status.get("conditions"), at)
                    )
                except KubeError as exc:
                    if exc.status == 409:  # changed meanwhile (another replica completing?): read again
                        continue
                    raise
                job = _job(model)
                assert job is not None
                log.info("import session %s completed: job %s", session_id, job["dockStatusId"])
            labels = model["metadata"].get("labels") or {}
            if labels.get(DOCK_STATUS_ID_LABEL) != job["dockStatusId"]:
                await self.models.label(namespace, meta.model_id, {DOCK_STATUS_ID_LABEL: job["dockStatusId"]})
            if meta.dock_status_id != job["dockStatusId"]:
                await _files(self._mark_completed, meta, job["dockStatusId"])
            return jobs.import_record(job, meta.model_id)
        raise UpstreamError("the Model kept changing; try again")

    # -- sweeper --

    async def sweep(self, now: datetime | None = None) -> dict[str, int]:
        """Delete what expired sessions leave behind; their Models become Failed (ImportExpired).

        Level-based and idempotent (every replica may run it): a session directory goes when it expired
        and was never completed, when its Model is gone, or when its import job is over (the operator
        removes it itself; this catches a crash in between). A Model still Importing without a job whose
        session expired becomes Failed even when its directory is gone already."""
        now = now or clock.now()
        models = {(m["metadata"]["namespace"], _session_of(m)): m for m in await self.models.importing()}
        counts = await _files(self._sweep_sessions, models, now)
        for model in models.values():
            status = model.get("status") or {}
            session = status.get("importSession") or {}
            if status.get("phase") != "Importing" or _job(model) is not None or not session.get("expirationDate"):
                continue
            expires = datetime.fromisoformat(session["expirationDate"].replace("Z", "+00:00"))
            if expires > now:
                continue
            patch = import_status.failed(
                None,
                import_status.IMPORT_EXPIRED,
                f"import session {session.get('sessionId')} expired at {session['expirationDate']} before it was "
                "completed",
                status.get("conditions"),
                now,
            )
            try:
                await self.models.patch_status(model, patch)
                counts["models_expired"] += 1
            except KubeError as exc:
                if exc.status not in (404, 409):  # gone, or changed: the next sweep looks again
                    raise
            session_id = session.get("sessionId") or _session_of(model) or ""
            if SESSION_ID_RE.match(session_id):
                await _files(self.store.remove, session_id)
        return counts

    def _sweep_sessions(self, models: dict[tuple[str, str | None], dict[str, Any]], now: datetime) -> dict[str, int]:
        """The file part of :meth:`sweep` (run in a thread): remove the session directories that are done."""
        counts = {"sessions_removed": 0, "bytes_freed": 0, "models_expired": 0}
        for session_id in self.store.session_ids():
            try:
                meta = self.store.load(session_id)
            except (ValueError, KeyError, TypeError):
                meta = None
            if meta is None:
                if self.store.session_age(session_id) > self.settings.session_lifetime_seconds:
                    counts["bytes_freed"] += self.store.remove(session_id)
                    counts["sessions_removed"] += 1
                continue
            model = models.get((meta.namespace, session_id))
            job = _job(model) if model else None
            expired = meta.expired(now)
            if job is not None:
                remove = job.get("status") != "IN_PROGRESS"
            elif model is None:
                remove = expired
            else:
                remove = expired or (model.get("status") or {}).get("phase") == "Failed"
            if remove:
                counts["bytes_freed"] += self.store.remove(session_id)
                counts["sessions_removed"] += 1
        return counts
