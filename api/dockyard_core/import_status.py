"""The status of an imported Model at each step of its import, as merge patches of ``.status``.

Shared by the facade (start, complete, expiry, abort) and the operator (the import job's outcome), so
that both write the same phase, conditions and job record. Pure functions: no FastAPI, no kopf.

Steps (phase, conditions):

- started: ``Importing``; Progressing=True ``AwaitingUpload``; importSession set.
- completed (job created): ``Importing``; Progressing=True ``Importing``; job IN_PROGRESS.
- imported: ``ReadyToDeploy``; Ready=True ``Imported``; storage set; job SUCCESS; importSession removed.
- failed: ``Failed``; Failed=True with the reason (e.g. ChecksumMismatch, UnsafeArchive); job FAILED.
- expired / aborted before completion: ``Failed``; Failed=True ``ImportExpired`` / ``ImportAborted``;
  no job (none was ever returned to the caller).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dockyard_core.clock import kube_time as _time
from dockyard_core.conditions import transition, true_reason
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import FAILED, PROGRESSING, READY, DockJob, ModelStorage

IMPORT_SESSION_LABEL = f"{GROUP}/import-session"
"""Label on an uploaded Model: the sessionId that imports it (the facade finds a session's Model with it
after the session's files are gone)."""
IMPORT_ENVIRONMENT_ANNOTATION = f"{GROUP}/import-environment"
"""Annotation on an uploaded Model: the environment whose API key started the import."""
UPLOAD_SHA256_ANNOTATION = f"{GROUP}/upload-sha256"
"""Annotation on an uploaded Model: the file's SHA-256 sent with the completion call (when the start call
sent none); the import job verifies it like ``spec.source.upload.sha256``."""

AWAITING_UPLOAD = "AwaitingUpload"
IMPORTING = "Importing"
IMPORTED = "Imported"
IMPORT_EXPIRED = "ImportExpired"
IMPORT_ABORTED = "ImportAborted"


def conditions(
    previous: Sequence[Mapping[str, Any]] | None,
    states: Mapping[str, tuple[bool, str, str]],
    at: datetime,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """Ready, Progressing and Failed as ``states`` says ({type: (true?, reason, message)}); a condition
    whose status did not change keeps its lastTransitionTime."""
    out = []
    for kind in (READY, PROGRESSING, FAILED):
        true, reason, message = states.get(kind, (False, "Importing" if kind == READY else "NotFailed", ""))
        out.append(transition(previous, kind, true, reason, message, at, generation))
    return out


def _dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def started(session_id: str, expiration: datetime, at: datetime) -> dict[str, Any]:
    return {
        "phase": "Importing",
        "importSession": {"sessionId": session_id, "expirationDate": _time(expiration)},
        "conditions": conditions(
            None,
            {
                READY: (False, AWAITING_UPLOAD, "the model file is being uploaded"),
                PROGRESSING: (True, AWAITING_UPLOAD, f"waiting for the chunks of import session {session_id}"),
            },
            at,
        ),
    }


def new_job(dock_status_id: str, at: datetime) -> DockJob:
    return DockJob(
        dock_status_id=dock_status_id,
        job_type="MODELS",
        action="EXPORT",
        status="IN_PROGRESS",
        reason=IMPORTING,
        message="all chunks received; assembling, verifying and storing the model",
        start_time=at,
    )


def completed(job: DockJob, previous: Sequence[Mapping[str, Any]] | None, at: datetime) -> dict[str, Any]:
    return {
        "phase": "Importing",
        "job": _dump(job),
        "conditions": conditions(
            previous,
            {
                READY: (False, IMPORTING, "the model is being imported"),
                PROGRESSING: (True, IMPORTING, job.message),
            },
            at,
        ),
    }


def imported(
    job: DockJob,
    storage: ModelStorage,
    previous: Sequence[Mapping[str, Any]] | None,
    at: datetime,
    *,
    adapter_base: str | None = None,
) -> dict[str, Any]:
    """``adapter_base``: an adapter's base_model_name_or_path (status.adapter)."""
    message = f"{storage.size_bytes} bytes verified and stored at {storage.path}"
    if adapter_base:
        message += f"; adapter_config.json names base model {adapter_base!r}"
    done = job.model_copy(update={"status": "SUCCESS", "reason": IMPORTED, "message": message, "completion_time": at})
    return {
        "phase": "ReadyToDeploy",
        "job": _dump(done),
        "storage": _dump(storage),
        "adapter": {"baseModelNameOrPath": adapter_base} if adapter_base else None,
        "importSession": None,
        "conditions": conditions(
            previous,
            {READY: (True, IMPORTED, message), PROGRESSING: (False, IMPORTED, "the import is done")},
            at,
        ),
    }


def failed(
    job: DockJob | None, reason: str, message: str, previous: Sequence[Mapping[str, Any]] | None, at: datetime
) -> dict[str, Any]:
    patch: dict[str, Any] = {
        "phase": "Failed",
        "importSession": None,
        "conditions": conditions(
            previous,
            {
                READY: (False, reason, message),
                PROGRESSING: (False, reason, "the import stopped"),
                FAILED: (True, reason, message),
            },
            at,
        ),
    }
    if job is not None:
        done = job.model_copy(update={"status": "FAILED", "reason": reason, "message": message, "completion_time": at})
        patch["job"] = _dump(done)
    return patch


def failed_reason(status: Mapping[str, Any]) -> str | None:
    """The reason of the Failed=True condition, if any."""
    return true_reason(status.get("conditions"), FAILED)
