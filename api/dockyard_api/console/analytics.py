"""The environment's Analytics tab (docs/console.md): per app version and UTC day, turns, errors, users,
tokens, latency percentiles and tool calls, from the analytics service (GET .../analytics), with an inline
SVG chart of each version's turns and errors per day."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta
from typing import Any

from dockyard_api.console.common import Ctx
from dockyard_core.errors import DockyardError

PERIODS = (7, 14, 30, 90)
"""The periods the tab offers, in days (default 14)."""


async def analytics_values(ctx: Ctx, env: dict[str, Any]) -> dict[str, Any]:
    """The tab's values: the analytics of the chosen period (``?days=``) and version (``?version=``)."""
    asked = ctx.request.query_params
    days = int(asked["days"]) if asked.get("days", "").isdigit() and int(asked["days"]) in PERIODS else 14
    version = asked.get("version") or None
    until = datetime.now(UTC).date()
    values: dict[str, Any] = {"periods": PERIODS, "days": days, "version": version or ""}
    try:
        found = await ctx.services.analytics.environment_analytics(
            ctx.namespace, env["objectName"], until - timedelta(days=days - 1), until, version
        )
    except DockyardError as exc:
        return {**values, "analytics": None, "analyticsError": exc.message, "charts": {}}
    shown = found.wire()
    charts = {v["version"]: chart(v["version"], v["days"]) for v in shown["versions"]}
    return {**values, "analytics": shown, "analyticsError": None, "charts": charts}


def chart(version: str, days: list[dict[str, Any]], width: int = 600, height: int = 150) -> str:
    """An inline SVG: answered turns (bars) and errors (red bars on top) per day, with a text alternative."""
    pad_l, pad_b, pad_t = 36, 22, 10
    inner_w, inner_h = width - pad_l - 8, height - pad_b - pad_t
    top = max([d["turns"] + d["errors"] for d in days] + [1])
    step = inner_w / max(len(days), 1)
    bars = []
    for i, d in enumerate(days):
        x = pad_l + i * step + step * 0.15
        h_ok, h_err = inner_h * d["turns"] / top, inner_h * d["errors"] / top
        tip = html.escape(f"{d['day']}: {d['turns']} turns, {d['errors']} errors")
        base = pad_t + inner_h
        bars.append(f'<rect class="bar" x="{x:.1f}" y="{base - h_ok:.1f}" width="{step * 0.7:.1f}" height="{h_ok:.1f}">'
                    f"<title>{tip}</title></rect>")  # fmt: skip
        if d["errors"]:
            bars.append(f'<rect class="bar-bad" x="{x:.1f}" y="{base - h_ok - h_err:.1f}" width="{step * 0.7:.1f}" '
                        f'height="{h_err:.1f}"><title>{tip}</title></rect>')  # fmt: skip
    label = html.escape(version)
    first, last = (html.escape(days[0]["day"]), html.escape(days[-1]["day"])) if days else ("", "")
    turns, errors = sum(d["turns"] for d in days), sum(d["errors"] for d in days)
    ident = "chart-" + "".join(c if c.isalnum() else "-" for c in version)
    return (
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-labelledby="{ident}-t {ident}-d">'
        f'<title id="{ident}-t">Turns (bars) and errors (red) per day of version {label}</title>'
        f'<desc id="{ident}-d">{turns} turns and {errors} errors from {first} to {last}</desc>'
        f'<line class="axis" x1="{pad_l}" y1="{pad_t + inner_h}" x2="{width - 8}" y2="{pad_t + inner_h}"/>'
        f'<text x="{pad_l - 4}" y="{pad_t + 8}" text-anchor="end">{top}</text>'
        f'<text x="{pad_l - 4}" y="{pad_t + inner_h}" text-anchor="end">0</text>{"".join(bars)}'
        f'<text x="{pad_l}" y="{height - 4}">{first}</text>'
        f'<text x="{width - 8}" y="{height - 4}" text-anchor="end">{last}</text></svg>'
    )
