"""The checklist's items of what protects users and their data, computed from the active version and the
Environment (operator/dockyard_operator/safeguards.py): "Guardrails enabled" (policies that block or
redact on input and output), "PII protection configured" (spec.pii with entities and storage redaction),
"Sensitive data protected" (PII storage redaction and credentials only through Secrets); each detail says
why, or what is missing."""

from __future__ import annotations

from typing import Any

from dockyard_core.resources.v1alpha1 import AppVersion
from dockyard_operator import environments as envs

TERMS = {"name": "no-competitors", "type": "deniedTerms", "terms": ["acme"]}
CARDS = {"name": "cards", "type": "pattern", "patterns": [r"\d{16}"], "action": "redact", "appliesTo": ["output"]}
WATCH = {"name": "watch", "type": "promptInjection", "action": "record"}
PII = {"entities": ["EMAIL_ADDRESS", "CREDIT_CARD"], "redact": {"storage": True, "answer": True}}


def items(
    content: dict[str, Any] | None = None, pii: dict[str, Any] | None = None, *, found: bool = True
) -> dict[str, tuple[str, str]]:
    made = envs.checklist(content=content, tool_jobs={}, key_count=1, version_found=found, pii=pii)
    return {i.item: (i.state, i.detail) for i in made}


def guardrails(*policies: dict[str, Any]) -> dict[str, Any]:
    return {"guardrails": {"policies": list(policies)}}


def test_guardrails_are_enabled_by_policies_that_block_or_redact_on_input_and_output() -> None:
    # the default appliesTo (input and output) and action (block): one policy guards both
    assert items(guardrails(TERMS))["Guardrails enabled"] == (
        "Done", "1 policy; input: no-competitors (block); output: no-competitors (block)",
    )  # fmt: skip
    state, detail = items(guardrails({**TERMS, "appliesTo": ["input"]}, CARDS, WATCH))["Guardrails enabled"]
    assert (state, detail) == ("Done", "3 policies; input: no-competitors (block); output: cards (redact)")
    # not enough: one stage unguarded, only recording, none at all, no version
    state, detail = items(guardrails({**TERMS, "appliesTo": ["input", "toolArguments"]}, WATCH))["Guardrails enabled"]
    assert state == "NotDone"
    assert detail.startswith(
        "no policy blocks or redacts the output; input: no-competitors (block); record only: watch"
    )
    assert detail.endswith(f"({envs.safeguards.GUARDRAILS_HOW})")
    state, detail = items(guardrails(WATCH))["Guardrails enabled"]
    assert (state, detail.split(" (add")[0]) == (
        "NotDone", "no policy blocks or redacts the input or the output; record only: watch",
    )  # fmt: skip
    assert items({})["Guardrails enabled"] == (
        "NotDone",
        f"the version has no guardrails: {envs.safeguards.GUARDRAILS_HOW}",
    )
    assert items(guardrails())["Guardrails enabled"][0] == "NotDone"
    assert items(None, found=False)["Guardrails enabled"][1].startswith("no active version")


def test_the_items_read_the_version_and_environment_as_their_resources_store_them() -> None:
    """The checklist reads the stored (camelCase) spec; the resource models accept these very shapes."""
    version = AppVersion.model_validate(
        {
            "metadata": {"name": "bot-1.0.0"},
            "spec": {"appRef": "bot", "displayName": "Bot", "version": "1.0.0", **guardrails(TERMS, CARDS)},
        }
    )
    content = version.model_dump(by_alias=True, exclude_none=True)["spec"]
    assert items(content)["Guardrails enabled"][0] == "Done"


def test_pii_protection_is_configured_by_entities_redacted_before_storage() -> None:
    assert items({}, PII)["PII protection configured"] == (
        "Done", "spec.pii recognises EMAIL_ADDRESS, CREDIT_CARD; redacts them in what is stored (conversations, "
        "usage, audit, logs), the answer",
    )  # fmt: skip
    # no entities named: the defaults; storage redaction is on unless turned off
    state, detail = items({}, {})["PII protection configured"]
    assert (state, detail.split(";")[0]) == (
        "Done",
        "spec.pii recognises EMAIL_ADDRESS, PHONE_NUMBER, CREDIT_CARD, IBAN_CODE, IP_ADDRESS (the defaults)",
    )
    custom = {"entities": [], "customPatterns": [{"name": "ORDER_ID", "pattern": "ORD-[0-9]{6}"}]}
    assert items({}, custom)["PII protection configured"][1].startswith("spec.pii recognises ORDER_ID;")
    state, detail = items({}, {**PII, "redact": {"storage": False, "model": True}})["PII protection configured"]
    assert (state, detail) == (
        "NotDone", "spec.pii recognises EMAIL_ADDRESS, CREDIT_CARD but does not redact them before storage (set "
        "redact.storage)",
    )  # fmt: skip
    assert items({}, {"entities": []})["PII protection configured"][0] == "NotDone"
    assert items({}, None)["PII protection configured"] == ("NotDone", f"no PII protection: {envs.safeguards.PII_HOW}")


def test_sensitive_data_is_protected_by_storage_redaction_and_credentials_in_secrets() -> None:
    secret = {"mcpServers": [{"name": "docs", "url": "https://x", "headersSecretRef": "docs-auth"}]}
    state, detail = items(secret, PII)["Sensitive data protected"]
    assert (state, detail) == (
        "Done", "personal data is redacted before it is stored (spec.pii) (what the model reads and what tools "
        "receive still hold it as typed); the 1 MCP server(s) get credentials only through Secrets",
    )  # fmt: skip
    everywhere = {**PII, "redact": {"storage": True, "model": True, "tools": True, "answer": True}}
    assert items({}, everywhere)["Sensitive data protected"] == (
        "Done", "personal data is redacted before it is stored (spec.pii)",
    )  # fmt: skip
    # stored as typed (no spec.pii, or storage redaction off), credentials inline: each named
    state, detail = items(secret, None)["Sensitive data protected"]
    assert (state, detail) == (
        "NotDone",
        f"personal data is stored as typed: no PII protection: {envs.safeguards.PII_HOW}",
    )
    leaky = {"mcpServers": [{"name": "docs", "url": "https://x", "headers": {"Authorization": "token"}}]}
    state, detail = items(leaky, PII)["Sensitive data protected"]
    assert (state, detail) == (
        "NotDone", "MCP servers with inline headers, readable by everyone who can read the version (put "
        "credentials in a Secret: headersSecretRef): docs",
    )  # fmt: skip
    state, detail = items(leaky, {**PII, "redact": {"storage": False}})["Sensitive data protected"]
    assert state == "NotDone"
    assert detail.startswith("personal data is stored as typed: spec.pii recognises")
    assert detail.endswith("headersSecretRef): docs")
