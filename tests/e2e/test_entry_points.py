"""The operator and the facade start against the cluster and report healthy and ready."""

from __future__ import annotations

import httpx

from tests.support.cluster import E2ECluster
from tests.support.runners import run_facade, run_operator


def test_operator_serves_health_and_readiness(cluster: E2ECluster, namespace: str) -> None:
    with run_operator([namespace]) as operator:
        assert httpx.get(f"{operator.health_url}/healthz").json() == {"status": "ok"}
        ready = httpx.get(f"{operator.health_url}/readyz")
        assert ready.status_code == 200
        assert ready.json()["kubernetes"].startswith("v1.")


def test_facade_serves_health_and_readiness(cluster: E2ECluster) -> None:
    with run_facade() as facade:
        assert facade.client.get("/healthz").json() == {"status": "ok"}
        ready = facade.client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["kubernetes"].startswith("v1.")
