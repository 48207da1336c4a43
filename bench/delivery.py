"""Weight delivery throughput: the storage initializer downloading a model through a real facade
(uvicorn on loopback) vs copying the same files on the same disk, side by side in one run; with
``--s3``, also from the S3 backend (a real MinIO on loopback, built by ``make minio``).

The initializer streams each file over HTTP, writes it to a part file, fsyncs it and then reads it
back to verify its SHA-256 against the manifest; "direct" copies the stored files and fsyncs them (no
HTTP, no hashing), before and after the downloads (the mean). Ratio = initializer MB/s / direct MB/s.

    .venv/bin/python -m bench.delivery [--size-mib 256] [--s3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from pydantic import SecretStr
from tests.support import modelfiles
from tests.support.runners import run_facade

from dockyard_api.settings import ApiSettings
from dockyard_api.storage_initializer import Initializer
from dockyard_core import downloadtokens

MiB = 1024 * 1024
KEY = "b" * 48
UNREACHABLE = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def direct_copy(source: Path, dest: Path) -> float:
    started = time.perf_counter()
    for path in sorted(p for p in source.rglob("*") if p.is_file() and not p.name.startswith(".dockyard")):
        target = dest / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        with path.open("rb") as src, target.open("wb") as out:
            shutil.copyfileobj(src, out, MiB)
            out.flush()
            os.fsync(out.fileno())
    return time.perf_counter() - started


def download(settings: ApiSettings, model: modelfiles.StoredModel, dest: Path) -> float:
    with run_facade(settings) as facade:
        token = downloadtokens.mint(KEY.encode(), model.namespace, model.model, int(time.time()) + 600)
        init = Initializer(facade.url, model.namespace, model.model, token, dest)
        started = time.perf_counter()
        init.run()
        took = time.perf_counter() - started
        init.close()
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--s3", action="store_true")
    args = parser.parse_args()
    original = modelfiles.model_files
    modelfiles.model_files = lambda weights_bytes=args.size_mib * MiB: original(weights_bytes)  # type: ignore[misc]
    with tempfile.TemporaryDirectory(
        dir=Path.cwd() / ".dockyard" if (Path.cwd() / ".dockyard").is_dir() else None
    ) as tmp:
        root = Path(tmp)
        settings = ApiSettings(
            model_store=root / "store",
            sweep_interval_seconds=0,
            watch_models=False,
            download_token_key=KEY,
            kubeconfig=str(root / "none"),
        )  # type: ignore[arg-type]
        (root / "none").write_text(UNREACHABLE)  # the download path needs no Kubernetes API
        store = settings.open_model_store()
        store.ensure()
        model = modelfiles.import_model(store, chunk=16 * MiB, weights_bytes=args.size_mib * MiB)
        total = model.manifest.total_bytes
        rows = []
        source = store.model_dir(model.namespace, model.model)
        before = direct_copy(source, root / "direct-1")
        rows.append(("filesystem", download(settings, model, root / "pod-fs")))
        if args.s3:
            from tests.support.minio import run_minio

            (root / "minio").mkdir()
            with run_minio(root / "minio") as minio:
                s3 = settings.model_copy(update={
                    "model_store": root / "spool", "model_store_backend": "s3", "s3_endpoint": minio.endpoint,
                    "s3_bucket": "bench", "s3_access_key": minio.access_key,
                    "s3_secret_key": SecretStr(minio.secret_key),
                    "s3_create_bucket": True, "s3_region": "us-east-1"})  # fmt: skip
                s3_store = s3.open_model_store()
                s3_store.ensure()
                s3_model = modelfiles.import_model(s3_store, chunk=16 * MiB, weights_bytes=args.size_mib * MiB)
                rows.append(("s3 (MinIO)", download(s3, s3_model, root / "pod-s3")))
        direct = (before + direct_copy(source, root / "direct-2")) / 2  # before and after: the mean
        print(f"model: {total / MiB:.0f} MiB in {len(model.manifest.files)} files; cpus: {os.cpu_count()}, "
              f"load: {os.getloadavg()[0]:.1f}")  # fmt: skip
        print(f"direct copy + fsync          {total / MiB / direct:8.1f} MiB/s")
        for name, took in rows:
            print(f"initializer via facade, {name:<11} {total / MiB / took:6.1f} MiB/s  ratio {direct / took:.2f}")


if __name__ == "__main__":
    main()
