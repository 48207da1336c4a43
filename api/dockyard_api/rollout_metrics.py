"""Metrics of canaries, per-version turns and automatic rollbacks (docs/promotion.md, docs/observability.md),
in the facade's registry (:data:`dockyard_api.metrics.REGISTRY`, served at ``/metrics``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from dockyard_api.metrics import LATENCY_BUCKETS, REGISTRY

VERSION_TURNS = Counter(
    "dockyard_execute_version_turns", "Deployed-app turns by environment, app version and outcome (ok, or the "
    "error code)", ["environment_namespace", "environment", "version", "outcome"], registry=REGISTRY,
)  # fmt: skip
VERSION_LATENCY = Histogram(
    "dockyard_execute_version_duration_seconds", "Time of a deployed-app turn, by environment and app version",
    ["environment_namespace", "environment", "version"], buckets=LATENCY_BUCKETS, registry=REGISTRY,
)  # fmt: skip
CANARY_WEIGHT = Gauge(
    "dockyard_canary_weight_percent", "Percent of new sessions that start on the canary (0: no canary), as the "
    "SLO watcher last saw it", ["environment_namespace", "environment", "version"], registry=REGISTRY,
)  # fmt: skip
ROLLBACKS = Counter(
    "dockyard_automatic_rollbacks", "Automatic rollbacks by environment, the version left, what was watched "
    "(canary, deploy) and the breached SLO (errorRate, p95Latency, evaluationPassRate)",
    ["environment_namespace", "environment", "version", "watched", "slo"], registry=REGISTRY,
)  # fmt: skip
SLO_BREACHES = Gauge(
    "dockyard_slo_breached", "1 while the watched version of an environment breaches an SLO over its window",
    ["environment_namespace", "environment", "version", "slo"], registry=REGISTRY,
)  # fmt: skip


def version_turn(namespace: str, environment: str, version: str, outcome: str, seconds: float) -> None:
    VERSION_TURNS.labels(namespace, environment, version, outcome).inc()
    VERSION_LATENCY.labels(namespace, environment, version).observe(seconds)


def rollback(namespace: str, environment: str, version: str, watched: str, slo: str) -> None:
    ROLLBACKS.labels(namespace, environment, version, watched, slo).inc()
