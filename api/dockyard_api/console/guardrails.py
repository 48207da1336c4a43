"""What the console shows of guardrails and PII protection (docs/console.md): a version's policies in words,
an environment's PII settings, and the interventions the management API lists. Read from the services'
answers as the API answers them (camelCase dicts); never a value a policy matched (the interventions
hold none)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dockyard_core.pii import DEFAULT_ENTITIES, DEFAULT_PHONE_REGIONS

TYPES = {
    "deniedTerms": "Denied terms",
    "deniedTopics": "Denied topics",
    "pattern": "Pattern",
    "maxLength": "Length limit",
    "outputSchema": "Output schema",
    "promptInjection": "Prompt-injection screen",
    "guardModel": "Guard model",
}
STAGES = {"input": "input", "output": "output", "toolArguments": "tool arguments", "toolResults": "tool results"}
REDACT_WHERE = (
    ("storage", True, "before storage (conversations, usage, audit, logs)"),
    ("model", False, "before the model"),
    ("tools", False, "in tool calls"),
    ("answer", False, "in the answer"),
)
"""spec.pii.redact's members: their defaults and what they mean, in words."""
SHOWN = 8


def _some(items: Sequence[Any]) -> str:
    more = len(items) - SHOWN
    return ", ".join(str(i) for i in items[:SHOWN]) + (f" and {more} more" if more > 0 else "")


def _checks(policy: Mapping[str, Any]) -> str:
    """What the policy looks for, in words (its own configuration: terms, patterns, ...)."""
    kind = policy.get("type")
    if kind == "deniedTerms":
        return f"terms: {_some(policy.get('terms') or [])}"
    if kind == "deniedTopics":
        return f"topics: {_some([t.get('name') for t in policy.get('topics') or []])}"
    if kind == "pattern":
        return f"patterns: {_some(policy.get('patterns') or [])}"
    if kind == "maxLength":
        return f"at most {policy.get('maxChars')} characters"
    if kind == "outputSchema":
        schema = policy.get("schema") or {}
        required = schema.get("required") or []
        return "a JSON document of its schema" + (f" (required: {_some(required)})" if required else "")
    if kind == "promptInjection":
        return "instructions smuggled into the text (Dockyard's screen)"
    if kind == "guardModel":
        return f"asks model {policy.get('model')}"
    return ""


def policy_rows(guardrails: Mapping[str, Any] | None) -> list[dict[str, str]]:
    """One row per policy, in the order they run: name, type, stages, action, what it checks, its message."""
    rows = []
    for p in (guardrails or {}).get("policies") or []:
        stages = p.get("appliesTo") or ["input", "output"]
        rows.append(
            {
                "name": str(p.get("name")),
                "type": TYPES.get(str(p.get("type")), str(p.get("type"))),
                "stages": ", ".join(STAGES.get(s, s) for s in stages),
                "action": str(p.get("action") or "block"),
                "checks": _checks(p),
                "message": str(p.get("message") or ""),
            }
        )
    return rows


def pii_view(pii: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An environment's spec.pii in words (None: not configured), defaults spelled out."""
    if pii is None:
        return None
    entities = pii.get("entities")
    redact = pii.get("redact") or {}
    return {
        "entities": ", ".join(entities) if entities is not None else ", ".join(DEFAULT_ENTITIES) + " (the defaults)",
        "phoneRegions": ", ".join(pii.get("phoneRegions") or DEFAULT_PHONE_REGIONS),
        "customPatterns": [
            {"name": c.get("name"), "pattern": c.get("pattern")} for c in pii.get("customPatterns") or []
        ],
        "redacted": [words for name, default, words in REDACT_WHERE if redact.get(name, default)],
        "notRedacted": [words for name, default, words in REDACT_WHERE if not redact.get(name, default)],
    }


def intervention_rows(items: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The interventions as the table shows them, newest first (as listed)."""
    rows = []
    for i in items:
        stage = STAGES.get(str(i.get("stage")), str(i.get("stage")))
        rows.append(
            {
                "at": _when(i.get("at")),
                "policy": str(i.get("policy")),
                "stage": f"{stage} ({i['tool']})" if i.get("tool") else stage,
                "action": str(i.get("action")),
                "reason": str(i.get("reason")),
                "session": str(i.get("sessionId")),
                "version": str(i.get("version")),
            }
        )
    return rows


def _when(at: Any) -> str:
    if isinstance(at, datetime):
        return at.strftime("%Y-%m-%d %H:%M:%S UTC")
    text = str(at or "")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M:%S UTC")
    except ValueError:
        return text
