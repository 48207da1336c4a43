"""A real tracing backend for the tests: Jaeger (v2, ``cmd/jaeger``, built on the OpenTelemetry Collector) from its
Go module pinned in ``tests/support/jaeger/go.mod`` (a ``tool`` directive), built with ``go build`` on first use into
``~/.cache/dockyard/jaeger-<version>-<hash of go.mod and go.sum>/``, and run on loopback ports with in-memory
storage: OTLP/HTTP in, Jaeger's query API out (``/api/traces/{traceId}``).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.gobuild import cache_home, go_build
from tests.support.runners import free_port

SOURCE = Path(__file__).resolve().parent / "jaeger"
PACKAGE = "github.com/jaegertracing/jaeger/cmd/jaeger"

CONFIG = """
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


def version() -> str:
    found = re.search(r"github.com/jaegertracing/jaeger (v\S+)", (SOURCE / "go.mod").read_text())
    assert found, "tests/support/jaeger/go.mod requires no version of Jaeger"
    return found.group(1)


def jaeger_binary() -> Path:
    """Jaeger's binary, built once per pinned version (``DOCKYARD_JAEGER`` overrides)."""
    given = os.environ.get("DOCKYARD_JAEGER")
    if given:
        return Path(given)
    digest = hashlib.sha256((SOURCE / "go.mod").read_bytes() + (SOURCE / "go.sum").read_bytes()).hexdigest()[:12]
    target = cache_home() / f"jaeger-{version()}-{digest}" / "jaeger"
    if not target.exists():
        go_build(SOURCE, [PACKAGE], target, what="the tracing backend of the tests (Jaeger)")
    return target


@dataclass
class Jaeger:
    """One Jaeger on loopback ports that stay the same across :meth:`stop` and :meth:`start`."""

    logs: Path
    otlp_port: int = field(default_factory=free_port)
    query_port: int = field(default_factory=free_port)
    query_grpc_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def otlp_endpoint(self) -> str:
        """What ``OTEL_EXPORTER_OTLP_ENDPOINT`` names (the exporter adds ``/v1/traces``)."""
        return f"http://127.0.0.1:{self.otlp_port}"

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.query_port}"

    def start(self) -> None:
        config = self.logs / f"jaeger-{self.otlp_port}.yaml"
        config.write_text(CONFIG.format(query=self.query_port, query_grpc=self.query_grpc_port, otlp=self.otlp_port))
        log = self.logs / f"jaeger-{self.otlp_port}.log"
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [str(jaeger_binary()), "--config", f"file:{config}"], stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise AssertionError(f"Jaeger exited {self.process.returncode}: {log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.query_url}/api/services", timeout=1).status_code == 200:
                    with httpx.Client(timeout=1) as http:  # the OTLP receiver too (it starts on its own)
                        if http.post(f"{self.otlp_endpoint}/v1/traces", content=b"").status_code < 500:
                            return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"Jaeger did not answer within 60s: {log.read_text()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def services(self) -> list[str]:
        answer = httpx.get(f"{self.query_url}/api/services", timeout=10)
        answer.raise_for_status()
        return list(answer.json().get("data") or [])

    def trace(self, trace_id: str) -> Trace | None:
        """The trace as Jaeger's query API answers it (None while it has none of its spans)."""
        answer = httpx.get(f"{self.query_url}/api/traces/{trace_id}", timeout=10)
        if answer.status_code == 404:
            return None
        answer.raise_for_status()
        data = answer.json().get("data") or []
        return Trace(data[0]) if data else None

    def traces(self, service: str, operation: str | None = None, limit: int = 50) -> list[Trace]:
        params: dict[str, Any] = {"service": service, "limit": limit, "lookback": "1h"}
        if operation:
            params["operation"] = operation
        answer = httpx.get(f"{self.query_url}/api/traces", params=params, timeout=10)
        answer.raise_for_status()
        return [Trace(t) for t in answer.json().get("data") or []]


@dataclass(frozen=True)
class Span:
    span_id: str
    name: str
    parent_id: str | None
    service: str
    tags: dict[str, Any]
    kind: str


class Trace:
    """A trace of Jaeger's query API (its v1 JSON): spans by id, with their parents and tags."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.trace_id: str = raw["traceID"]
        processes = {pid: p["serviceName"] for pid, p in (raw.get("processes") or {}).items()}
        self.spans: dict[str, Span] = {}
        for s in raw.get("spans") or []:
            parent = next((r["spanID"] for r in s.get("references") or [] if r.get("refType") == "CHILD_OF"), None)
            tags = {t["key"]: t["value"] for t in s.get("tags") or []}
            self.spans[s["spanID"]] = Span(
                s["spanID"],
                s["operationName"],
                parent,
                processes.get(s["processID"], ""),
                tags,
                str(tags.get("span.kind", "")),
            )

    def named(self, prefix: str) -> list[Span]:
        return [s for s in self.spans.values() if s.name.startswith(prefix)]

    def one(self, prefix: str) -> Span:
        found = self.named(prefix)
        assert len(found) == 1, (prefix, sorted(s.name for s in self.spans.values()))
        return found[0]

    def children(self, span: Span) -> list[Span]:
        return [s for s in self.spans.values() if s.parent_id == span.span_id]

    def one_child(self, span: Span, prefix: str) -> Span:
        found = [s for s in self.children(span) if s.name.startswith(prefix)]
        assert len(found) == 1, (span.name, prefix, sorted(s.name for s in self.children(span)))
        return found[0]

    def text(self) -> str:
        """Everything the backend holds of the trace, as one text (to look for what must not be there)."""
        import json

        return json.dumps(self.raw)
