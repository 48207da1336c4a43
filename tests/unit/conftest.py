"""Fixtures shared by the unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml


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
