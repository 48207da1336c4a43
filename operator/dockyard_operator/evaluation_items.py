"""The checklist items an evaluation run computes (pure; docs/promotion.md, "The checklist"): the Testing
items (Diagnostics pass, Key flows tested, Edge cases tested, Error handling tested) and the Configuration
item "Agents tested", from the newest run of the version active in the environment (its summary in the
version's ``status.evaluations``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dockyard_core.evaluations import latest

ITEMS: dict[str, str] = {
    "Key flows tested": "keyFlow",
    "Edge cases tested": "edgeCase",
    "Error handling tested": "errorHandling",
}
"""Each Testing item and the case category it counts."""
RUN_HOW = "run the suite: dockyard eval run, POST .../environments/{env}/evaluations or the console's Evaluations tab"


def _agent_tools(content: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    agents = [str(a.get("name")) for a in content.get("agents") or []]
    tools = sorted(
        {str(t) for a in content.get("agents") or [] for t in a.get("tools") or []}
        | {str(t) for a in content.get("agents") or [] for t in a.get("mcpTools") or []}
    )
    return agents, tools


def _reached(tool: str, reached: set[str]) -> bool:
    return tool in reached or any(r.startswith(tool + "/") for r in reached)


def evaluation_items(
    content: Mapping[str, Any], summaries: Sequence[Mapping[str, Any]], environment: str, version: str
) -> dict[str, tuple[str, str]]:
    """item -> (state, detail) for "Agents tested" and the four Testing items."""
    suite = content.get("evaluations") or {}
    if not suite.get("cases"):
        why = f"version {version} has no evaluation suite (spec.evaluations): add cases with a category to compute it"
        return {item: ("NotDone", why) for item in ("Agents tested", "Diagnostics pass", *ITEMS)}
    run = latest(summaries, environment)
    if run is None:
        why = f"no evaluation run of version {version} in {environment} yet ({RUN_HOW})"
        return {item: ("NotDone", why) for item in ("Agents tested", "Diagnostics pass", *ITEMS)}
    rid = f"run {run.get('run')}"
    out: dict[str, tuple[str, str]] = {}
    counts = {c.get("category"): c for c in run.get("categories") or []}
    failures = run.get("failures") or []
    for item, category in ITEMS.items():
        c = counts.get(category)
        if not c or not c.get("total"):
            out[item] = ("NotDone", f"{rid}: the suite has no {category} case (set category: {category})")
            continue
        failed = [f["case"] for f in failures if f.get("category") == category]
        detail = f"{rid}: {c.get('passed', 0)}/{c['total']} {category} case(s) passed"
        if c.get("passed") == c["total"]:
            out[item] = ("Done", detail)
        else:
            out[item] = ("NotDone", detail + (f"; failed: {', '.join(failed[:10])}" if failed else ""))
    agents, tools = _agent_tools(content)
    reached_agents = set(run.get("agentsReached") or [])
    reached_tools = set(run.get("toolsReached") or [])
    missing_agents = [a for a in agents if a not in reached_agents]
    missing_tools = [t for t in tools if not _reached(t, reached_tools)]
    broken = [str(f["case"]) for f in failures if str(f.get("reason") or "").startswith("the turn failed")]
    problems = []
    if missing_agents:
        problems.append(f"no case answered by agent(s) {', '.join(missing_agents)}")
    if missing_tools:
        problems.append(f"no case called tool(s) {', '.join(missing_tools[:10])}")
    if broken:  # an error a case expects (expect.noError: false) passes and is no failure
        problems.append(f"case(s) {', '.join(broken[:10])} ended in an unexpected error")
    if problems:
        out["Diagnostics pass"] = ("NotDone", f"{rid}: " + "; ".join(problems))
    else:
        out["Diagnostics pass"] = (
            "Done",
            f"{rid}: every agent's model answered ({len(agents)} agent(s)) and every tool was called ({len(tools)})",
        )
    if missing_agents:
        out["Agents tested"] = ("NotDone", f"{rid}: no case reached agent(s) {', '.join(missing_agents)}")
    elif run.get("passed") != run.get("total"):
        shown = ", ".join(f["case"] for f in failures[:10])
        out["Agents tested"] = (
            "NotDone",
            f"{rid}: {run.get('passed')}/{run.get('total')} cases passed (failed: {shown})",
        )
    else:
        out["Agents tested"] = (
            "Done",
            f"{rid}: all {run.get('total')} cases passed, reaching all {len(agents)} agent(s)",
        )
    return out


def evaluation_run_at(summaries: Sequence[Mapping[str, Any]], environment: str) -> str:
    """The run behind a deployment to ``environment``: the version's newest run there (empty: none)."""
    run = latest(summaries, environment)
    return str(run.get("run") or "") if run is not None else ""
