"""The reconcile of a Model: the import job of uploaded Models, level-based, restart-safe, one Model at a
time per lock.

A Model whose ``spec.source.upload`` is set and whose job (action EXPORT) is IN_PROGRESS is imported
by :func:`~dockyard_operator.importing.run.run_import` (the file work, :mod:`dockyard_operator.importing`)
in a worker thread (at most ``import_concurrency`` at once), and its status becomes
ReadyToDeploy/SUCCESS or Failed/FAILED with the reason. The session's chunks are deleted
once the outcome is recorded. A restart re-runs unfinished jobs (the watch lists every Model again);
run_import is idempotent. Deleting an uploaded Model deletes its stored files (at once when the
operator sees the deletion, else at the garbage collection that runs when the operator starts and
then every ``model_gc_interval_seconds``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from dockyard_core import clock, import_status
from dockyard_core.import_status import IMPORT_SESSION_LABEL
from dockyard_core.modelstore import SESSION_ID_RE, ModelStore
from dockyard_core.resources.v1alpha1 import DOCK_STATUS_ID_LABEL, DockJob, ModelStorage
from dockyard_core.s3store import S3ModelStore
from dockyard_operator import monitoring, tracing
from dockyard_operator.importing.results import Imported, ImportFailed, Limits
from dockyard_operator.importing.run import import_into, staging_dirs
from dockyard_operator.kube import Conflict, KubeApi
from dockyard_operator.locks import KeyedLocks
from dockyard_operator.settings import OperatorSettings
from dockyard_operator.workqueue import Event, PostEvent, log_event

log = logging.getLogger("dockyard.import")


def import_in_flight(spec: Mapping[str, Any], status: Mapping[str, Any], **_: Any) -> bool:
    job = status.get("job") or {}
    upload = (spec.get("source") or {}).get("upload")
    return bool(upload) and job.get("action") == "EXPORT" and job.get("status") == "IN_PROGRESS"


def is_upload(spec: Mapping[str, Any], **_: Any) -> bool:
    return bool((spec.get("source") or {}).get("upload"))


class Importer:
    def __init__(self, settings: OperatorSettings, kube: KubeApi, post: PostEvent = log_event) -> None:
        """``post``: how the job's Events about a Model are posted (the handlers give theirs; the
        default only logs them)."""
        self.post = post
        self.store: ModelStore = settings.open_model_store()
        self.limits = Limits(settings.max_extracted_bytes, settings.max_archive_members)
        self.kube = kube
        self.files = ThreadPoolExecutor(settings.import_concurrency, thread_name_prefix="import")
        self.locks = KeyedLocks()

    async def _files(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.files, partial(fn, *args, **kwargs))

    async def _read(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.kube.get("models", namespace, name)

    async def reconcile(self, namespace: str, name: str, uid: str) -> None:
        """Run the Model's import job if it is in flight (reads the Model afresh: the caller's copy may be
        older than the lock's wait)."""
        async with self.locks.hold(uid):
            model = await self._read(namespace, name)
            if model is None or model["metadata"]["uid"] != uid:
                return
            if not import_in_flight(model.get("spec") or {}, model.get("status") or {}):
                return
            job = DockJob.model_validate(model["status"]["job"])
            if (model["metadata"].get("labels") or {}).get(DOCK_STATUS_ID_LABEL) != job.dock_status_id:
                await self.kube.patch_object(
                    "models", namespace, name, {"metadata": {"labels": {DOCK_STATUS_ID_LABEL: job.dock_status_id}}}
                )
            session_id = (model["status"].get("importSession") or {}).get("sessionId") or (
                model["metadata"].get("labels") or {}
            ).get(import_status.IMPORT_SESSION_LABEL, "")
            if not SESSION_ID_RE.match(session_id or ""):
                outcome: Imported | ImportFailed = ImportFailed("UploadMissing", "the Model names no import session")
            else:
                # what the start call declared is the session's (read back in import_into); the checksum of
                # the completion call is the Model's annotation
                sha256 = (model["metadata"].get("annotations") or {}).get(import_status.UPLOAD_SHA256_ANNOTATION)
                self.post(model, Event("Normal", "ImportRunning", f"import job {job.dock_status_id}: processing"))
                monitoring.job_started(model, job.dock_status_id, job.job_type, job.action)
                with tracing.object_span(f"import {name}", model, **{"dockyard.job.id": job.dock_status_id}) as span:
                    try:
                        outcome = await self._files(
                            import_into, self.store, namespace, name, session_id, job.dock_status_id, self.limits,
                            sha256=sha256, work=self.store.root / "imports",
                        )  # fmt: skip
                    except ImportFailed as failure:
                        outcome = failure
                    tracing.result(span, "FAILED" if isinstance(outcome, ImportFailed) else "SUCCESS")
            await self._record(namespace, name, uid, job, outcome, session_id)

    async def _record(
        self, namespace: str, name: str, uid: str, job: DockJob, outcome: Imported | ImportFailed, session_id: str
    ) -> None:
        for _ in range(5):
            model = await self._read(namespace, name)
            if model is None or model["metadata"]["uid"] != uid:  # deleted meanwhile: nothing may stay behind
                await self._files(self.forget, namespace, name, session_id)
                return
            current = (model.get("status") or {}).get("job") or {}
            if current.get("dockStatusId") != job.dock_status_id or current.get("status") != "IN_PROGRESS":
                return  # another run recorded it
            previous = model["status"].get("conditions")
            at = clock.now()
            if isinstance(outcome, ImportFailed):
                patch = import_status.failed(job, outcome.reason, outcome.message, previous, at)
            else:
                storage = ModelStorage(
                    path=outcome.path,
                    size_bytes=outcome.size_bytes,
                    sha256=outcome.sha256,
                    format=outcome.format,
                    file=outcome.file,
                    files_bytes=outcome.files_bytes,
                )
                patch = import_status.imported(job, storage, previous, at, adapter_base=outcome.adapter_base)
            try:
                await self.kube.patch_status("models", namespace, name, patch, model["metadata"]["resourceVersion"])
            except Conflict:
                continue
            ended = patch["job"]
            monitoring.job_finished(
                model,
                dock_status_id=job.dock_status_id,
                job_type=str(ended.get("jobType") or "MODELS"),
                action=str(ended.get("action") or "EXPORT"),
                status=str(ended.get("status")),
                reason=str(ended.get("reason") or ""),
                device_type=None,
                start=job.start_time,
                end=at,
            )
            if isinstance(outcome, ImportFailed):
                message = f"import job {job.dock_status_id} FAILED: {outcome.message}"
                self.post(model, Event("Warning", outcome.reason, message))
                log.warning("import of %s/%s failed: %s", namespace, name, outcome)
            else:
                message = f"import job {job.dock_status_id}: {patch['job']['message']}"
                self.post(model, Event("Normal", "Imported", message))
            if SESSION_ID_RE.match(session_id):
                await self._files(self.store.remove, session_id)
            return

    def forget(self, namespace: str, name: str, session_id: str | None) -> None:
        """Delete what the store holds for a Model that is gone: its directory, staging leftovers, chunks."""
        self.store.delete_model(namespace, name)
        for stale in staging_dirs(self.store, namespace, name):
            shutil.rmtree(stale, ignore_errors=True)
        if session_id and SESSION_ID_RE.match(session_id):
            self.store.remove(session_id)

    async def deleted(self, namespace: str, name: str, labels: Mapping[str, str]) -> None:
        async with self.locks.hold(f"{namespace}/{name}/delete"):
            await self._files(self.forget, namespace, name, labels.get(import_status.IMPORT_SESSION_LABEL))

    # -- garbage: the files of Models deleted while no operator watched --

    def start_garbage_collection(self, interval: float, grace: float = 60.0) -> None:
        """Collect now (what Models deleted while no operator watched left behind goes when the operator
        starts), then every ``interval`` seconds."""
        if interval > 0:
            self._gc = asyncio.create_task(self._collect_forever(interval, grace))

    async def _collect_forever(self, interval: float, grace: float) -> None:
        first = True
        while True:
            if not first:
                await asyncio.sleep(interval)
            first = False
            try:
                listed = await self.kube.list_objects("models", None, labels=IMPORT_SESSION_LABEL)
                alive = {(m["metadata"]["namespace"], m["metadata"]["name"]) for m in listed}
                removed = await self._files(self.collect_garbage, alive, time.time() - grace)
                if removed:
                    log.info("removed the stored files of %d deleted Models: %s", len(removed), removed)
            except Exception:  # the next round tries again
                log.warning("model store garbage collection failed", exc_info=True)

    def collect_garbage(self, alive: set[tuple[str, str]], listed_at: float) -> list[str]:
        """Delete ``models/<ns>/<name>`` directories of Models not in ``alive`` (listed at ``listed_at``).

        A Model exists before its directory does (the import creates it), so a directory changed before
        the listing whose Model is not in it belongs to a deleted Model."""
        removed = []
        if isinstance(self.store, S3ModelStore):
            for namespace, name, changed in self.store.stored_models():
                if (namespace, name) not in alive and changed < listed_at:
                    self.store.delete_model(namespace, name)
                    removed.append(f"{namespace}/{name}")
            return removed
        for namespace_dir in _dirs(self.store.models):
            for model_dir in _dirs(namespace_dir):
                name = model_dir.name
                if name.startswith(".staging-"):
                    name = name.removeprefix(".staging-").rsplit("-", 1)[0].removesuffix("-old")
                if (namespace_dir.name, name) in alive:
                    continue
                try:
                    changed = model_dir.stat().st_ctime
                except FileNotFoundError:
                    continue
                if changed < listed_at:
                    shutil.rmtree(model_dir, ignore_errors=True)
                    removed.append(f"{namespace_dir.name}/{model_dir.name}")
        return removed

    async def close(self) -> None:
        gc = getattr(self, "_gc", None)
        if gc is not None:
            gc.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gc
        self.files.shutdown(wait=False, cancel_futures=True)


def _dirs(parent: Path) -> list[Path]:
    try:
        return [p for p in parent.iterdir() if p.is_dir() and not p.is_symlink()]
    except FileNotFoundError:
        return []
