"""Fixtures that need no cluster, shared by the suites: a real MinIO server (tests/tools, tests/e2e) and a
kubeconfig naming an API server where nothing listens (tests/unit, tests/tools). A pytest plugin, loaded
by ``tests/conftest.py`` (``pytest_plugins``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.minio import MinioServer, run_minio


@pytest.fixture(scope="session")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """A real MinIO server on a free loopback port with a temporary data directory (stopped at the end)."""
    data: Path = tmp_path_factory.mktemp("minio") / "data"
    data.mkdir()
    with run_minio(data) as server:
        yield server


@pytest.fixture
def unreachable_kubeconfig(tmp_path: Path) -> str:
    """A kubeconfig naming an API server where nothing listens (port 9 on loopback: discard)."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)
