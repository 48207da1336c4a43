"""Knowledge bases' logic over the Kubernetes API (docs/knowledge-bases.md): create a version, attach a
document the chunked import received (only one that parsed: a failed import is refused with its reason),
delete a document, ask for a re-index. The KnowledgeBase's ``spec.documents`` is the truth; the
operator's indexing run makes the index follow it."""

from __future__ import annotations

import uuid
from typing import Any

import anyio

from dockyard_api.public.imports.documents import read_record
from dockyard_core import clock
from dockyard_core.clock import iso
from dockyard_core.errors import ConflictError, InvalidError, NotFoundError
from dockyard_core.knowledge.files import DocumentFiles
from dockyard_core.kubeclient import AsyncKube, User
from dockyard_core.repository import Objects
from dockyard_core.resources.v1alpha1 import KB_REINDEX_ANNOTATION, KnowledgeBase

ATTEMPTS = 5


def _wanted(kb: dict[str, Any]) -> str:
    """What the index must reflect: ``<metadata.generation>/<reindex request>`` (a run records it in
    ``status.indexedSpec`` when done)."""
    meta = kb["metadata"]
    return f"{meta.get('generation', 0)}/{(meta.get('annotations') or {}).get(KB_REINDEX_ANNOTATION, '')}"[:64]


def summary(kb: dict[str, Any]) -> dict[str, Any]:
    """A KnowledgeBase as the API answers it: name, version, settings, documents and the index's state."""
    spec, status = kb.get("spec") or {}, kb.get("status") or {}
    indexed = {d.get("name"): d for d in status.get("indexed") or []}
    errors = {e.get("document"): e.get("reason") for e in status.get("errors") or []}
    documents = []
    for doc in spec.get("documents") or []:
        entry = indexed.get(doc["name"])
        state = (
            "failed" if doc["name"] in errors
            else "indexed" if entry is not None and entry.get("fileId") == doc.get("fileId")
            else "pending"
        )  # fmt: skip
        documents.append({**doc, "state": state, "chunks": (entry or {}).get("chunks", 0),
                          "error": errors.get(doc["name"], "")})  # fmt: skip
    return {
        "name": spec.get("name"),
        "version": spec.get("version"),
        "knowledgeBaseId": kb["metadata"]["name"],
        "description": spec.get("description", ""),
        "embedding": spec.get("embedding"),
        "chunking": spec.get("chunking"),
        "retrieval": spec.get("retrieval"),
        "documents": documents,
        "status": {
            "phase": status.get("phase", "Pending"),
            "documents": status.get("documents", 0),
            "chunks": status.get("chunks", 0),
            "bytes": status.get("bytes", 0),
            "lastIndexed": status.get("lastIndexed"),
            "activeGeneration": status.get("activeGeneration"),
            "errors": status.get("errors") or [],
            "message": status.get("message", ""),
            "job": status.get("job", ""),
            "upToDate": status.get("indexedSpec") == _wanted(kb),
        },
    }


class KnowledgeService:
    def __init__(self, kube: AsyncKube, files: DocumentFiles, user: User | None = None) -> None:
        self.objects = Objects(kube, "knowledgebases", "KnowledgeBase", user=user)
        self.files = files

    async def list(self, namespace: str) -> list[dict[str, Any]]:
        items = await self.objects.select(namespace)
        return [summary(kb) for kb in sorted(items, key=lambda k: k["metadata"]["name"])]

    async def _get(self, namespace: str, name: str, version: str) -> dict[str, Any]:
        object_name = KnowledgeBase.object_name(name, version)
        return await self.objects.get(
            namespace, object_name, missing=f"knowledge base {name!r} has no version {version} (no KnowledgeBase "
            f"{object_name} in namespace {namespace!r})",
        )  # fmt: skip

    async def get(self, namespace: str, name: str, version: str) -> dict[str, Any]:
        return summary(await self._get(namespace, name, version))

    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """A new version from the body's name, version, description, embedding, chunking and retrieval
        (the API server's schema checks them and names the field)."""
        spec = {k: body[k] for k in ("name", "version", "description", "embedding", "chunking", "retrieval")
                if body.get(k) is not None}  # fmt: skip
        for field in ("name", "version"):
            if not isinstance(spec.get(field), str) or not spec[field]:
                raise InvalidError(f"{field} is required", {"field": field})
        obj = {
            "apiVersion": "dockyard.dev/v1alpha1",
            "kind": "KnowledgeBase",
            "metadata": {"name": KnowledgeBase.object_name(spec["name"], spec["version"]), "namespace": namespace},
            "spec": spec,
        }
        return summary(await self.objects.create(namespace, obj))

    async def attach(
        self, namespace: str, name: str, version: str, file_id: str, document: str | None
    ) -> dict[str, Any]:
        """Attach an imported document (``fileId``: the completion's modelId); ``document``: its name in the
        knowledge base (default: the imported file's name). A document of that name is replaced."""
        record = await anyio.to_thread.run_sync(read_record, self.files, namespace, file_id)
        if record is None:
            raise NotFoundError(
                f"no imported document {file_id!r}: import it with fileContext document and complete the import",
                {"fileId": file_id},
            )
        if record.get("status") != "SUCCESS":
            raise InvalidError(
                f"document {record.get('fileName')!r} failed its import: {record.get('reason')}",
                {"fileId": file_id, "document": record.get("fileName"), "reason": record.get("reason")},
            )
        entry = {
            "name": document or record["fileName"],
            "fileId": file_id,
            "mediaType": record.get("mediaType", ""),
            "size": int(record.get("size", 0)),
        }
        for _ in range(ATTEMPTS):
            kb = await self._get(namespace, name, version)
            docs = [d for d in (kb.get("spec") or {}).get("documents") or [] if d.get("name") != entry["name"]]
            try:
                updated = await self.objects.merge(
                    namespace, kb["metadata"]["name"], {"spec": {"documents": [*docs, entry]}},
                    resource_version=kb["metadata"]["resourceVersion"],
                )  # fmt: skip
            except ConflictError:
                continue
            return {"document": entry, "knowledgeBase": summary(updated)}
        raise ConflictError("the knowledge base kept changing; try again")

    async def detach(self, namespace: str, name: str, version: str, document: str) -> dict[str, Any]:
        """Delete a document: out of spec.documents; the next indexing run removes its chunks."""
        for _ in range(ATTEMPTS):
            kb = await self._get(namespace, name, version)
            docs = (kb.get("spec") or {}).get("documents") or []
            kept = [d for d in docs if d.get("name") != document]
            if len(kept) == len(docs):
                raise NotFoundError(
                    f"knowledge base {name} {version} has no document {document!r}", {"document": document}
                )
            try:
                updated = await self.objects.merge(
                    namespace, kb["metadata"]["name"], {"spec": {"documents": kept}},
                    resource_version=kb["metadata"]["resourceVersion"],
                )  # fmt: skip
            except ConflictError:
                continue
            return summary(updated)
        raise ConflictError("the knowledge base kept changing; try again")

    async def reindex(self, namespace: str, name: str, version: str) -> dict[str, Any]:
        """Ask for a new generation built from scratch (switched to when it is ready)."""
        kb = await self._get(namespace, name, version)
        request = f"{iso(clock.now())}-{uuid.uuid4().hex[:6]}"
        updated = await self.objects.merge(
            namespace, kb["metadata"]["name"], {"metadata": {"annotations": {KB_REINDEX_ANNOTATION: request}}}
        )
        return summary(updated)
