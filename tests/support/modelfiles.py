"""A small model imported into a model store through the store's interface (either backend): chunks
published like uploads, then the operator's import job."""

from __future__ import annotations

import io
import json
import os
import struct
import tarfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from dockyard_core.modelmanifest import ModelManifest
from dockyard_core.modelstore import ModelStore, SessionMeta
from dockyard_core.upload import Upload
from dockyard_operator.importing.results import Limits
from dockyard_operator.importing.run import import_into

LIMITS = Limits(max_extracted_bytes=1 << 30, max_members=1000)


def safetensors(payload_bytes: int) -> bytes:
    header = json.dumps({"w": {"dtype": "U8", "shape": [payload_bytes], "data_offsets": [0, payload_bytes]}}).encode()
    return struct.pack("<Q", len(header)) + header + os.urandom(payload_bytes)


def model_files(weights_bytes: int = 3 * 1024 * 1024 + 17) -> dict[str, bytes]:
    return {
        "config.json": json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 64}).encode(),
        "model.safetensors": safetensors(weights_bytes),
        "tokenizer/vocab.json": json.dumps({"a": 0, "b": 1}).encode(),
    }


def tar_of(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, body in files.items():
            info = tarfile.TarInfo(f"tiny/{name}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return buf.getvalue()


@dataclass(frozen=True)
class StoredModel:
    namespace: str
    model: str
    files: dict[str, bytes]
    manifest: ModelManifest


def import_model(
    store: ModelStore,
    namespace: str = "team-a",
    model: str = "tiny-1",
    *,
    chunk: int = 1024 * 1024,
    weights_bytes: int = 3 * 1024 * 1024 + 17,
) -> StoredModel:
    files = model_files(weights_bytes)
    data = tar_of(files)
    session = os.urandom(16).hex()
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)]
    now = datetime.now(UTC)
    declared = Upload(file_context="model", file_name="tiny.tar", file_extension="tar", file_size=len(data),
                      total_chunks=len(pieces))  # fmt: skip
    meta = SessionMeta(session_id=session, namespace=namespace, environment="prod", model_id=model, upload=declared,
                       created_at=now, expires_at=now + timedelta(hours=1))  # fmt: skip
    store.create(meta)
    for number, piece in enumerate(pieces):
        writer = store.writer(meta, len(piece))
        writer.write_all([memoryview(piece)])
        assert store.publish(meta, number, writer.finish())
    import_into(store, namespace, model, session, "job-1", LIMITS, work=store.root / "imports")
    manifest = store.model_manifest(namespace, model)
    assert manifest is not None
    return StoredModel(namespace, model, files, manifest)
