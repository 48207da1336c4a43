"""The model store on S3-compatible object storage (AWS S3, MinIO, Ceph RGW), through the MinIO Python SDK.

Same interface and same answers as the file-system :class:`~dockyard_core.modelstore.ModelStore`, which it
extends; the objects are laid out like the directories (``<prefix>`` is optional)::

    <prefix>sessions/<sessionId>/session.json
    <prefix>sessions/<sessionId>/chunks/<n>              one object per chunk ("staged parts")
    <prefix>models/<namespace>/<modelId>/<path>          the files of an imported model
    <prefix>models/<namespace>/<modelId>/.dockyard-import.json   its manifest, written last

A chunk is streamed to a temporary file of the local spool directory (``root``; never held in memory),
then uploaded as its object (the SDK uses a multipart upload for large chunks). A re-sent chunk is
compared with the stored object: same bytes are accepted (idempotent), different bytes refused (409).
The existence check and the upload are two requests, so two DIFFERENT copies of one chunk sent at the
same instant may both be accepted (the last wins); the import job's size and SHA-256 checks still catch
a file that differs from what the start call declared.

The import job (operator) stages a session's chunks in its local work directory, runs the same
extraction and checks as on a file system, and uploads the model's files with the manifest last
(:meth:`S3ModelStore.stage_session`, :meth:`S3ModelStore.upload_model`). Pods download through the facade
(``routers/downloads.py``), which reads the objects with ranged GETs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from minio import Minio
from minio.error import S3Error

from dockyard_core.errors import DockyardError
from dockyard_core.modelmanifest import MANIFEST, ModelManifest
from dockyard_core.modelstore import CHUNK_NAME_RE, SESSION_ID_RE, ModelStore, SessionMeta, check_session_id
from dockyard_core.storeerrors import ChunkConflict, EmptyChunk, ModelFileNotFound, SessionGone, SizeExceeded
from dockyard_core.storefiles import COPY_BUFFER, ChunkInfo, ChunkWriter, ReceivedChunk, same_bytes

PART_SIZE = 16 * 1024 * 1024
"""Multipart upload part size of the SDK for chunks and model files larger than this."""
MISSING = ("NoSuchKey", "NoSuchObject", "NoSuchBucket", "ResourceNotFound")


class StorageUnavailable(DockyardError):
    """The object store refused or could not be reached: the facade answers 502."""

    status_code = 502
    code = "storage_unavailable"


@dataclass(frozen=True)
class S3Config:
    """Where the objects live; credentials come from the settings (a Secret in the chart)."""

    endpoint: str
    """``https://s3.eu-west-1.amazonaws.com``, ``http://minio.storage:9000`` (scheme decides TLS)."""
    bucket: str
    access_key: str | None = None
    secret_key: str | None = None
    region: str | None = None
    prefix: str = ""
    create_bucket: bool = False
    """Create the bucket when it is missing (local runs and tests; clusters provision it)."""
    ca_bundle: str | None = None
    """PEM file of the CA that signed the endpoint's certificate (private CAs)."""


class S3ModelStore(ModelStore):
    """The model store on a bucket; ``root`` is a local spool/work directory (chunks being received,
    the import job's staging)."""

    def __init__(self, root: Path | str, config: S3Config, client: Minio | None = None) -> None:
        super().__init__(root)
        self.config = config
        self.bucket = config.bucket
        self.prefix = config.prefix.strip("/") + "/" if config.prefix.strip("/") else ""
        self.spool = self.root / "spool"
        self.client = client or _client(config)

    # -- plumbing --

    def key(self, *parts: str) -> str:
        return self.prefix + "/".join(parts)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except S3Error:
            raise
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise StorageUnavailable(f"the object store is not reachable ({what})", str(exc)) from exc

    def _get(self, key: str) -> bytes | None:
        try:
            response = self._call("read", self.client.get_object, self.bucket, key)
        except S3Error as exc:
            if exc.code in MISSING:
                return None
            raise StorageUnavailable(f"the object store refused to read {key}: {exc.code}") from exc
        try:
            data: bytes = response.read()
            return data
        finally:
            response.close()
            response.release_conn()

    def _put_bytes(self, key: str, data: bytes, content_type: str = "application/json") -> None:
        try:
            self._call("write", self.client.put_object, self.bucket, key, io.BytesIO(data), len(data),
                       content_type=content_type)  # fmt: skip
        except S3Error as exc:
            raise StorageUnavailable(f"the object store refused to write {key}: {exc.code}") from exc

    def _put_file(self, key: str, path: Path) -> None:
        size = path.stat().st_size
        with path.open("rb") as f:
            try:
                self._call("write", self.client.put_object, self.bucket, key, f, size, part_size=PART_SIZE)
            except S3Error as exc:
                raise StorageUnavailable(f"the object store refused to write {key}: {exc.code}") from exc

    def _list(self, prefix: str, recursive: bool = True) -> list[Any]:
        try:
            return list(self._call("list", self.client.list_objects, self.bucket, prefix=prefix, recursive=recursive))
        except S3Error as exc:
            if exc.code in MISSING:
                return []
            raise StorageUnavailable(f"the object store refused to list {prefix}: {exc.code}") from exc

    def _delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; returns their bytes."""
        from minio.deleteobjects import DeleteObject

        objects = self._list(prefix)
        freed = sum(o.size or 0 for o in objects)
        if objects:
            errors = list(self.client.remove_objects(self.bucket, [DeleteObject(o.object_name) for o in objects]))
            if errors:
                raise StorageUnavailable(f"the object store kept {len(errors)} objects under {prefix}")
        return freed

    def _download(self, key: str, target: Path) -> None:
        try:
            self._call("read", self.client.fget_object, self.bucket, key, str(target))
        except S3Error as exc:
            if exc.code in MISSING:
                raise FileNotFoundError(key) from exc
            raise StorageUnavailable(f"the object store refused to read {key}: {exc.code}") from exc

    # -- setup --

    def ensure(self) -> None:
        super().ensure()
        self.spool.mkdir(parents=True, exist_ok=True)
        try:
            exists = self._call("check the bucket", self.client.bucket_exists, self.bucket)
            if not exists and self.config.create_bucket:
                self._call("create the bucket", self.client.make_bucket, self.bucket)
            elif not exists:
                raise StorageUnavailable(f"the bucket {self.bucket} does not exist at {self.config.endpoint}")
        except S3Error as exc:
            raise StorageUnavailable(f"the object store refused to check the bucket: {exc.code}") from exc

    # -- sessions --

    def create(self, meta: SessionMeta) -> None:
        self.save(meta)

    def load(self, session_id: str) -> SessionMeta | None:
        data = self._get(self.key("sessions", check_session_id(session_id), "session.json"))
        return None if data is None else SessionMeta.from_json(data.decode("utf-8"))

    def loaded(self, session_id: str) -> SessionMeta | None:
        """Never known without reading the object (another replica may have replaced it)."""
        return None

    def save(self, meta: SessionMeta) -> None:
        self._put_bytes(
            self.key("sessions", check_session_id(meta.session_id), "session.json"), meta.to_json().encode()
        )

    def session_ids(self) -> list[str]:
        found = self._list(self.key("sessions") + "/", recursive=False)
        names = (o.object_name.rstrip("/").rsplit("/", 1)[-1] for o in found)
        return sorted(n for n in names if SESSION_ID_RE.match(n))

    def remove(self, session_id: str) -> int:
        check_session_id(session_id)
        chunks = self.received_bytes(session_id)
        self._delete_prefix(self.key("sessions", session_id) + "/")
        shutil.rmtree(self.spool / session_id, ignore_errors=True)
        return chunks

    def session_age(self, session_id: str) -> float:
        objects = self._list(self.key("sessions", check_session_id(session_id)) + "/")
        times = [o.last_modified.timestamp() for o in objects if o.last_modified]
        return time.time() - max(times) if times else 0.0

    # -- chunks --

    def chunks(self, session_id: str) -> list[ChunkInfo]:
        prefix = self.key("sessions", check_session_id(session_id), "chunks") + "/"
        found = []
        for obj in self._list(prefix):
            name = obj.object_name[len(prefix) :]
            if CHUNK_NAME_RE.match(name):
                found.append(ChunkInfo(int(name), obj.size or 0))
        return sorted(found, key=lambda c: c.number)

    def chunk_key(self, session_id: str, number: int) -> str:
        return self.key("sessions", check_session_id(session_id), "chunks", str(number))

    def writer(self, meta: SessionMeta, max_chunk_bytes: int, *, fsync: bool = True) -> ChunkWriter:
        """A writer into the local spool (no fsync: the chunk is durable once the upload succeeded)."""
        directory = self.spool / check_session_id(meta.session_id)
        directory.mkdir(parents=True, exist_ok=True)
        return ChunkWriter(directory, min(max_chunk_bytes, meta.upload.file_size), fsync=False)

    def publish(self, meta: SessionMeta, number: int, chunk: ReceivedChunk) -> bool:
        try:
            if chunk.size == 0:
                raise EmptyChunk("the chunk is empty", {"chunkNumber": number})
            chunks = self.chunks(meta.session_id)
            existing = next((c for c in chunks if c.number == number), None)
            if existing is not None:
                return self._same_object(meta.session_id, number, chunk, existing.size)
            others = sum(c.size for c in chunks)
            if others + chunk.size > meta.upload.file_size:
                raise SizeExceeded(
                    f"with this chunk the session would hold {others + chunk.size} bytes, more than fileSize "
                    f"{meta.upload.file_size}",
                    {
                        "chunkNumber": number,
                        "fileSize": meta.upload.file_size,
                        "received": others,
                        "chunkSize": chunk.size,
                    },
                )
            if self.load(meta.session_id) is None:
                raise SessionGone(f"import session {meta.session_id} was aborted", code="session_aborted")
            self._put_file(self.chunk_key(meta.session_id, number), chunk.path)
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(chunk.path)

    def _same_object(self, session_id: str, number: int, chunk: ReceivedChunk, stored_size: int) -> bool:
        if stored_size == chunk.size:
            copy = chunk.path.with_name(chunk.path.name + ".stored")
            try:
                self._download(self.chunk_key(session_id, number), copy)
                if same_bytes(copy, chunk.path):
                    return False
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(copy)
        raise ChunkConflict(f"chunk {number} was already received with different bytes", {"chunkNumber": number})

    # -- models --

    def model_key(self, namespace: str, model_id: str, path: str = "") -> str:
        return self.key("models", namespace, model_id, path) if path else self.key("models", namespace, model_id) + "/"

    def model_manifest(self, namespace: str, model_id: str) -> ModelManifest | None:
        data = self._get(self.model_key(namespace, model_id, MANIFEST))
        if data is None:
            return None
        try:
            return ModelManifest.from_dict(json.loads(data))
        except (ValueError, KeyError, TypeError):
            return None

    def read_model_file(self, namespace: str, model_id: str, path: str, start: int, end: int) -> Iterator[bytes]:
        if end <= start:
            return
        key = self.model_key(namespace, model_id, path)
        try:
            response = self._call("read", self.client.get_object, self.bucket, key, offset=start, length=end - start)
        except S3Error as exc:
            if exc.code in MISSING:
                raise ModelFileNotFound(f"model {namespace}/{model_id} has no file {path}") from exc
            raise StorageUnavailable(f"the object store refused to read {key}: {exc.code}") from exc
        try:
            yield from response.stream(COPY_BUFFER)
        finally:
            response.close()
            response.release_conn()

    def delete_model(self, namespace: str, model_id: str) -> None:
        self._delete_prefix(self.model_key(namespace, model_id))

    def stored_models(self) -> list[tuple[str, str, float]]:
        """(namespace, modelId, newest object's time) of every model directory in the bucket."""
        newest: dict[tuple[str, str], float] = {}
        base = self.key("models") + "/"
        for obj in self._list(base):
            parts = obj.object_name[len(base) :].split("/")
            if len(parts) < 3:
                continue
            when = obj.last_modified.timestamp() if obj.last_modified else time.time()
            newest[(parts[0], parts[1])] = max(newest.get((parts[0], parts[1]), 0.0), when)
        return [(ns, name, when) for (ns, name), when in sorted(newest.items())]

    # -- knowledge-base documents (dockyard_core.knowledge.files) --

    def document_key(self, namespace: str, name: str = "") -> str:
        """``<prefix>knowledge/files/<namespace>/<name>`` (a document or its ``<fileId>.json`` record)."""
        return self.key("knowledge", "files", namespace, name) if namespace else self.key("knowledge", "files", "")

    def read_document(self, namespace: str, name: str) -> bytes | None:
        return self._get(self.document_key(namespace, name))

    def write_document(self, namespace: str, name: str, content: Path | bytes) -> None:
        if isinstance(content, bytes):
            self._put_bytes(self.document_key(namespace, name), content)
        else:
            self._put_file(self.document_key(namespace, name), content)

    def drop_chunks(self, session_id: str) -> None:
        """Delete a completed session's chunk objects (its metadata stays until it expires)."""
        self._delete_prefix(self.key("sessions", check_session_id(session_id), "chunks") + "/")

    # -- the import job's side --

    def stage_session(self, session_id: str, local: ModelStore) -> None:
        """Copy the session (metadata and chunks) into the local file-system store ``local``."""
        meta = self.load(session_id)
        chunks = self.chunks(session_id)
        if meta is None and not chunks:
            return
        shutil.rmtree(local.session_dir(session_id), ignore_errors=True)
        local.chunks_dir(session_id).mkdir(parents=True)
        if meta is not None:
            local.save(meta)
        for chunk in chunks:
            self._download(self.chunk_key(session_id, chunk.number), local.chunk_path(session_id, chunk.number))

    def upload_model(self, namespace: str, model_id: str, directory: Path, manifest: ModelManifest) -> None:
        """Upload the model's files, then its manifest (the model exists once the manifest does), then
        delete objects of an earlier import that the new one does not have."""
        for entry in manifest.files:
            self._put_file(self.model_key(namespace, model_id, entry.path), directory.joinpath(*entry.path.split("/")))
        self._put_bytes(self.model_key(namespace, model_id, MANIFEST), json.dumps(manifest.to_dict()).encode())
        keep = {self.model_key(namespace, model_id, f.path) for f in manifest.files}
        keep.add(self.model_key(namespace, model_id, MANIFEST))
        stale = [o.object_name for o in self._list(self.model_key(namespace, model_id)) if o.object_name not in keep]
        if stale:
            from minio.deleteobjects import DeleteObject

            list(self.client.remove_objects(self.bucket, [DeleteObject(k) for k in stale]))


def _client(config: S3Config) -> Minio:
    scheme, _, host = config.endpoint.partition("://")
    if not host:
        scheme, host = "https", config.endpoint
    http = None
    if config.ca_bundle:
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=10, read=300),
            cert_reqs="CERT_REQUIRED",
            ca_certs=config.ca_bundle,
            retries=urllib3.Retry(total=3, backoff_factor=0.2, status_forcelist=[500, 502, 503, 504]),
        )
    return Minio(
        host.rstrip("/"),
        access_key=config.access_key,
        secret_key=config.secret_key,
        region=config.region or None,
        secure=scheme.lower() == "https",
        http_client=http,
    )


def open_store(backend: str, root: Path, config: S3Config | None) -> ModelStore:
    """The model store the settings choose: ``filesystem`` (root is the store) or ``s3`` (root is the
    local spool)."""
    if backend == "s3":
        if config is None or not config.bucket or not config.endpoint:
            raise ValueError("the s3 model store needs an endpoint and a bucket")
        return S3ModelStore(root, config)
    return ModelStore(root)
