"""The checklist items of what protects an environment's users and their data (docs/apps-environments.md,
"Pre-production checklist"), computed from the active version and the Environment: "Guardrails enabled"
(the version's ``spec.guardrails``), "PII protection configured" (the Environment's ``spec.pii``) and
"Sensitive data protected" (both: PII redacted before storage, credentials only through Secrets). Each
answers (state, detail); the detail says why, or what is missing. Pure: no kopf, no API calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dockyard_core.pii import DEFAULT_ENTITIES


def names(found: Sequence[str], shown: int = 6) -> str:
    more = len(found) - shown
    return ", ".join(found[:shown]) + (f" and {more} more" if more > 0 else "")


GUARDRAILS_HOW = (
    "add spec.guardrails.policies to the version that block or redact on input and on output (docs/guardrails.md)"
)
PII_HOW = "set the environment's spec.pii (entities, redact.storage: true; docs/guardrails.md)"


def guardrails_item(content: Mapping[str, Any], version_found: bool) -> tuple[str, str]:
    """The item "Guardrails enabled": Done when the active version has policies that block or redact both on
    the user's input and on the agent's output (record-only policies act on nothing); the detail names them,
    or says which stage is unguarded."""
    if not version_found:
        return "NotDone", "no active version: deploy a version with guardrails (" + GUARDRAILS_HOW + ")"
    policies = ((content.get("guardrails") or {}).get("policies")) or []
    if not policies:
        return "NotDone", "the version has no guardrails: " + GUARDRAILS_HOW
    acting: dict[str, list[str]] = {"input": [], "output": []}
    recording: list[str] = []
    for p in policies:
        action = p.get("action") or "block"
        if action == "record":
            recording.append(str(p.get("name")))
            continue
        for stage in p.get("appliesTo") or ("input", "output"):
            if stage in acting:
                acting[stage].append(f"{p.get('name')} ({action})")
    found = "; ".join(f"{stage}: {names(listed)}" for stage, listed in acting.items() if listed)
    missing = [stage for stage, listed in acting.items() if not listed]
    if not missing:
        return "Done", f"{len(policies)} polic{'y' if len(policies) == 1 else 'ies'}; {found}"
    parts = [f"no policy blocks or redacts the {' or the '.join(missing)}"]
    if found:
        parts.append(found)
    if recording:
        parts.append(f"record only: {names(recording)}")
    return "NotDone", "; ".join(parts) + " (" + GUARDRAILS_HOW + ")"


def _pii_entities(pii: Mapping[str, Any]) -> str:
    """The entities ``spec.pii`` recognises, in words ('' when none)."""
    entities = pii.get("entities")
    custom = [str(c.get("name")) for c in pii.get("customPatterns") or () if isinstance(c, Mapping)]
    named = [", ".join(DEFAULT_ENTITIES) + " (the defaults)"] if entities is None else [str(e) for e in entities]
    return names(named + custom, 8)


def pii_item(pii: Mapping[str, Any] | None) -> tuple[str, str]:
    """The item "PII protection configured": Done when the environment's spec.pii recognises some entities
    and redacts them before they are stored; the detail says where else it redacts, or what is missing."""
    if pii is None:
        return "NotDone", "no PII protection: " + PII_HOW
    entities = _pii_entities(pii)
    if not entities:
        return "NotDone", "spec.pii recognises no entities: name some in spec.pii.entities or customPatterns"
    where = _redacted_in(pii)
    if "storage" not in where:
        return "NotDone", f"spec.pii recognises {entities} but does not redact them before storage (set redact.storage)"
    return "Done", f"spec.pii recognises {entities}; redacts them in " + ", ".join(where.values())


REDACT_WHERE = (
    ("storage", True, "what is stored (conversations, usage, audit, logs)"),
    ("model", False, "what the model reads"),
    ("tools", False, "what tools receive"),
    ("answer", False, "the answer"),
)
"""spec.pii.redact's members: their default (as the runtime reads them) and where they redact, in words."""


def _redacted_in(pii: Mapping[str, Any]) -> dict[str, str]:
    redact = pii.get("redact") or {}
    return {name: words for name, default, words in REDACT_WHERE if redact.get(name, default)}


def sensitive_item(servers: Sequence[Mapping[str, Any]], pii: Mapping[str, Any] | None) -> tuple[str, str]:
    """The item "Sensitive data protected": Done when what users type is redacted before it is stored (the
    environment's PII protection with storage redaction) and the version hands credentials to its MCP servers
    only through Secrets (headersSecretRef: inline headers are readable by everyone who can read the version)."""
    problems: list[str] = []
    pii_state, pii_detail = pii_item(pii)
    if pii_state != "Done":
        problems.append("personal data is stored as typed: " + pii_detail)
    inline = sorted(str(s["name"]) for s in servers if s.get("headers"))
    if inline:
        problems.append(
            "MCP servers with inline headers, readable by everyone who can read the version (put credentials "
            "in a Secret: headersSecretRef): " + names(inline)
        )
    if problems:
        return "NotDone", "; ".join(problems)
    via = f"; the {len(servers)} MCP server(s) get credentials only through Secrets" if servers else ""
    unredacted = [words for name, _, words in REDACT_WHERE[1:] if name not in _redacted_in(pii or {})]
    seen = f" ({' and '.join(unredacted)} still hold it as typed)" if unredacted else ""
    return "Done", f"personal data is redacted before it is stored (spec.pii){seen}" + via
