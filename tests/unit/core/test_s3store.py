"""The model store's S3 backend without a server: an endpoint where nothing listens is a storage error
(the backend against a real MinIO: tests/tools/test_s3store.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import urllib3
from minio import Minio

from dockyard_core.s3store import S3Config, S3ModelStore, StorageUnavailable
from tests.support.runners import free_port


def test_an_unreachable_endpoint_is_a_storage_error(tmp_path: Path) -> None:
    port = free_port()
    fast = Minio(f"127.0.0.1:{port}", access_key="a", secret_key="b" * 16, secure=False,
                 http_client=urllib3.PoolManager(retries=0, timeout=2))  # fmt: skip
    dead = S3ModelStore(tmp_path, S3Config(endpoint=f"http://127.0.0.1:{port}", bucket="models-b"), client=fast)
    with pytest.raises(StorageUnavailable) as caught:
        dead.load(os.urandom(16).hex())
    assert caught.value.status_code == 502
