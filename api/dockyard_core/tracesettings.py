"""What the standard ``OTEL_*`` variables ask of Dockyard's tracing (:mod:`dockyard_core.tracing`): the OTLP
endpoint and its exporter settings, and the resource. The variables and their defaults are those the
OpenTelemetry SDKs read; what Dockyard cannot do is refused naming the variable."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI instrumentations' switch for message text; Dockyard adds text only redacted (docs)."""


class TracingConfigError(ValueError):
    """The OTEL_* variables ask for something Dockyard cannot do (named in the message)."""


@dataclass(frozen=True)
class TraceSettings:
    endpoint: str
    """The OTLP/HTTP traces URL (…/v1/traces)."""
    capture_content: bool
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    gzip: bool = False
    ca_file: str | None = None
    client_cert: str | None = None
    client_key: str | None = None


def _variable(env: Mapping[str, str], name: str) -> str:
    """``OTEL_EXPORTER_OTLP_TRACES_<name>``, else ``OTEL_EXPORTER_OTLP_<name>``."""
    return (env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or env.get(f"OTEL_EXPORTER_OTLP_{name}") or "").strip()


def _pairs(raw: str, variable: str) -> dict[str, str]:
    """``key=value,key=value`` (values percent-encoded), as OTEL_EXPORTER_OTLP_HEADERS and
    OTEL_RESOURCE_ATTRIBUTES write them."""
    out: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise TracingConfigError(f"{variable}: {item.strip()!r} is not key=value")
        out[unquote(key.strip())] = unquote(value.strip())
    return out


def number(env: Mapping[str, str], name: str, default: float, raw: str | None = None) -> float:
    """A non-negative number variable (``raw``: its value read already), ``default`` when unset."""
    raw = env.get(name, "").strip() if raw is None else raw
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise TracingConfigError(f"{name}={raw!r} is not a number") from exc
    if value < 0:
        raise TracingConfigError(f"{name}={raw!r} is negative")
    return value


def settings_from_env(environ: Mapping[str, str] | None = None) -> TraceSettings | None:
    """What the OTEL_* variables ask for; None when tracing is off."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    exporters = [e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if e.strip()]
    if not exporters or exporters == ["none"]:
        return None
    if exporters != ["otlp"]:
        raise TracingConfigError(f"OTEL_TRACES_EXPORTER={','.join(exporters)}: Dockyard exports with otlp only")
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if not endpoint:
        base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        if not base:
            return None
        endpoint = base.rstrip("/") + "/v1/traces"
    protocol = _variable(env, "PROTOCOL") or "http/protobuf"
    if protocol != "http/protobuf":
        raise TracingConfigError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: Dockyard exports OTLP over HTTP (http/protobuf, port 4318)"
        )
    if not endpoint.startswith(("http://", "https://")):
        raise TracingConfigError(f"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT={endpoint!r} is not an http(s) URL")
    compression = _variable(env, "COMPRESSION").lower()
    if compression not in ("", "none", "gzip"):
        raise TracingConfigError(f"OTEL_EXPORTER_OTLP_COMPRESSION={compression}: Dockyard compresses with gzip only")
    timeout_ms = number(env, "OTEL_EXPORTER_OTLP_TIMEOUT", 10000, _variable(env, "TIMEOUT"))
    return TraceSettings(
        endpoint,
        env.get(CONTENT_VARIABLE, "").strip().lower() == "true",
        headers=_pairs(_variable(env, "HEADERS"), "OTEL_EXPORTER_OTLP_HEADERS"),
        timeout_s=max(0.001, timeout_ms / 1000),
        gzip=compression == "gzip",
        ca_file=_variable(env, "CERTIFICATE") or None,
        client_cert=_variable(env, "CLIENT_CERTIFICATE") or None,
        client_key=_variable(env, "CLIENT_KEY") or None,
    )


def resource(service: str, version: str, env: Mapping[str, str]) -> dict[str, Any]:
    """The resource attributes: the process's own, under ``OTEL_RESOURCE_ATTRIBUTES``, under
    ``OTEL_SERVICE_NAME``."""
    out: dict[str, Any] = {
        "service.name": service,
        "service.version": version,
        "telemetry.sdk.name": "dockyard",
        "telemetry.sdk.language": "python",
        "telemetry.sdk.version": version,
    }
    out.update(_pairs(env.get("OTEL_RESOURCE_ATTRIBUTES", ""), "OTEL_RESOURCE_ATTRIBUTES"))
    if env.get("OTEL_SERVICE_NAME", "").strip():
        out["service.name"] = env["OTEL_SERVICE_NAME"].strip()
    return out
