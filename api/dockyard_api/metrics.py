"""Prometheus metrics of the facade, served at ``/metrics`` (text exposition, prometheus_client).

Requests are counted by route TEMPLATE (``/e/{namespace}/{environment}/api/public/dock-status/{dock_status_id}``,
never the concrete path: bounded cardinality), method and status, with a latency histogram. The
functions below are what the request handlers call; the deployed-app runtime and its rate limiter call
:func:`execute_outcome`, :func:`tokens` and :func:`rate_limited`, its guardrails :func:`guardrail_intervention`
and :func:`pii_redactions`, the conversation database :func:`store_up`.

An environment's namespace is the label ``environment_namespace``: Prometheus adds ``namespace`` (the
facade pod's) to every series it scrapes.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from dockyard_core import requestid

log = logging.getLogger("dockyard.api.metrics")
REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

REQUESTS = Counter(
    "dockyard_api_requests", "HTTP requests answered, by route template, method and status",
    ["route", "method", "status"], registry=REGISTRY,
)  # fmt: skip
LATENCY = Histogram(
    "dockyard_api_request_duration_seconds", "Time to answer an HTTP request (until the last body byte is sent)",
    ["route", "method"], buckets=LATENCY_BUCKETS, registry=REGISTRY,
)  # fmt: skip
IN_FLIGHT = Gauge("dockyard_api_requests_in_flight", "HTTP requests being answered", registry=REGISTRY)
UPLOAD_BYTES = Counter("dockyard_api_upload_bytes", "Bytes of import chunks stored", registry=REGISTRY)
UPLOAD_CHUNKS = Counter("dockyard_api_upload_chunks", "Import chunks stored", registry=REGISTRY)
IMPORTS = Counter(
    "dockyard_api_imports", "Import session calls by outcome (started, completed, aborted, refused)", ["outcome"],
    registry=REGISTRY,
)  # fmt: skip
DEPLOYS = Counter(
    "dockyard_api_deploys", "Public deploy calls answered 200, by kind (model, tool) and the job status answered",
    ["kind", "outcome"], registry=REGISTRY,
)  # fmt: skip
EXECUTES = Counter(
    "dockyard_api_executes", "Deployed-app calls by environment and outcome (ok, or the error code)",
    ["environment_namespace", "environment", "outcome"], registry=REGISTRY,
)  # fmt: skip
EXECUTE_LATENCY = Histogram(
    "dockyard_api_execute_duration_seconds", "Time of a deployed-app call, by environment",
    ["environment_namespace", "environment"], buckets=LATENCY_BUCKETS, registry=REGISTRY,
)  # fmt: skip
TOKENS = Counter(
    "dockyard_api_tokens", "Model tokens of deployed-app calls by environment and direction (in, out)",
    ["environment_namespace", "environment", "direction"], registry=REGISTRY,
)  # fmt: skip
RATE_LIMITED = Counter(
    "dockyard_api_rate_limited", "Calls refused by a rate limit (429), by environment and limit",
    ["environment_namespace", "environment", "limit"], registry=REGISTRY,
)  # fmt: skip
GUARDRAIL_INTERVENTIONS = Counter(
    "dockyard_guardrail_interventions", "What the guardrails did to deployed-app turns, by environment, policy, "
    "stage (input, output, toolArguments, toolResults) and action (block, redact, record)",
    ["environment_namespace", "environment", "policy", "stage", "action"], registry=REGISTRY,
)  # fmt: skip
PII_REDACTIONS = Counter(
    "dockyard_pii_redactions", "Values the PII protection replaced in deployed-app turns, by environment, entity "
    "(EMAIL_ADDRESS, ...) and stage", ["environment_namespace", "environment", "entity", "stage"], registry=REGISTRY,
)  # fmt: skip

STORE_UP = Gauge(
    "dockyard_api_store_up", "1 while the conversation database answers (its last heartbeat, every 2 s, "
    "succeeded), 0 while it does not", registry=REGISTRY,
)  # fmt: skip

UNMATCHED = "<unmatched>"


def store_up(up: bool) -> None:
    """The conversation database answered (or not) this process's last heartbeat."""
    STORE_UP.set(1 if up else 0)


class Children:
    """A labelled metric's children, looked up in a dict: prometheus_client's ``labels()`` checks its arguments,
    makes strings of them and takes a lock on every call, and a turn makes six. Label values are what the
    callers pass (strings); the children are never removed, and at most :data:`CHILDREN_KEPT` are kept (more
    label sets are looked up each time)."""

    __slots__ = ("children", "metric")

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self.children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self.children.get(values)
        if child is None:
            child = self.metric.labels(*values)
            if len(self.children) < CHILDREN_KEPT:
                self.children[values] = child
        return child


CHILDREN_KEPT = 10_000
_REQUESTS = Children(REQUESTS)
_LATENCY = Children(LATENCY)
_EXECUTES = Children(EXECUTES)
_EXECUTE_LATENCY = Children(EXECUTE_LATENCY)
_TOKENS = Children(TOKENS)


def upload_chunk(size: int) -> None:
    UPLOAD_BYTES.inc(size)
    UPLOAD_CHUNKS.inc()


def import_outcome(outcome: str) -> None:
    IMPORTS.labels(outcome).inc()


def deploy_outcome(kind: str, outcome: str) -> None:
    """``kind`` model or tool; ``outcome`` the job status answered (IN_PROGRESS, SUCCESS, FAILED) or refused."""
    DEPLOYS.labels(kind, outcome).inc()


def execute_outcome(namespace: str, environment: str, outcome: str, seconds: float | None = None) -> None:
    """One deployed-app call ended: ``outcome`` is ``ok`` or the error code answered."""
    _EXECUTES(namespace, environment, outcome).inc()
    if seconds is not None:
        _EXECUTE_LATENCY(namespace, environment).observe(seconds)


def tokens(namespace: str, environment: str, tokens_in: int, tokens_out: int) -> None:
    if tokens_in:
        _TOKENS(namespace, environment, "in").inc(tokens_in)
    if tokens_out:
        _TOKENS(namespace, environment, "out").inc(tokens_out)


def rate_limited(namespace: str, environment: str, limit: str) -> None:
    """A call was refused with 429; ``limit`` names the limit (e.g. requestsPerMinute, tokensPerDay)."""
    RATE_LIMITED.labels(namespace, environment, limit).inc()


def guardrail_intervention(namespace: str, environment: str, policy: str, stage: str, action: str) -> None:
    """A guardrail policy acted on a text of a turn (docs/guardrails.md)."""
    GUARDRAIL_INTERVENTIONS.labels(namespace, environment, policy, stage, action).inc()


def pii_redactions(namespace: str, environment: str, entity: str, stage: str, count: int) -> None:
    """The PII protection replaced ``count`` values of ``entity`` in a text of a turn."""
    PII_REDACTIONS.labels(namespace, environment, entity, stage).inc(count)


def exposition() -> tuple[bytes, str]:
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


class RouteTemplates:
    """The route template of a request path, from the app's OpenAPI paths (``{param}`` matches one segment).

    A template with fewer parameters wins (``/files/session/start`` before ``/files/session/{sessionId}``).
    Built on first use, so every router included by then counts; paths that match none are ``<unmatched>``
    (a scan of random URLs cannot grow the metric's cardinality)."""

    EXTRA = ("/metrics",)

    def __init__(self) -> None:
        self._patterns: list[tuple[re.Pattern[str], str]] | None = None

    def build(self, app: Any) -> None:
        paths = list(app.openapi().get("paths", {})) + list(self.EXTRA)
        ordered = sorted(set(paths), key=lambda p: (p.count("{"), -len(p)))
        self._patterns = [(re.compile("^" + re.sub(r"\\{[^/]+?\\}", "[^/]+", re.escape(p)) + "$"), p) for p in ordered]

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - one instance per app, kept for its lifetime
    def match(self, path: str) -> str:
        for pattern, template in self._patterns or ():
            if pattern.match(path):
                return template
        return UNMATCHED

    def of(self, scope: dict[str, Any]) -> str:
        if self._patterns is None:
            app = scope.get("app")
            if app is None or not hasattr(app, "openapi"):
                return UNMATCHED
            try:
                self.build(app)
            except Exception:  # metrics must never break a request: count it unmatched, try again next time
                log.warning("cannot list the route templates for the request metrics", exc_info=True)
                return UNMATCHED
        return self.match(scope.get("path", ""))


TraceStart = Callable[[Mapping[str, Any]], Any]
TraceEnd = Callable[[Any, str, int], None]


class RequestMiddleware:
    """Pure ASGI middleware: the request id (header, log context), the request metrics, and the request's
    span when the application gives its tracing hooks (``trace`` answers the span, or None when off;
    ``trace_done`` ends it with the route and the status)."""

    def __init__(self, app: Any, trace: TraceStart | None = None, trace_done: TraceEnd | None = None) -> None:
        self.app = app
        self.routes = RouteTemplates()
        self.trace = trace if trace is not None and trace_done is not None else None
        self.trace_done = trace_done

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        offered = None
        for name, value in scope.get("headers") or ():
            if name == b"x-request-id":
                offered = value.decode("latin-1")
                break
        rid = requestid.new_id(offered)
        token = requestid.current.set(rid)
        status = 500
        header = (b"x-request-id", rid.encode())

        async def send_wrapper(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        start = time.perf_counter()
        IN_FLIGHT.inc()
        span = self.trace(scope) if self.trace is not None else None
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            IN_FLIGHT.dec()
            route = self.routes.of(scope)
            method = scope.get("method", "")
            _REQUESTS(route, method, str(status)).inc()
            _LATENCY(route, method).observe(time.perf_counter() - start)
            if span is not None and self.trace_done is not None:
                self.trace_done(span, route, status)
            requestid.current.reset(token)
