"""The indexing job of a KnowledgeBase version (docs/knowledge-bases.md, "The job"): what the operator
runs as a Kubernetes Job (``python -m dockyard_core.knowledge.job``) or, on the local control plane, as
a host process with the same environment.

:func:`index_knowledge_base` is the work (pure of Kubernetes: the KnowledgeBase as a dict in, the
status fields out); :func:`main` reads the object from the API server, runs it and writes
``status``. One document at a time is read, parsed, chunked, embedded and put: memory stays flat
however many documents there are. A document that fails is listed in ``status.errors`` with the
reason; the others are indexed and searchable.

Environment: ``DOCKYARD_KB_NAMESPACE``, ``DOCKYARD_KB_NAME`` (the object), ``DOCKYARD_KNOWLEDGE_INDEX``
(the index, :func:`open_index`), ``DOCKYARD_KNOWLEDGE_FILES`` (the directory of the documents, the
model store's ``knowledge/files``; with an S3 model store, ``DOCKYARD_KB_MODEL_STORE_BACKEND=s3`` and
``DOCKYARD_KB_S3_*``, the model store's settings: the documents are read from the bucket),
``DOCKYARD_KB_EMBEDDING_URL`` and ``DOCKYARD_KB_EMBEDDING_MODEL`` (the
embedding ModelDeployment's endpoint, when the version has one), ``DOCKYARD_KB_REBUILD`` (``1``: a
new generation from scratch), ``DOCKYARD_KB_SPEC`` (what the run indexes, recorded in
``status.indexedSpec``), ``DOCKYARD_KB_JOB`` (the run's name).
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dockyard_core.conditions import transition
from dockyard_core.errors import DockyardError
from dockyard_core.knowledge.chunking import ChunkSettings, chunk_document
from dockyard_core.knowledge.embeddings import Embedder, OpenAIEmbedder
from dockyard_core.knowledge.files import DocumentFiles
from dockyard_core.knowledge.index import DocumentRecord, KnowledgeIndex
from dockyard_core.knowledge.parsing import DocumentError, parse_document

log = logging.getLogger("dockyard.knowledge.job")

MAX_REASON = 1000


def open_index(url: str) -> KnowledgeIndex:
    """The index a URL names: ``sqlite:///<path>`` (the embedded default) or ``postgresql://...``."""
    if url.startswith("sqlite:///"):
        from dockyard_core.knowledge.sqlite import SqliteIndex

        return SqliteIndex(url.removeprefix("sqlite://"))
    if url.startswith(("postgresql://", "postgresql+asyncpg://", "postgres://")):
        from dockyard_core.knowledge.postgres import PostgresIndex

        return PostgresIndex(url)
    raise ValueError(f"DOCKYARD_KNOWLEDGE_INDEX must be sqlite:///<path> or postgresql://..., not {url!r}")


def document_path(files: Path, namespace: str, file_id: str) -> Path:
    """Where an imported document's bytes are: ``<files>/<namespace>/<fileId>``."""
    return files / namespace / file_id


def run_document_files(env: Mapping[str, str]) -> DocumentFiles:
    """The documents a run reads: the bucket of an S3 model store (``DOCKYARD_KB_MODEL_STORE_BACKEND=s3`` and
    ``DOCKYARD_KB_S3_*``, the model store's settings with this prefix) or ``DOCKYARD_KNOWLEDGE_FILES``."""
    if env.get("DOCKYARD_KB_MODEL_STORE_BACKEND") == "s3":
        from pydantic_settings import SettingsConfigDict

        from dockyard_core.storesettings import ModelStoreSettings

        class RunStore(ModelStoreSettings):
            model_config = SettingsConfigDict(env_prefix="DOCKYARD_KB_")

        return RunStore().document_files()
    return DocumentFiles(Path(env["DOCKYARD_KNOWLEDGE_FILES"]))


def kb_key(namespace: str, name: str) -> str:
    """A KnowledgeBase object's key in the index."""
    return f"{namespace}/{name}"


def indexed_spec(kb: Mapping[str, Any], started_for: str) -> str:
    """What a run indexed, for ``status.indexedSpec``: the generation of the object the run read, with the reindex
    request it was started for (``started_for``: the operator's ``<generation>/<request>``). The spec may have
    moved on between the operator starting the run and the run reading the object (a second document attached
    meanwhile): the run indexed the newer spec, so recording the older generation would start a second run for
    what is indexed already."""
    if not started_for:
        return ""
    request = started_for.split("/", 1)[1] if "/" in started_for else ""
    return f"{(kb.get('metadata') or {}).get('generation', 0)}/{request}"[:64]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


async def index_knowledge_base(
    kb: Mapping[str, Any],
    index: KnowledgeIndex,
    read_file: Callable[[str], bytes],
    embedder: Embedder | None,
    *,
    rebuild: bool = False,
) -> dict[str, Any]:
    """Bring the index of ``kb`` (a KnowledgeBase as the API server has it) up to its ``spec.documents``
    and answer the status fields (camelCase). ``read_file(fileId)``: a document's bytes."""
    meta, spec = kb["metadata"], kb.get("spec") or {}
    key = kb_key(meta["namespace"], meta["name"])
    model = embedder.model if embedder is not None else ""
    settings = ChunkSettings.from_spec(spec.get("chunking"))
    active = await index.active_generation(key)
    fresh = rebuild or active is None or active.embedding_model != model
    if fresh:
        dimensions = len((await embedder.embed(["dimensions"]))[0]) if embedder is not None else None
        target = await index.new_generation(key, embedding_model=model, dimensions=dimensions)
    else:
        assert active is not None
        target = active
    wanted = {str(d["name"]): d for d in spec.get("documents") or []}
    have = {} if fresh else {d.document_id: d for d in await index.documents(key, target.id)}
    for name in sorted(set(have) - set(wanted)):
        await index.delete_document(key, target.id, name)
    errors: list[dict[str, str]] = []
    indexed_ids = {str(d.get("name")): str(d.get("fileId")) for d in (kb.get("status") or {}).get("indexed") or []}
    for name, doc in wanted.items():
        file_id = str(doc.get("fileId") or "")
        if name in have and indexed_ids.get(name) == file_id:
            continue  # indexed already, same file
        try:
            data = await asyncio.to_thread(read_file, file_id)
            parsed = await asyncio.to_thread(
                parse_document, data, filename=name, media_type=str(doc.get("mediaType") or ""), name=name
            )
            chunks = chunk_document(name, parsed, settings)
            vectors = await embedder.embed([c.text for c in chunks]) if embedder is not None and chunks else None
            record = DocumentRecord(name, parsed.title or name, name, parsed.media_type, len(data))
            await index.put_document(key, target.id, record, chunks, vectors if chunks else None)
        except FileNotFoundError:
            errors.append({"document": name, "reason": f"the file {file_id} is not in the store (import it again)"})
            await index.delete_document(key, target.id, name)
        except DocumentError as exc:
            errors.append({"document": name, "reason": exc.reason[:MAX_REASON]})
            await index.delete_document(key, target.id, name)
        except DockyardError as exc:  # embedding failures and the like: this document only
            errors.append({"document": name, "reason": str(exc)[:MAX_REASON]})
            await index.delete_document(key, target.id, name)
    if fresh:
        await index.activate(key, target.id)
        for old in await index.generations(key):
            if old.state != "active" and old.id < (active.id if active is not None else target.id):
                await index.drop_generation(key, old.id)
    stats = await index.stats(key)
    records = await index.documents(key)
    failed = f"; {len(errors)} could not be indexed (status.errors)" if errors else ""
    ready = transition(
        (kb.get("status") or {}).get("conditions"),
        "Ready",
        True,
        "Indexed",
        f"generation {target.id}: {stats.documents} document(s), {stats.chunks} chunks{failed}",
        datetime.now(UTC),
        meta.get("generation"),
    )
    idle = transition(
        (kb.get("status") or {}).get("conditions"), "Indexing", False, "RunDone", "the last run is done",
        datetime.now(UTC), meta.get("generation"),
    )  # fmt: skip
    return {
        "conditions": [ready, idle],
        "phase": "Ready",
        "activeGeneration": target.id,
        "buildingGeneration": None,
        "documents": stats.documents,
        "chunks": stats.chunks,
        "bytes": stats.bytes,
        "lastIndexed": _now(),
        "indexed": [
            {"name": r.document_id, "fileId": str(wanted[r.document_id].get("fileId")), "chunks": r.chunks}
            for r in records
            if r.document_id in wanted
        ],
        "errors": errors,
        "errorCount": len(errors),
        "message": "",
    }


async def _run_from_environment() -> int:
    from dockyard_core import kubepaths
    from dockyard_core.kubeclient import AsyncKube

    env = os.environ
    namespace, name = env["DOCKYARD_KB_NAMESPACE"], env["DOCKYARD_KB_NAME"]
    files = run_document_files(env)
    kube = AsyncKube(timeout=30.0)
    path = kubepaths.path("knowledgebases", namespace, name)
    index = open_index(env["DOCKYARD_KNOWLEDGE_INDEX"])
    embedder = (
        OpenAIEmbedder(env["DOCKYARD_KB_EMBEDDING_URL"], env.get("DOCKYARD_KB_EMBEDDING_MODEL", "embedding"))
        if env.get("DOCKYARD_KB_EMBEDDING_URL")
        else None
    )
    run = {"job": env.get("DOCKYARD_KB_JOB", ""), "indexedSpec": env.get("DOCKYARD_KB_SPEC", "")}
    kb: dict[str, Any] = {}
    try:
        kb = await kube.request("GET", path)
        await index.start()
        status = await index_knowledge_base(
            kb,
            index,
            lambda file_id: files.read(namespace, file_id),
            embedder,
            rebuild=env.get("DOCKYARD_KB_REBUILD") == "1",
        )
        run["indexedSpec"] = indexed_spec(kb, run["indexedSpec"])
        code = 0
    except Exception as exc:  # the run failed as a whole: say why in the status
        log.exception("indexing %s/%s failed", namespace, name)
        message = f"{type(exc).__name__}: {exc}"[:2000]
        previous = (kb.get("status") or {}).get("conditions")
        down = transition(previous, "Ready", False, "IndexingFailed", message, datetime.now(UTC))
        done = transition(previous, "Indexing", False, "RunFailed", message, datetime.now(UTC))
        status = {"phase": "Failed", "buildingGeneration": None, "message": message, "conditions": [down, done]}
        code = 1
    finally:
        await index.close()
        if isinstance(embedder, OpenAIEmbedder):
            await embedder.aclose()
    try:
        await kube.request(
            "PATCH",
            kubepaths.path("knowledgebases", namespace, name, "status"),
            json={"status": {**status, **run}},
            content_type="application/merge-patch+json",
        )
    finally:
        await kube.aclose()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"indexed {namespace}/{name}: {status.get('phase')} {status.get('documents', 0)} documents, "
          f"{status.get('chunks', 0)} chunks, {status.get('errorCount', 0)} errors; peak RSS {peak:.1f} MiB",
          flush=True)  # fmt: skip
    return code


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    sys.exit(asyncio.run(_run_from_environment()))


if __name__ == "__main__":
    main()
