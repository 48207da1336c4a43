"""The operator's import job as pure file work (dockyard_operator.importing): verification, safe extraction,
the model check; and the Model reconcile's garbage collection (dockyard_operator.reconcile.model)."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import struct
import tarfile
import time
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dockyard_core.kubeclient import AsyncKube
from dockyard_core.modelmanifest import MANIFEST
from dockyard_core.modelstore import ModelStore, SessionMeta
from dockyard_core.upload import Upload
from dockyard_localcluster.tinymodel import tiny_lora_tar, write_tiny_gguf, write_tiny_lora
from dockyard_operator.importing.archives import safe_member_path
from dockyard_operator.importing.chunks import ChunkReader
from dockyard_operator.importing.gguf import gguf_type
from dockyard_operator.importing.results import ImportFailed, Limits
from dockyard_operator.importing.run import run_import
from dockyard_operator.kube import KubeApi
from dockyard_operator.reconcile.model import Importer
from dockyard_operator.settings import OperatorSettings

LIMITS = Limits(max_extracted_bytes=10 * 1024 * 1024, max_members=100)
SID = "c" * 32
CONFIG = json.dumps({"model_type": "llama", "hidden_size": 64}).encode()


def safetensors(payload: bytes = b"\0" * 16) -> bytes:
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, len(payload)]}}).encode()
    return struct.pack("<Q", len(header)) + header + payload


def tar_bytes(members: list[tarfile.TarInfo | tuple[str, bytes]], mode: str = "w") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:  # type: ignore[call-overload]
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tar.addfile(m)
            else:
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                tar.addfile(info, io.BytesIO(m[1]))
    return buf.getvalue()


def zip_bytes(members: list[tuple[str | zipfile.ZipInfo, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return buf.getvalue()


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


MODEL = [("llama/config.json", CONFIG), ("llama/model.safetensors", safetensors())]


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    s = ModelStore(tmp_path / "store")
    s.ensure()
    return s


def upload(store: ModelStore, data: bytes, ext: str, *, chunk: int = 1000, sha: str | None = None,
           declared_size: int | None = None, name: str = "model", is_adapter: bool = False) -> str:  # fmt: skip
    """Store ``data`` as the chunks of session SID (its metadata says what the start call declared);
    return the session's id."""
    now = datetime.now(UTC)
    pieces = [data[i : i + chunk] for i in range(0, len(data), chunk)] or [b""]
    declared = Upload(file_context="model", file_name=f"{name}.{ext}", file_extension=ext,
                      file_size=declared_size or len(data), total_chunks=len(pieces), is_adapter=is_adapter,
                      sha256=sha)  # fmt: skip
    meta = SessionMeta(session_id=SID, namespace="ns", environment="prod", model_id="m", upload=declared,
                       created_at=now, expires_at=now + timedelta(hours=1))  # fmt: skip
    store.create(meta)
    for number, piece in enumerate(pieces):
        store.chunk_path(SID, number).write_bytes(piece)
    return SID


def run(store: ModelStore, up: str, job: str = "job-1", limits: Limits = LIMITS) -> Path:
    result = run_import(store, "ns", "m", up, job, limits)
    assert result.path == "models/ns/m"
    return store.root / result.path


def failure(store: ModelStore, up: str, limits: Limits = LIMITS) -> ImportFailed:
    with pytest.raises(ImportFailed) as err:
        run_import(store, "ns", "m", up, "job-1", limits)
    assert not (store.models / "ns" / "m").exists()
    assert not list((store.models / "ns").glob(".staging-*")), "staging directories must be cleaned up"
    return err.value


def listing(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


# --- happy paths --------------------------------------------------------------------------------------


@pytest.mark.parametrize("ext", ["tar", "tar.gz", "tgz", "zip"])
def test_an_archive_with_one_top_directory_becomes_the_model_directory(store: ModelStore, ext: str) -> None:
    data = zip_bytes(list(MODEL)) if ext == "zip" else tar_bytes(list(MODEL), "w:gz" if "g" in ext else "w")
    sha = hashlib.sha256(data).hexdigest()
    up = upload(store, data, ext, chunk=333, sha=sha)
    root = run(store, up)
    assert listing(root) == [MANIFEST, "config.json", "model.safetensors"]
    assert (root / "config.json").read_bytes() == CONFIG
    manifest = json.loads((root / MANIFEST).read_text())
    files = manifest.pop("files")
    assert manifest == {
        "dockStatusId": "job-1",
        "sizeBytes": len(data),
        "sha256": sha,
        "fileName": f"model.{ext}",
        "format": "safetensors",
        "file": None,
    }
    # every file of the model, with the size and SHA-256 that pods verify their downloads against
    assert files == [
        {"path": name, "size": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        for name, body in sorted((p.name, p.read_bytes()) for p in root.iterdir() if p.name != MANIFEST)
    ]
    assert oct((root / "config.json").stat().st_mode & 0o777) == "0o644"
    # what the pods download (and their weights volume is sized by): the stored files, not the upload
    stored = sum(len(body) for _, body in MODEL)
    assert run_import(store, "ns", "m", up, "job-1", LIMITS).files_bytes == stored  # the finished job, again


def test_a_flat_archive_keeps_its_layout_and_subdirectories(store: ModelStore) -> None:
    data = tar_bytes([("config.json", CONFIG), ("./tokenizer/vocab.json", b"{}"), ("model.bin", b"ct2")])
    root = run(store, upload(store, data, "tar"))
    assert listing(root) == [MANIFEST, "config.json", "model.bin", "tokenizer", "tokenizer/vocab.json"]


def test_a_single_weights_file_is_stored_byte_for_byte(store: ModelStore) -> None:
    data = b"GGUF" + os.urandom(5000)
    up = upload(store, data, "gguf", chunk=777, name="tiny")
    result = run_import(store, "ns", "m", up, "job-1", LIMITS)
    stored = store.root / result.path / "tiny.gguf"
    assert stored.read_bytes() == data
    assert result.sha256 == hashlib.sha256(data).hexdigest()
    assert result.size_bytes == result.files_bytes == len(data)
    assert (result.format, result.file) == ("gguf", "tiny.gguf")  # llama.cpp serves it (docs/runtimes.md)
    again = run_import(store, "ns", "m", up, "job-1", LIMITS)  # the finished job, found again
    assert (again.format, again.file) == ("gguf", "tiny.gguf")


def test_rerunning_the_same_job_reuses_the_result_and_a_new_job_replaces_it(store: ModelStore) -> None:
    up = upload(store, tar_bytes(list(MODEL)), "tar")
    first = run_import(store, "ns", "m", up, "job-1", LIMITS)
    store.remove(SID)  # the chunks are deleted once the outcome is recorded
    assert run_import(store, "ns", "m", up, "job-1", LIMITS) == first  # e.g. after a crash before the patch
    with pytest.raises(ImportFailed) as err:
        run_import(store, "ns", "m", up, "job-2", LIMITS)
    assert err.value.reason == "UploadMissing"


def test_leftovers_of_a_crashed_run_are_removed(store: ModelStore) -> None:
    stale = store.models / "ns" / ".staging-m-deadbeef"
    (stale / "half").mkdir(parents=True)
    run(store, upload(store, tar_bytes(list(MODEL)), "tar"))
    assert not stale.exists()


def test_hard_links_to_earlier_members_become_copies(store: ModelStore) -> None:
    data = tar_bytes([("config.json", CONFIG), link("config-copy.json", "config.json", tarfile.LNKTYPE)])
    root = run(store, upload(store, data, "tar"))
    assert (root / "config-copy.json").read_bytes() == CONFIG
    assert not (root / "config-copy.json").is_symlink()
    assert (root / "config-copy.json").stat().st_nlink == 1


def test_an_adapter_is_recognised_by_its_adapter_config(store: ModelStore) -> None:
    data = tar_bytes([("adapter_config.json", b'{"r": 8}'), ("adapter_model.safetensors", safetensors())])
    run(store, upload(store, data, "tar", is_adapter=True))


def test_an_adapter_records_the_base_its_adapter_config_names(store: ModelStore, tmp_path: Path) -> None:
    up = upload(store, tiny_lora_tar(tmp_path / "lora", base="dockyard-dev/tiny-llama"), "tar", is_adapter=True)
    first = run_import(store, "ns", "m", up, "job-1", LIMITS)
    assert (first.adapter_base, first.format, first.file) == ("dockyard-dev/tiny-llama", "gguf", "tiny-lora.gguf")
    assert run_import(store, "ns", "m", up, "job-1", LIMITS) == first  # the finished job, from the manifest


def test_a_gguf_model_is_not_an_adapter(store: ModelStore, tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    assert gguf_type(model) is None  # the tiny model's writer sets no general.type
    config = ("adapter_config.json", b'{"base_model_name_or_path": "x"}')
    up = upload(store, tar_bytes([config, ("m.gguf", model.read_bytes())]), "tar", is_adapter=True)
    refused = failure(store, up)
    assert refused.reason == "InvalidModel"
    assert "not a GGUF LoRA adapter" in refused.message
    assert "convert_lora_to_gguf.py" in refused.message


def test_a_gguf_lora_is_not_a_model(store: ModelStore, tmp_path: Path) -> None:
    lora = write_tiny_lora(tmp_path / "lora") / "tiny-lora.gguf"
    assert gguf_type(lora) == "adapter"
    assert gguf_type(tmp_path / "lora" / "adapter_config.json") is None  # not GGUF at all
    refused = failure(store, upload(store, lora.read_bytes(), "gguf", name="tiny-lora"))
    assert "is a LoRA adapter" in refused.message
    assert "--adapter" in refused.message


def test_macos_metadata_directories_are_skipped(store: ModelStore) -> None:
    data = zip_bytes([*MODEL, ("__MACOSX/llama/._config.json", b"junk")])
    root = run(store, upload(store, data, "zip"))
    assert listing(root) == [MANIFEST, "config.json", "model.safetensors"]


# --- verification -------------------------------------------------------------------------------------


def test_checksum_mismatch(store: ModelStore) -> None:
    err = failure(store, upload(store, tar_bytes(list(MODEL)), "tar", sha="0" * 64))
    assert err.reason == "ChecksumMismatch"
    assert "0" * 64 in err.message


def test_size_mismatch(store: ModelStore) -> None:
    data = tar_bytes(list(MODEL))
    assert failure(store, upload(store, data, "tar", declared_size=len(data) + 1)).reason == "SizeMismatch"


def test_missing_chunks_or_session(store: ModelStore) -> None:
    up = upload(store, tar_bytes(list(MODEL)), "tar", chunk=500)
    store.chunk_path(SID, 1).unlink()
    assert failure(store, up).reason == "UploadMissing"
    store.remove(SID)
    assert failure(store, up).reason == "UploadMissing"


# --- safety -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("/etc/passwd", "absolute"),
        ("../evil", ".."),
        ("llama/../../evil", ".."),
        ("a\\b", "backslash"),
        ("C:/x", "absolute"),
        ("a\x01b", "control"),
    ],
)
def test_member_paths_that_could_escape_are_refused(name: str, fragment: str) -> None:
    with pytest.raises(ImportFailed) as err:
        safe_member_path(name)
    assert err.value.reason == "UnsafeArchive"
    assert fragment in err.value.message


def test_safe_member_paths_are_normalised() -> None:
    assert safe_member_path("./a//b/./c") == "a/b/c"
    assert safe_member_path("./") == ""


@pytest.mark.parametrize(
    ("members", "fragment"),
    [
        ([("config.json", CONFIG), ("../../escape.txt", b"x")], ".."),
        ([("/abs.txt", b"x")], "absolute"),
        ([("config.json", CONFIG), link("weights", "/etc/passwd")], "symbolic link"),
        ([("config.json", CONFIG), link("weights", "config.json")], "symbolic link"),
        ([("config.json", CONFIG), link("h", "../../etc/passwd", tarfile.LNKTYPE)], ".."),
        ([("config.json", CONFIG), link("h", "later.bin", tarfile.LNKTYPE), ("later.bin", b"x")], "not an earlier"),
        ([("config.json", CONFIG), link("dev", "", tarfile.CHRTYPE)], "device"),
        ([("config.json", CONFIG), link("fifo", "", tarfile.FIFOTYPE)], "device"),
    ],
)
def test_unsafe_tar_archives_fail_with_the_reason(
    store: ModelStore, members: list[tarfile.TarInfo | tuple[str, bytes]], fragment: str
) -> None:
    err = failure(store, upload(store, tar_bytes(members), "tar"))
    assert err.reason == "UnsafeArchive"
    assert fragment in err.message
    assert not (store.root.parent / "escape.txt").exists()


def test_unsafe_zip_archives_fail(store: ModelStore) -> None:
    assert failure(store, upload(store, zip_bytes([("../x", b"x")]), "zip")).reason == "UnsafeArchive"
    store.remove(SID)
    symlink = zipfile.ZipInfo("weights")
    symlink.external_attr = (0o120777 << 16) | 0
    data = zip_bytes([("config.json", CONFIG), (symlink, b"/etc/passwd")])
    err = failure(store, upload(store, data, "zip"))
    assert (err.reason, "symbolic link" in err.message) == ("UnsafeArchive", True)


def test_duplicate_members_are_refused(store: ModelStore) -> None:
    data = tar_bytes([("config.json", CONFIG), ("config.json", b"{}")])
    assert failure(store, upload(store, data, "tar")).reason == "InvalidArchive"


def test_size_and_member_caps(store: ModelStore) -> None:
    bomb = tar_bytes([("config.json", CONFIG), ("big.bin", b"\0" * 3_000_000)], "w:gz")
    assert len(bomb) < 20_000
    err = failure(store, upload(store, bomb, "tar.gz"), Limits(max_extracted_bytes=1_000_000, max_members=10))
    assert err.reason == "ArchiveTooLarge"
    store.remove(SID)
    many = tar_bytes([("config.json", CONFIG)] + [(f"f{i}", b"") for i in range(20)])
    assert failure(store, upload(store, many, "tar"), Limits(10**9, 10)).reason == "ArchiveTooLarge"


def test_garbage_is_an_invalid_archive(store: ModelStore) -> None:
    for ext in ("tar", "tar.gz", "zip"):
        assert failure(store, upload(store, os.urandom(3000), ext)).reason == "InvalidArchive"
        store.remove(SID)


# --- the model check ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "ext", "fragment"),
    [
        ([("README.md", b"hello")], "tar", "no model found"),
        ([("config.json", b"not json")], "tar", "not valid JSON"),
        ([("config.json", b"[1]")], "tar", "not a JSON object"),
        ([("model.safetensors", b"\xff" * 20)], "tar", "safetensors header"),
        ([("model.gguf", b"GGML....")], "tar", "GGUF magic"),
        ([("config.json", CONFIG)], "adapter", "adapter_config.json"),
    ],
)
def test_files_that_hold_no_model_are_invalid(
    store: ModelStore, members: list[tuple[str, bytes]], ext: str, fragment: str
) -> None:
    is_adapter = ext == "adapter"
    data = tar_bytes(list(members)) if not is_adapter else tar_bytes([("README.md", b"x")])
    err = failure(store, upload(store, data, "tar", is_adapter=is_adapter))
    assert err.reason == "InvalidModel"
    assert fragment in err.message


def test_a_single_file_with_a_bad_magic_is_invalid(store: ModelStore) -> None:
    assert failure(store, upload(store, b"nope" * 100, "gguf")).reason == "InvalidModel"


# --- the chunk reader -----------------------------------------------------------------------------------


def test_chunk_reader_reads_and_seeks_across_chunk_boundaries(tmp_path: Path) -> None:
    data = os.urandom(10_000)
    paths = []
    for i, (a, b) in enumerate([(0, 1), (1, 4000), (4000, 4001), (4001, 10_000)]):
        path = tmp_path / str(i)
        path.write_bytes(data[a:b])
        paths.append(path)
    with ChunkReader(paths) as reader:
        assert reader.size == 10_000
        assert io.BufferedReader(reader, 777).read() == data
        for pos, n in [(0, 10), (3999, 3), (4000, 2), (9990, 100), (123, 9000)]:
            reader.seek(pos)
            assert reader.read(n) == data[pos : pos + n]
        reader.seek(-5, io.SEEK_END)
        assert reader.read() == data[-5:]


# --- garbage collection of deleted Models' files ---------------------------------------------------------


def test_files_of_models_missing_from_a_listing_are_collected(store: ModelStore) -> None:
    importer = Importer(OperatorSettings(model_store=store.root), kube=None)  # type: ignore[arg-type]
    for rel in ("ns/alive", "ns/deleted", "ns/.staging-deleted-1a2b3c4d", "ns/.staging-alive-1a2b3c4d", "b/x"):
        (store.models / rel).mkdir(parents=True)
    time.sleep(0.02)
    listed_at = time.time()
    time.sleep(0.02)
    (store.models / "ns" / "newer").mkdir()  # made after the listing: its Model may be newer than it
    removed = importer.collect_garbage({("ns", "alive")}, listed_at)
    assert sorted(removed) == ["b/x", "ns/.staging-deleted-1a2b3c4d", "ns/deleted"]
    assert sorted(p.name for p in (store.models / "ns").iterdir()) == [".staging-alive-1a2b3c4d", "alive", "newer"]


def test_the_files_of_models_deleted_while_the_operator_was_down_go_when_it_starts(store: ModelStore) -> None:
    """The first collection runs at start, not one interval (10 minutes) later."""

    class Listing(AsyncKube):
        def __init__(self) -> None:  # no API server: every request answers the one listing
            pass

        async def request(self, *args: object, **kwargs: object) -> dict[str, Any]:
            return {"items": [{"metadata": {"namespace": "ns", "name": "alive"}}]}

    for rel in ("ns/alive", "ns/deleted-while-down"):
        (store.models / rel).mkdir(parents=True)
    time.sleep(0.02)

    async def start_and_wait() -> float:
        importer = Importer(OperatorSettings(model_store=store.root), kube=KubeApi(Listing()))
        started = time.monotonic()
        importer.start_garbage_collection(600, grace=0)
        try:
            while (store.models / "ns" / "deleted-while-down").exists():
                assert time.monotonic() - started < 5, "not collected at start"
                await asyncio.sleep(0.05)
            return time.monotonic() - started
        finally:
            await importer.close()

    assert asyncio.run(start_and_wait()) < 5
    assert (store.models / "ns" / "alive").is_dir()


@pytest.mark.parametrize(
    "head",
    [
        b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**62),  # a key longer than the file
        b"GGUF" + struct.pack("<IQQ", 3, 0, 2**60) + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 8, 2**61),
        b"GGUF" + struct.pack("<I", 1),  # GGUF v1: not read
        b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 12) + b"general.type" + struct.pack("<I", 99),
    ],
)
def test_a_damaged_gguf_header_has_no_type_and_costs_nothing(tmp_path: Path, head: bytes) -> None:
    path = tmp_path / "x.gguf"
    path.write_bytes(head + os.urandom(64))
    started = time.monotonic()
    assert gguf_type(path) is None
    assert time.monotonic() - started < 1
