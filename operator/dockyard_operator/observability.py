"""The checklist's Monitoring items (docs/observability.md, "In the checklist"), from what Dockyard can see:

- "Analytics": turns and tokens of the active version recorded since it went live, from the usage summary the
  facade writes on the Environment's status (``status.usage.versions``);
- "Alerts": where Dockyard's alert rules are (the chart's PrometheusRule, or loaded elsewhere), and, when the
  operator is told the Prometheus that loads them (``prometheus_url``), whether that Prometheus has loaded
  them and sends alerts to an Alertmanager, read from its HTTP API (:class:`PrometheusProbe`);
- "Logging": the log format of the facade and the operator and where the cluster ships container logs, as
  configured (Dockyard writes to standard output; it cannot see a log agent).

The items are pure functions of :class:`MonitoringFacts`; the probe is the only I/O here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiohttp

log = logging.getLogger("dockyard.operator.observability")

RULE_GROUP_PREFIX = "dockyard."
"""The names of Dockyard's rule groups (charts/dockyard/files/alerts.yaml)."""
ELSEWHERE = "elsewhere"


@dataclass(frozen=True)
class PrometheusView:
    """What the Prometheus API answered (or why it did not)."""

    url: str
    error: str | None = None
    groups: tuple[str, ...] = ()
    """Dockyard's rule groups it has loaded."""
    rules: int = 0
    alertmanagers: tuple[str, ...] = ()
    """The Alertmanagers it sends alerts to."""
    firing: tuple[Mapping[str, str], ...] = ()
    """The labels of Dockyard's alerts firing now."""


@dataclass(frozen=True)
class MonitoringFacts:
    alert_rules: str = ""
    """Where the rules are: "PrometheusRule <namespace>/<name>" (the chart's), "elsewhere", or "" (nowhere)."""
    prometheus: PrometheusView | None = None
    """None: no Prometheus URL configured."""
    operator_log_format: str = "plain"
    facade_log_format: str = ""
    """"" when the operator is not told (a local run)."""
    log_shipping: str = ""


class PrometheusProbe:
    """Reads a Prometheus' loaded rules, Alertmanagers and firing alerts, at most once per ``ttl`` seconds
    (every environment's reconcile shares the answer)."""

    def __init__(self, url: str, *, ttl: float = 30.0, timeout: float = 3.0) -> None:
        self.url = url.rstrip("/")
        self.ttl = ttl
        self.timeout = timeout
        self._view: PrometheusView | None = None
        self._at = 0.0
        self._lock = asyncio.Lock()

    async def view(self) -> PrometheusView:
        async with self._lock:
            if self._view is None or time.monotonic() - self._at > self.ttl:
                self._view = await self._read()
                self._at = time.monotonic()
            return self._view

    async def _read(self) -> PrometheusView:
        try:
            timeout = aiohttp.ClientTimeout(total=self.timeout)
            async with aiohttp.ClientSession(timeout=timeout) as http:
                rules = await self._get(http, "/api/v1/rules?type=alert")
                managers = await self._get(http, "/api/v1/alertmanagers")
                alerts = await self._get(http, "/api/v1/alerts")
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            reason = str(exc) or type(exc).__name__
            log.info("Prometheus at %s not read: %s", self.url, reason)
            return PrometheusView(self.url, error=reason)
        groups = [g for g in rules.get("groups") or [] if str(g.get("name", "")).startswith(RULE_GROUP_PREFIX)]
        return PrometheusView(
            self.url,
            groups=tuple(sorted({str(g["name"]) for g in groups})),
            rules=sum(len(g.get("rules") or []) for g in groups),
            alertmanagers=tuple(str(a.get("url")) for a in managers.get("activeAlertmanagers") or []),
            firing=tuple(
                labels
                for a in alerts.get("alerts") or []
                if a.get("state") == "firing"
                and str((labels := a.get("labels") or {}).get("alertname", "")).startswith("Dockyard")
            ),
        )

    async def _get(self, http: aiohttp.ClientSession, path: str) -> dict[str, Any]:
        async with http.get(self.url + path) as resp:
            if resp.status != 200:
                raise ValueError(f"{path} answered {resp.status}")
            body = await resp.json()
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict):
            raise ValueError(f"{path} answered no data")
        return data


# --- the items -------------------------------------------------------------------------------------------


def analytics_item(
    usage: Mapping[str, Any] | None, version: str | None, live_since: datetime | None
) -> tuple[str, str]:
    """Done when answered calls with tokens of the active version were recorded on or after the day it went
    live; the detail counts them (``usage``: the Environment's ``status.usage``, which the facade writes)."""
    if not version:
        return "NotDone", "no active version: deploy one, then call it (turns and tokens are recorded per version)"
    if not usage:
        return "NotDone", (
            f"no usage recorded yet: call version {version} (web client, widget or API); the facade records each "
            "call and summarises it on the environment's status within a minute"
        )
    mine = next((v for v in usage.get("versions") or [] if v.get("version") == version), None)
    answered = int(mine.get("requests", 0)) - int(mine.get("errors", 0)) if mine else 0
    if mine is None or answered <= 0:
        return "NotDone", f"no answered call of version {version} recorded in the last 30 days: call it"
    tokens = int(mine.get("tokensIn", 0)) + int(mine.get("tokensOut", 0))
    last = str(mine.get("lastDay") or "")
    if live_since is not None and last and last < live_since.date().isoformat():
        return "NotDone", (
            f"no call of version {version} since it went live on {live_since.date().isoformat()} (the last on "
            f"{last}): call it"
        )
    if tokens == 0:
        return "NotDone", f"{answered} answered call(s) of version {version}, but no model tokens recorded"
    errors = int(mine.get("errors", 0))
    return "Done", (
        f"version {version}: {answered} answered call(s), {errors} error(s) and {tokens} tokens in the last 30 "
        f"days, the last on {last}; per day, users, latency and tools: the console's Analytics tab or "
        "GET .../environments/{environment}/analytics"
    )


def alerts_item(facts: MonitoringFacts, namespace: str, environment: str) -> tuple[str, str]:
    """Done when the Prometheus the operator is told about has loaded Dockyard's rules and sends alerts to an
    Alertmanager; Manual when the rules are installed but no Prometheus URL lets Dockyard look."""
    how = (
        "install the chart's PrometheusRule (metrics.prometheusRule.enabled) or load charts/dockyard/files/"
        "alerts.yaml into your Prometheus, and set metrics.alerting.prometheusUrl so Dockyard can check it"
    )
    prom = facts.prometheus
    if prom is None:
        if not facts.alert_rules:
            return "NotDone", "no alert rules installed: " + how
        where = "loaded into a Prometheus by you" if facts.alert_rules == ELSEWHERE else f"in {facts.alert_rules}"
        return "Manual", (
            f"the alert rules are {where}; Dockyard is not told which Prometheus loads them, so it cannot see "
            "whether they are loaded or where the alerts go: set metrics.alerting.prometheusUrl, or check by hand"
        )
    if prom.error is not None:
        return "NotDone", f"Prometheus at {prom.url} does not answer ({prom.error}): alerts cannot fire"
    if not prom.groups:
        return "NotDone", f"Prometheus at {prom.url} has not loaded Dockyard's alert rules (groups dockyard.*): " + how
    loaded = f"Prometheus at {prom.url} evaluates {prom.rules} Dockyard alert rules ({', '.join(prom.groups)})"
    if not prom.alertmanagers:
        return "NotDone", loaded + ", but sends alerts to no Alertmanager: configure alerting.alertmanagers"
    firing = sorted(
        {
            str(a.get("alertname"))
            for a in prom.firing
            if a.get("environment_namespace") == namespace and a.get("environment") == environment
        }
    )
    now = f"; firing now for this environment: {', '.join(firing)}" if firing else ""
    return "Done", f"{loaded} and sends them to {', '.join(prom.alertmanagers)}{now}"


def logging_item(facts: MonitoringFacts) -> tuple[str, str]:
    """Done when both processes write JSON lines and a log shipping destination is configured."""
    formats = {"operator": facts.operator_log_format, "facade": facts.facade_log_format or "unknown"}
    plain = [who for who, fmt in formats.items() if fmt != "json"]
    said = ", ".join(f"the {who} logs {fmt}" for who, fmt in formats.items())
    if plain:
        return "NotDone", (
            f"{said}: structured logs need JSON (chart: facade.settings.logFormat and operator.logFormat json; "
            "each line then has time, level, logger, message and request_id)"
        )
    if not facts.log_shipping:
        return "Manual", (
            f"{said} lines to standard output; Dockyard cannot see the agent that ships container logs: check "
            "that one collects them, or name it in logging.shippedTo"
        )
    return "Done", f"{said} lines to standard output, shipped by {facts.log_shipping} (as configured)"


@dataclass(frozen=True)
class Observed:
    """What the Monitoring items of one environment read."""

    facts: MonitoringFacts
    namespace: str
    environment: str
    version: str | None
    """The active version (None: none)."""
    live_since: datetime | None
    """When it went live (the history's Active entry)."""
    usage: Mapping[str, Any] | None
    """The Environment's status.usage."""


def monitoring_items(observed: Observed) -> dict[str, tuple[str, str]]:
    """The items "Analytics", "Alerts" and "Logging" (state, detail)."""
    return {
        "Analytics": analytics_item(observed.usage, observed.version, observed.live_since),
        "Alerts": alerts_item(observed.facts, observed.namespace, observed.environment),
        "Logging": logging_item(observed.facts),
    }


def operator_log_format(configured: str) -> str:
    """The operator's log format as its logging is set up (kopf's JSON formatter on the root logger's handlers,
    which ``--log-format json`` installs), else as configured."""
    for handler in logging.getLogger().handlers:
        if "json" in type(handler.formatter).__name__.lower():
            return "json"
    return configured


class MonitoringState:
    """The Environment reconcile's Prometheus probe (:meth:`Context.state`), made on first use."""

    def __init__(self) -> None:
        self.probe: PrometheusProbe | None = None

    def forget(self, uid: str) -> None:
        """Nothing is kept per object."""

    async def facts(self, settings: Any) -> MonitoringFacts:
        """The facts of ``settings`` (OperatorSettings): the configured ones, and Prometheus' answer (cached)."""
        view = None
        if settings.prometheus_url:
            if self.probe is None or self.probe.url != settings.prometheus_url.rstrip("/"):
                self.probe = PrometheusProbe(settings.prometheus_url)
            view = await self.probe.view()
        return MonitoringFacts(
            alert_rules=settings.alert_rules,
            prometheus=view,
            operator_log_format=operator_log_format(settings.log_format),
            facade_log_format=settings.facade_log_format,
            log_shipping=settings.log_shipping,
        )
