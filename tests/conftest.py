"""Shared fixtures. e2e fixtures (cluster, namespaces) live in ``tests/e2e/conftest.py``."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.minio import MinioServer, run_minio


@pytest.fixture(scope="session")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """A real MinIO server on a free loopback port with a temporary data directory (stopped at the end)."""
    data: Path = tmp_path_factory.mktemp("minio") / "data"
    data.mkdir()
    with run_minio(data) as server:
        yield server
