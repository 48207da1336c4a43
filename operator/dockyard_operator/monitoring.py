"""Prometheus metrics of the operator, served at ``/metrics`` on its health port.

- reconciles by kind and result (success, error, conflict, gone) with their duration;
- the work queue: depth (objects waiting for a reconcile), reconciles running, and the wait from the
  first trigger to the start of the reconcile that serves it;
- dock jobs: outcomes (SUCCESS / FAILED) and the time from start to that outcome, by job type, action
  and device type (``none`` for tools and imports);
- autoscaler decisions by reason (ScaleUp, ScaleDown, Holding, WithinBounds, Clamped, NoMetrics);
- each ModelDeployment's and ToolDeployment's latest dock job: its status (and reason) and when it started,
  read from the work queues when scraped (the alerts "deployment failed" and "deployment stuck");
- when the admission webhook's certificate expires, read from its file when scraped.

The log line of every job start and outcome carries ``request_id``: the facade's request id from the
object's ``dockyard.dev/request-id`` annotation.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from dockyard_core.requestid import REQUEST_ID_ANNOTATION

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

SHORT = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LONG = (1, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)

RECONCILES = Counter(
    "dockyard_operator_reconciles", "Reconciles by kind and result (success, error, conflict, gone)",
    ["kind", "result"], registry=REGISTRY,
)  # fmt: skip
RECONCILE_SECONDS = Histogram(
    "dockyard_operator_reconcile_duration_seconds", "Time of one reconcile", ["kind"], buckets=SHORT,
    registry=REGISTRY,
)  # fmt: skip
QUEUE_WAIT = Histogram(
    "dockyard_operator_workqueue_wait_seconds",
    "Time from an object's first pending trigger to the start of the reconcile that serves it (batch window "
    "and waiting for a slot included)",
    ["kind"], buckets=SHORT, registry=REGISTRY,
)  # fmt: skip
RECONCILE_CAUSES = Counter(
    "dockyard_operator_reconcile_causes",
    "Reconciles by kind and by what queued them: object (a watch event of the object), deployment or pod "
    "(a change of its workload's signal), model or tool (one in its namespace changed), timer (a requeue with "
    "no event), retry (after a failure); later triggers that joined the same run are not counted",
    ["kind", "cause"], registry=REGISTRY,
)  # fmt: skip
JOBS = Counter(
    "dockyard_operator_jobs", "Dock jobs that reached SUCCESS or FAILED",
    ["job_type", "action", "device_type", "status"], registry=REGISTRY,
)  # fmt: skip
JOB_SECONDS = Histogram(
    "dockyard_operator_job_duration_seconds", "Time from a dock job's start to SUCCESS or FAILED",
    ["job_type", "action", "device_type", "status"], buckets=LONG, registry=REGISTRY,
)  # fmt: skip
AUTOSCALER = Counter(
    "dockyard_operator_autoscaler_decisions", "Autoscaler decisions by reason", ["reason"], registry=REGISTRY
)

jobs_log = logging.getLogger("dockyard.jobs")


class _Queue(Protocol):
    kind: str

    def depth(self) -> int: ...

    def running(self) -> int: ...

    def keys(self, namespace: str | None = None) -> list[tuple[str, str]]: ...

    def body(self, key: tuple[str, str]) -> Mapping[str, Any] | None: ...


class _QueueCollector(Collector):
    """Depth and running reconciles of every live work queue, read when scraped."""

    def __init__(self) -> None:
        self.queues: weakref.WeakSet[Any] = weakref.WeakSet()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            "dockyard_operator_workqueue_depth", "Objects waiting for a reconcile (triggered, not yet started)",
            labels=["kind"],
        )  # fmt: skip
        running = GaugeMetricFamily("dockyard_operator_workqueue_running", "Reconciles running now", labels=["kind"])
        job_status = GaugeMetricFamily(
            "dockyard_operator_deployment_job_status",
            "The status of each deployment's latest dock job (1 for its status and reason: IN_PROGRESS, SUCCESS, "
            "FAILED)",
            labels=["kind", "deployment_namespace", "deployment", "status", "reason"],
        )
        job_start = GaugeMetricFamily(
            "dockyard_operator_deployment_job_start_time_seconds",
            "When each deployment's latest dock job started (Unix time)",
            labels=["kind", "deployment_namespace", "deployment"],
        )
        for queue in list(self.queues):
            depth.add_metric([queue.kind], queue.depth())
            running.add_metric([queue.kind], queue.running())
            for key in queue.keys(None):  # every namespace
                job = ((queue.body(key) or {}).get("status") or {}).get("job") or {}
                if not job.get("status"):
                    continue
                job_status.add_metric([queue.kind, *key, str(job["status"]), str(job.get("reason") or "")], 1)
                started = _timestamp(job.get("startTime"))
                if started is not None:
                    job_start.add_metric([queue.kind, *key], started)
        yield depth
        yield running
        yield job_status
        yield job_start


def _timestamp(value: Any) -> float | None:
    if isinstance(value, datetime):
        return value.timestamp()
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class _CertificateCollector(Collector):
    """When the admission webhook's certificate expires, read from its PEM file when scraped (again only when
    the file changed: cert-manager or the chart may replace it while the operator runs)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self._read: tuple[float, float] | None = None
        """(the file's mtime, its certificate's notAfter as Unix time)."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "dockyard_operator_webhook_certificate_expiry_timestamp_seconds",
            "When the certificate of the operator's admission webhooks expires (Unix time)",
        )
        expiry = self.expiry()
        if expiry is not None:
            family.add_metric([], expiry)
        yield family

    def expiry(self) -> float | None:
        if self.path is None:
            return None
        try:
            mtime = self.path.stat().st_mtime
            if self._read is None or self._read[0] != mtime:
                from cryptography import x509

                cert = x509.load_pem_x509_certificate(self.path.read_bytes())
                self._read = (mtime, cert.not_valid_after_utc.timestamp())
        except (OSError, ValueError):
            logging.getLogger("dockyard.operator.monitoring").warning(
                "cannot read the webhook certificate %s", self.path, exc_info=True
            )
            return None
        return self._read[1]


QUEUES = _QueueCollector()
REGISTRY.register(QUEUES)
CERTIFICATE = _CertificateCollector()
REGISTRY.register(CERTIFICATE)


def watch_certificate(path: str | Path) -> None:
    """The admission webhook's certificate file, whose expiry is exported."""
    CERTIFICATE.path = Path(path)
    CERTIFICATE._read = None


def register_queue(queue: _Queue) -> None:
    QUEUES.queues.add(queue)


def reconciled(kind: str, result: str, seconds: float) -> None:
    RECONCILES.labels(kind, result).inc()
    RECONCILE_SECONDS.labels(kind).observe(seconds)


def waited(kind: str, seconds: float, cause: str) -> None:
    QUEUE_WAIT.labels(kind).observe(seconds)
    RECONCILE_CAUSES.labels(kind, cause).inc()


def autoscaler_decision(reason: str) -> None:
    AUTOSCALER.labels(reason).inc()


def request_id_of(body: Mapping[str, Any]) -> str | None:
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(REQUEST_ID_ANNOTATION)
    return str(value) if value else None


def _ref(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{body.get('kind', '?')} {meta.get('namespace', '')}/{meta.get('name', '')}"


def job_started(body: Mapping[str, Any], dock_status_id: str, job_type: str, action: str) -> None:
    jobs_log.info(
        "dock job %s started: %s %s of %s",
        dock_status_id,
        job_type,
        action,
        _ref(body),
        extra={"request_id": request_id_of(body), "dock_status_id": dock_status_id, "object": _ref(body)},
    )


def job_finished(
    body: Mapping[str, Any],
    *,
    dock_status_id: str,
    job_type: str,
    action: str,
    status: str,
    reason: str,
    device_type: str | None,
    start: datetime | None,
    end: datetime | None,
) -> None:
    """A job reached SUCCESS or FAILED: count it, time it, log it with the request id."""
    device = device_type or "none"
    JOBS.labels(job_type, action, device, status).inc()
    if start is not None and end is not None:
        JOB_SECONDS.labels(job_type, action, device, status).observe(max(0.0, (end - start).total_seconds()))
    jobs_log.info(
        "dock job %s %s (%s): %s %s of %s",
        dock_status_id,
        status,
        reason,
        job_type,
        action,
        _ref(body),
        extra={
            "request_id": request_id_of(body),
            "dock_status_id": dock_status_id,
            "object": _ref(body),
            "status": status,
            "reason": reason,
            "device_type": device,
        },
    )


def exposition() -> tuple[bytes, str]:
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
