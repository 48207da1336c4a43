"""Documents through the public chunked import (docs/knowledge-bases.md, "Documents: import"): a session whose
``fileContext`` is ``document`` (or SPEC's ``dataset``) is a knowledge-base document, not a model.

It uses the same session directory of the model store (chunks, resume, abort, expiry) but no Model: the
completion assembles the chunks (on S3, staged from the bucket into the local spool first) into the
document ``<namespace>/<fileId>`` of :mod:`dockyard_core.knowledge.files` (``knowledge/files/`` of the
model store's directory or bucket), parses the file at once (in a thread) and answers the job record,
SUCCESS or FAILED with the reason (a document that cannot be read is never attached; the knowledge
base's index stays as it is). The file is attached to a knowledge base version by
``POST /api/public/knowledge-bases/{name}/{version}/documents``. The session's metadata stays,
completed, until it expires, so a second completion answers the same record.
"""

from __future__ import annotations

import hashlib
import shutil
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from dockyard_api.public.imports.models import ChecksumConflict, model_id_for
from dockyard_api.public.imports.sessions import files
from dockyard_api.public.schemas import JobRecord, SessionStarted
from dockyard_core import clock
from dockyard_core.clock import iso
from dockyard_core.knowledge.files import DocumentFiles
from dockyard_core.knowledge.parsing import DocumentError, parse_document
from dockyard_core.modelstore import ModelStore, SessionMeta
from dockyard_core.s3store import S3ModelStore
from dockyard_core.storeerrors import SessionGone
from dockyard_core.upload import DOCUMENT_CONTEXTS, Upload


def is_document(upload: Upload) -> bool:
    return upload.file_context.strip().lower() in DOCUMENT_CONTEXTS


def read_record(files: DocumentFiles, namespace: str, file_id: str) -> dict[str, Any] | None:
    """The import record of a document file, None when there is none."""
    return files.read_record(namespace, file_id)


def _answer(record: dict[str, Any]) -> JobRecord:
    answer = JobRecord.model_construct(
        dock_status_id=record["dockStatusId"],
        dock_status_id_sample_spelling=record["dockStatusId"],
        model_id=record["fileId"],
        job_type="MODELS",
        action="EXPORT",
        status=record["status"],
    )
    if record["status"] == "FAILED":
        answer = answer.model_copy(update={"reason": "InvalidDocument", "message": record["reason"]})
    return answer


class DocumentImports:
    """The document part of the import service."""

    def __init__(self, store: ModelStore, files: DocumentFiles, session_lifetime_seconds: float) -> None:
        self.store = store
        self.files = files
        self.lifetime = session_lifetime_seconds

    async def start(self, namespace: str, environment: str, upload: Upload) -> SessionStarted:
        await files(self.store.ensure)
        at = clock.now()
        expires = at + timedelta(seconds=self.lifetime)
        meta = SessionMeta(
            session_id=uuid.uuid4().hex,
            namespace=namespace,
            environment=environment,
            model_id=model_id_for(upload.file_name),
            upload=upload,
            created_at=at,
            expires_at=expires,
        )
        await files(self.store.create, meta)
        return SessionStarted(session_id=meta.session_id, model_id=meta.model_id, expiration_date=iso(expires))

    async def complete(self, meta: SessionMeta, sha256: str | None) -> JobRecord:
        """Assemble, check and parse the document (once); its record."""
        if meta.dock_status_id:
            found = await files(read_record, self.files, meta.namespace, meta.model_id)
            if found is None:  # completed, and its document deleted since: nothing to answer again
                raise SessionGone(
                    f"the document of import session {meta.session_id} is gone",
                    {"sessionId": meta.session_id, "fileId": meta.model_id},
                    code="session_lost",
                )
            return _answer(found)
        record = await files(self._assemble, meta, sha256)
        await files(self.store.mark_completed, meta, record["dockStatusId"])
        if isinstance(self.store, S3ModelStore):
            await files(self.store.drop_chunks, meta.session_id)
        else:
            await files(shutil.rmtree, self.store.chunks_dir(meta.session_id), True)
        return _answer(record)

    def _assemble(self, meta: SessionMeta, sha256: str | None) -> dict[str, Any]:
        """The file work of a completion (in a thread): the chunks in order into the document's file (from
        the bucket through a local staging copy on S3), its SHA-256 checked, parsed; the record written last."""
        source = self.store
        if isinstance(self.store, S3ModelStore):
            source = ModelStore(self.files.root.parent / "staging")
            self.store.stage_session(meta.session_id, source)
        try:
            partial = self.files.spool(meta.namespace) / f"{meta.model_id}.part"
            digest = hashlib.sha256()
            with partial.open("wb") as out:
                for number in range(meta.upload.total_chunks):
                    with source.chunk_path(meta.session_id, number).open("rb") as chunk:
                        while block := chunk.read(1 << 20):
                            digest.update(block)
                            out.write(block)
        finally:
            if source is not self.store:
                shutil.rmtree(source.session_dir(meta.session_id), ignore_errors=True)
        expected = sha256 or meta.upload.sha256
        if expected and digest.hexdigest() != expected:
            partial.unlink()
            raise ChecksumConflict(
                f"the file's SHA-256 is {digest.hexdigest()}, not {expected}: upload it again",
                {"sha256": expected, "received": digest.hexdigest()},
            )
        return keep_document(
            self.files, meta.namespace, meta.model_id, meta.upload.file_name, partial, digest.hexdigest()
        )


def keep_document(
    files: DocumentFiles, namespace: str, file_id: str, file_name: str, partial: Path, sha256: str
) -> dict[str, Any]:
    """Parse the assembled file ``partial``: kept as the document ``file_id`` when it reads, deleted with the
    reason when not; the import record written last (file work: run it in a thread)."""
    record: dict[str, Any] = {
        "dockStatusId": str(uuid.uuid4()),
        "fileId": file_id,
        "fileName": file_name,
        "size": partial.stat().st_size,
        "sha256": sha256,
        "completedAt": iso(clock.now()),
    }
    try:
        parsed = parse_document(partial.read_bytes(), filename=file_name, name=file_name)
    except DocumentError as exc:
        partial.unlink()
        record.update(status="FAILED", reason=exc.reason)
        files.keep(namespace, file_id, None, record)
    else:
        record.update(status="SUCCESS", mediaType=parsed.media_type, title=parsed.title, reason="")
        files.keep(namespace, file_id, partial, record)
    return record


def store_document(files: DocumentFiles, namespace: str, file_name: str, data: bytes) -> dict[str, Any]:
    """A document received whole (the console's upload): the same checks and record as a completed import."""
    file_id = model_id_for(file_name)
    partial = files.spool(namespace) / f"{file_id}.part"
    partial.write_bytes(data)
    return keep_document(files, namespace, file_id, file_name, partial, hashlib.sha256(data).hexdigest())
