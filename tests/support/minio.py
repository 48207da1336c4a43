"""A real S3-compatible server for the tests: MinIO, built from its Go module by
``operator/dockyard_localcluster/build-minio.sh`` (``make minio``; ``.ci/run`` runs it), started on a free
loopback port with a temporary data directory, and stopped afterwards."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.runners import free_port

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "operator" / "dockyard_localcluster" / "build-minio.sh"


@dataclass(frozen=True)
class MinioServer:
    endpoint: str
    access_key: str
    secret_key: str
    data: Path


def minio_binary() -> Path:
    """The cached binary (built on first use: the build script is idempotent and quick when cached)."""
    given = os.environ.get("DOCKYARD_MINIO")
    if given:
        return Path(given)
    done = subprocess.run(["bash", str(BUILD)], check=True, capture_output=True, text=True, timeout=3600)
    return Path(done.stdout.strip().splitlines()[-1])


@contextmanager
def run_minio(data: Path) -> Iterator[MinioServer]:
    port, console = free_port(), free_port()
    access, secret = "dockyard-test", secrets.token_hex(16)
    env = {**os.environ, "MINIO_ROOT_USER": access, "MINIO_ROOT_PASSWORD": secret, "MINIO_BROWSER": "off"}
    log = (data.parent / f"minio-{port}.log").open("wb")
    process = subprocess.Popen(
        [str(minio_binary()), "server", str(data), "--address", f"127.0.0.1:{port}",
         "--console-address", f"127.0.0.1:{console}", "--quiet"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise AssertionError(f"minio exited with {process.returncode}: {Path(log.name).read_text()[-2000:]}")
            try:
                if httpx.get(f"{endpoint}/minio/health/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("minio did not become ready within 60s")
            time.sleep(0.1)
        yield MinioServer(endpoint, access, secret, data)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
