"""The conversation store's settings in the chart, rendered by the pinned helm (what the store shows
outside without helm: tests/unit/api/test_store_api.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.helm import Helm, helm_binary
from tests.tools.test_chart_templates import deployments, env_of, render


def test_chart_takes_the_database_url_from_a_secret_and_keeps_sqlite_by_default(tmp_path: Path) -> None:
    helm = Helm(helm_binary())
    default = env_of(deployments(render(helm, tmp_path))["api"])
    assert "DOCKYARD_API_DATABASE_URL" not in default  # SQLite on the model store
    assert default["DOCKYARD_API_MODEL_STORE"] == "/var/lib/dockyard/model-store"
    values = {"facade": {"replicas": 3, "database": {"existingSecret": "dockyard-db", "secretKey": "dsn"}}}
    api = deployments(render(helm, tmp_path, values))["api"]
    assert env_of(api)["DOCKYARD_API_DATABASE_URL"] == {"secretKeyRef": {"name": "dockyard-db", "key": "dsn"}}
    assert api["spec"]["replicas"] == 3
