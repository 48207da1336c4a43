"""The Models of chunked imports (docs/public-api.md, 'Chunked model import', 'How it is stored'): read and
written through core's typed repository (:class:`dockyard_core.repository.Repository`), which maps the
API server's refusals to domain errors once (an unavailable API server is a 503 with Retry-After, a
changed object a :class:`ConflictError`, a missing one a :class:`NotFoundError`).

An uploaded Model carries its session (the ``dockyard.dev/import-session`` label), the environment that
started it (an annotation) and, once completed, its import job (``status.job``, action EXPORT).
"""

from __future__ import annotations

import logging
import re
import secrets
from typing import Any

from dockyard_core import import_status
from dockyard_core.errors import DockyardError
from dockyard_core.import_status import IMPORT_ENVIRONMENT_ANNOTATION, IMPORT_SESSION_LABEL
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.repository import Repository
from dockyard_core.resources.v1alpha1 import DockJob, Model

log = logging.getLogger("dockyard.imports")


class ChecksumConflict(DockyardError):
    status_code = 409
    code = "checksum_conflict"


def model_id_for(file_name: str) -> str:
    """A new modelId: a DNS-1123 label made of the file's name and 8 random hex digits,
    e.g. ``llama-3-8b-lora-3f9a1c2e``."""
    stem = file_name.lower()
    for ext in (".tar.gz", ".tgz", ".tar", ".zip", ".safetensors", ".gguf", ".bin", ".pth", ".pt"):
        stem = stem.removesuffix(ext)
    slug = re.sub(r"[^a-z0-9]+", "-", stem).strip("-")[:40].strip("-")
    return f"{slug or 'model'}-{secrets.token_hex(4)}"


# --- what an uploaded Model says ------------------------------------------------------------------------


def import_job(model: Model) -> DockJob | None:
    """The import job its completion started (status.job with action EXPORT), None before."""
    job = model.status.job
    return job if job is not None and job.action == "EXPORT" else None


def session_of(model: Model) -> str | None:
    """The import session that fills the Model (its label)."""
    return (model.metadata.labels or {}).get(IMPORT_SESSION_LABEL)


def environment_of(model: Model) -> str | None:
    """The environment whose API key started the import (its annotation)."""
    return (model.metadata.annotations or {}).get(IMPORT_ENVIRONMENT_ANNOTATION)


def conditions(model: Model) -> list[dict[str, Any]]:
    """The Model's conditions in their wire form (what :mod:`dockyard_core.import_status` builds on)."""
    return [c.model_dump(by_alias=True, exclude_none=True) for c in model.status.conditions]


def failed_reason(model: Model) -> str | None:
    """The reason of the Model's Failed=True condition, if any."""
    return import_status.failed_reason({"conditions": conditions(model)})


def expected_sha256(model: Model) -> str | None:
    """The file's SHA-256 the import already has: the start call's, or the one an earlier completion sent."""
    upload = model.spec.source.upload
    found = (upload.sha256 if upload else None) or (model.metadata.annotations or {}).get(
        import_status.UPLOAD_SHA256_ANNOTATION
    )
    return found or None


def check_checksum(model: Model, at_start: str | None, sent: str | None) -> None:
    """409 when the completion's SHA-256 contradicts the one the import already has."""
    expected = at_start or expected_sha256(model)
    if sent and expected and sent != expected:
        raise ChecksumConflict(
            f"the SHA-256 sent with the completion ({sent}) is not the one this import already has ({expected})",
            {"sha256": sent, "expected": expected},
        )


# --- reads and writes -----------------------------------------------------------------------------------


class ImportModels:
    """The few Model calls of the import, through the typed repository."""

    def __init__(self, kube: AsyncKube) -> None:
        self.repo = Repository(kube, Model)

    async def create(self, model: Model) -> Model:
        """Create the Model; :class:`ConflictError` when its name is taken."""
        return await self.repo.create(model)

    async def discard(self, namespace: str, name: str) -> None:
        """Delete it, best effort (used to undo a half-done start)."""
        try:
            await self.repo.delete(namespace, name, missing_ok=True)
        except Exception:  # the start fails anyway; the sweeper and kubectl remain
            log.warning("could not delete Model %s/%s after a failed start", namespace, name, exc_info=True)

    async def find(self, namespace: str, name: str) -> Model | None:
        return await self.repo.find(namespace, name)

    async def by_session(self, namespace: str, session_id: str) -> Model | None:
        """The Model that import session ``session_id`` fills, in ``namespace``."""
        found = await self.repo.select(namespace, labels={IMPORT_SESSION_LABEL: session_id})
        return found[0] if found else None

    async def importing(self) -> list[Model]:
        """Every uploaded Model (all namespaces)."""
        return await self.repo.select(None, labels=IMPORT_SESSION_LABEL)

    async def patch_status(self, model: Model, status: dict[str, Any], *, guarded: bool = True) -> Model:
        """Merge-patch the status; ``guarded``: only if the Model is still at the version read (else
        :class:`ConflictError`)."""
        meta = model.metadata
        version = meta.resource_version if guarded else None
        return await self.repo.merge_status(meta.namespace or "", meta.name or "", status, resource_version=version)

    async def annotate(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        await self.repo.merge(namespace, name, {"metadata": {"annotations": annotations}})

    async def label(self, namespace: str, name: str, labels: dict[str, str]) -> None:
        await self.repo.merge(namespace, name, {"metadata": {"labels": labels}})
