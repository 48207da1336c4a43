"""Pure view models of the console: what a page shows, computed from the API's views (no I/O here)."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from pydantic import ValidationError

from dockyard_core.resources.v1alpha1.common import DNS_LABEL_MAX_LENGTH, DNS_LABEL_PATTERN

FORM_FIELDS = (
    "version",
    "name",
    "description",
    "agents",
    "toolVersions",
    "mcpServers",
    "appVersion",
    "confirm",
    "key",
    "token",
)


@dataclass
class FormErrors:
    """Errors in words, each next to the form field that caused it; ``general`` for the rest."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    general: list[str] = field(default_factory=list)

    def add(self, where: str | None, message: str) -> None:
        if where:
            self.fields.setdefault(where, []).append(message)
        else:
            self.general.append(message)

    def __bool__(self) -> bool:
        return bool(self.fields or self.general)

    def of(self, name: str) -> list[str]:
        return self.fields.get(name, [])


def field_of(path: str) -> str | None:
    """The form field a validation or admission error's field path names (``spec.toolVersions[0].name``,
    ``body.version``, ``toolVersions``...), or None when it names none of them."""
    parts = [p for p in re.split(r"[.\[\]]+", path) if p and not p.isdigit() and p not in ("spec", "body")]
    if not parts:
        return None
    head = parts[0]
    aliases = {"displayName": "name", "tool_versions": "toolVersions", "app_version": "appVersion"}
    head = aliases.get(head, head)
    return head if head in FORM_FIELDS else None


def errors_from_validation(exc: ValidationError) -> FormErrors:
    errors = FormErrors()
    for err in exc.errors():
        path = ".".join(str(p) for p in err.get("loc", ()))
        message = str(err.get("msg", "is not valid")).removeprefix("Value error, ")
        errors.add(field_of(path), message)
    return errors


def errors_from_api(message: str, details: Any) -> FormErrors:
    """An API error: its causes next to their fields (on top when they name none); the message itself on
    top when no cause names a field."""
    errors = FormErrors()
    unplaced: list[str] = []
    for cause in details if isinstance(details, list) else []:
        if not isinstance(cause, dict):
            continue
        where = field_of(str(cause.get("field", "")))
        text = str(cause.get("message") or message)
        if where:
            errors.add(where, text)
        else:
            unplaced.append(f"{cause.get('field')}: {text}" if cause.get("field") else text)
    if errors:
        errors.general += unplaced
        return errors
    _, sep, rest = message.partition("is not valid: ")
    if sep:  # the admission webhook's "... the version is not valid: <field>: problem; <field>: problem"
        for problem in rest.split("; "):
            errors.add(field_of(problem.split(": ", 1)[0]) if problem.startswith("spec.") else None, problem)
    else:
        errors.add(None, message)
    return errors


def environment_rows(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The environment list: draft first, then the created ones by name."""
    return sorted(items, key=lambda e: (e.get("name") != "draft", e.get("name") or ""))


def health(env: dict[str, Any]) -> dict[str, str]:
    """A word and a tone for an environment's phase, with the Ready condition's reason when not Active."""
    if env.get("deletingSince"):
        return {"phase": "Deleting", "tone": "busy", "reason": "endpoints deactivated; resources being released"}
    phase = env.get("phase") or "Pending"
    tone = {"Active": "ok", "Failed": "bad", "Deploying": "busy", "Pending": "busy"}.get(phase, "busy")
    reason = ""
    for cond in env.get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") != "True":
            reason = cond.get("message") or cond.get("reason") or ""
    return {"phase": phase, "tone": tone, "reason": reason}


def dock_status(jobs: list[dict[str, Any] | None]) -> dict[str, Any]:
    """One dock status for several jobs (an environment's tool and model deployments): FAILED if any failed,
    IN_PROGRESS if any runs, SUCCESS when all succeeded; the reasons of the ones not SUCCESS."""
    present = [j for j in jobs if j]
    if not present:
        return {"status": None, "reasons": []}
    statuses = {j.get("status") for j in present}
    status = "FAILED" if "FAILED" in statuses else "IN_PROGRESS" if "IN_PROGRESS" in statuses else "SUCCESS"
    reasons = [j.get("message") or j.get("reason") or "" for j in present if j.get("status") != "SUCCESS"]
    return {"status": status, "reasons": [r for r in reasons if r]}


def in_progress(env: dict[str, Any]) -> bool:
    """Whether the page should keep polling: a deployment is under way."""
    return (env.get("phase") or "Pending") in ("Pending", "Deploying") or (
        env.get("activeVersion") not in (None, env.get("appVersion"))
    )


def history_rows(env: dict[str, Any]) -> list[dict[str, Any]]:
    """The history table (Version, Deployed, By, Status) and whether each row can be rolled back to."""
    active = env.get("activeVersion") or env.get("appVersion")
    rows = []
    for entry in env.get("history") or []:
        status = entry.get("status")
        rows.append(
            {
                "version": entry.get("version"),
                "deployedAt": entry.get("deployedAt"),
                "deployedBy": entry.get("deployedBy") or "",
                "status": status,
                "action": entry.get("action") or "Deploy",
                "healthy": entry.get("healthy"),
                "weight": entry.get("weight"),
                "outcome": entry.get("outcome"),
                "reason": entry.get("reason") or "",
                "evaluationRun": entry.get("evaluationRun") or "",
                "canRollback": status == "Previous"
                and entry.get("action") != "Canary"  # a canary is no deployment to go back to
                and entry.get("healthy") is not False
                and entry.get("version") not in (active, env.get("appVersion")),
            }
        )
    return rows


def checklist_groups(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The checklist's four categories in the order of docs/apps-environments.md ('Pre-production
    checklist'), each item with whether Dockyard computed it."""
    order = ["Configuration", "Testing", "Security", "Monitoring"]
    groups: dict[str, list[dict[str, Any]]] = {c: [] for c in order}
    for item in items:
        state = item.get("state")
        groups.setdefault(item.get("category") or "Other", []).append({**item, "computed": state != "Manual"})
    return [{"category": c, "items": groups[c]} for c in groups]


def human_size(size: int | None) -> str:
    if size is None:
        return "—"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def next_version(existing: list[str]) -> str:
    """A suggestion for the next version number: the highest minor plus one (1.0.0 for the first)."""
    best: tuple[int, int, int] | None = None
    for v in existing:
        try:
            major, minor, patch = (int(p) for p in v.split("."))
        except ValueError:
            continue
        best = max(best, (major, minor, patch)) if best else (major, minor, patch)
    return "1.0.0" if best is None else f"{best[0]}.{best[1] + 1}.0"


def usage_chart(days: list[dict[str, Any]], width: int = 600, height: int = 160) -> str:
    """An inline SVG of requests (bars) and tokens (line) per day, with a title and a text alternative."""
    pad_l, pad_b, pad_t = 36, 22, 10
    inner_w, inner_h = width - pad_l - 8, height - pad_b - pad_t
    n = max(len(days), 1)
    max_req = max([d.get("requests", 0) for d in days] + [1])
    max_tok = max([d.get("tokensIn", 0) + d.get("tokensOut", 0) for d in days] + [1])
    step = inner_w / n
    bars, points = [], []
    for i, d in enumerate(days):
        req = d.get("requests", 0)
        tok = d.get("tokensIn", 0) + d.get("tokensOut", 0)
        h = inner_h * req / max_req
        x = pad_l + i * step
        bars.append(
            f'<rect class="bar" x="{x + step * 0.15:.1f}" y="{pad_t + inner_h - h:.1f}" width="{step * 0.7:.1f}" '
            f'height="{h:.1f}"><title>{html.escape(str(d.get("day")))}: {req} requests, {tok} tokens</title></rect>'
        )
        points.append(f"{x + step / 2:.1f},{pad_t + inner_h - inner_h * tok / max_tok:.1f}")
    first = html.escape(str(days[0]["day"])) if days else ""
    last = html.escape(str(days[-1]["day"])) if days else ""
    total_req = sum(d.get("requests", 0) for d in days)
    total_tok = sum(d.get("tokensIn", 0) + d.get("tokensOut", 0) for d in days)
    desc = f"{total_req} requests and {total_tok} tokens from {first} to {last}"
    line = f'<polyline class="line" fill="none" points="{" ".join(points)}"/>' if points else ""
    return (
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-labelledby="chart-title chart-desc">'
        f'<title id="chart-title">Requests (bars) and tokens (line) per day</title><desc id="chart-desc">{desc}</desc>'
        f'<line class="axis" x1="{pad_l}" y1="{pad_t + inner_h}" x2="{width - 8}" y2="{pad_t + inner_h}"/>'
        f'<text x="{pad_l - 4}" y="{pad_t + 8}" text-anchor="end">{max_req}</text>'
        f'<text x="{pad_l - 4}" y="{pad_t + inner_h}" text-anchor="end">0</text>'
        f"{''.join(bars)}{line}"
        f'<text x="{pad_l}" y="{height - 4}">{first}</text>'
        f'<text x="{width - 8}" y="{height - 4}" text-anchor="end">{last}</text></svg>'
    )


_DNS_LABEL = re.compile(DNS_LABEL_PATTERN)


def is_namespace(name: str) -> bool:
    """Whether ``name`` is a Kubernetes namespace name (a DNS label)."""
    return len(name) <= DNS_LABEL_MAX_LENGTH and _DNS_LABEL.fullmatch(name) is not None


def dense_days(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every UTC day of the usage report's period, days without calls as zeros (the report lists only days
    with usage), so the chart's time axis is even."""
    first, last = date.fromisoformat(report["from"]), date.fromisoformat(report["to"])
    known = {d["day"]: d for d in report.get("days") or []}
    zero = {"requests": 0, "errors": 0, "rateLimited": 0, "tokensIn": 0, "tokensOut": 0}
    days = []
    day = first
    while day <= last:
        days.append(known.get(day.isoformat(), {"day": day.isoformat(), **zero}))
        day += timedelta(days=1)
    return days
