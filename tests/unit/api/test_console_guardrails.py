"""The console's guardrails views (api/dockyard_api/console/guardrails.py) and the templates that show them:
a version's policies (version and draft pages, the environment's Guardrails tab), the environment's PII
settings and its last interventions, never a matched value; the draft editor keeps the guardrails."""

from __future__ import annotations

from typing import Any

from dockyard_api.console import guardrails
from dockyard_api.console.apps import _draft_values
from dockyard_api.console.common import TEMPLATES
from dockyard_core.pii import DEFAULT_ENTITIES

GUARDRAILS = {
    "blockMessage": "Not here, sorry.",
    "policies": [
        {"name": "no-competitors", "type": "deniedTerms", "terms": ["acme", "globex"], "appliesTo": ["input", "output"],
         "action": "block", "message": "We only talk about our products."},
        {"name": "cards", "type": "pattern", "patterns": [r"\d{16}"], "appliesTo": ["toolResults"], "action": "redact"},
        {"name": "short", "type": "maxLength", "maxChars": 2000, "appliesTo": ["input"], "action": "record"},
        {"name": "shape", "type": "outputSchema", "schema": {"type": "object", "required": ["answer"]},
         "appliesTo": ["output"], "action": "block"},
        {"name": "judge", "type": "guardModel", "model": "tiny", "instructions": "no medical advice"},
    ],
}  # fmt: skip
INTERVENTIONS = [
    {"at": "2026-11-26T08:01:02.123456Z", "app": "bot", "version": "1.0.0", "sessionId": "s-2", "messageId": "m2",
     "policy": "cards", "stage": "toolResults", "action": "redact", "reason": "pattern #1", "tool": "lookup"},
    {"at": "2026-11-26T08:00:00Z", "app": "bot", "version": "draft", "sessionId": "s-1", "messageId": "m1",
     "policy": "no-competitors", "stage": "input", "action": "block", "reason": "denied term #1", "tool": ""},
]  # fmt: skip


def test_policies_are_described_in_the_order_they_run() -> None:
    rows = guardrails.policy_rows(GUARDRAILS)
    assert [(r["name"], r["type"], r["stages"], r["action"]) for r in rows] == [
        ("no-competitors", "Denied terms", "input, output", "block"),
        ("cards", "Pattern", "tool results", "redact"),
        ("short", "Length limit", "input", "record"),
        ("shape", "Output schema", "output", "block"),
        ("judge", "Guard model", "input, output", "block"),  # the defaults when the stored policy has none
    ]
    assert [r["checks"] for r in rows] == [
        "terms: acme, globex",
        r"patterns: \d{16}",
        "at most 2000 characters",
        "a JSON document of its schema (required: answer)",
        "asks model tiny",
    ]
    assert rows[0]["message"] == "We only talk about our products."
    many = {"policies": [{"name": "t", "type": "deniedTerms", "terms": [f"t{i}" for i in range(12)]}]}
    assert guardrails.policy_rows(many)[0]["checks"].endswith("t7 and 4 more")
    assert guardrails.policy_rows(None) == guardrails.policy_rows({}) == []


def test_pii_settings_spell_out_defaults_and_where_they_redact() -> None:
    assert guardrails.pii_view(None) is None
    shown = guardrails.pii_view({})
    assert shown is not None
    assert shown["entities"] == ", ".join(DEFAULT_ENTITIES) + " (the defaults)"
    assert shown["redacted"] == ["before storage (conversations, usage, audit, logs)"]
    assert shown["notRedacted"] == ["before the model", "in tool calls", "in the answer"]
    shown = guardrails.pii_view({"entities": ["EMAIL_ADDRESS", "US_SSN"], "phoneRegions": ["SE"],
                                 "customPatterns": [{"name": "ORDER_ID", "pattern": "ORD-[0-9]{6}"}],
                                 "redact": {"storage": False, "answer": True}})  # fmt: skip
    assert shown is not None
    assert (shown["entities"], shown["phoneRegions"]) == ("EMAIL_ADDRESS, US_SSN", "SE")
    assert shown["customPatterns"] == [{"name": "ORDER_ID", "pattern": "ORD-[0-9]{6}"}]
    assert shown["redacted"] == ["in the answer"]


def test_interventions_are_shown_with_their_tool_and_time() -> None:
    rows = guardrails.intervention_rows(INTERVENTIONS)
    assert rows[0] == {"at": "2026-11-26 08:01:02 UTC", "policy": "cards", "stage": "tool results (lookup)",
                       "action": "redact", "reason": "pattern #1", "session": "s-2", "version": "1.0.0"}  # fmt: skip
    assert (rows[1]["stage"], rows[1]["at"]) == ("input", "2026-11-26 08:00:00 UTC")


def _env_page(env: dict[str, Any], **values: Any) -> str:
    common = {"ctx": None, "csrf": "c", "flash": {}, "base": "/console/ns/x", "namespace": "x"}
    page = {"env": env, "versions": [], "tab": "guardrails", "tabs": ("overview", "guardrails"), "errors": {},
            "health": {"phase": "Active", "tone": "ok", "reason": ""}}  # fmt: skip
    defaults = {"guardrails": None, "guardrailsError": None, "pii": None, "interventions": [],
                "interventionsError": None}  # fmt: skip
    return TEMPLATES.get_template("environment.html").render(**common, **page, **{**defaults, **values})


ENV = {"name": "prod", "objectName": "bot-prod", "app": "bot", "activeVersion": "1.0.0", "widget": {}}


def test_the_guardrails_tab_shows_policies_pii_and_interventions() -> None:
    pii = guardrails.pii_view({"customPatterns": [{"name": "ORDER_ID", "pattern": "<ORD>-[0-9]{6}"}]})
    html = _env_page(ENV, guardrails=GUARDRAILS, pii=pii, interventions=guardrails.intervention_rows(INTERVENTIONS))
    assert '<a href="/console/ns/x/environments/bot-prod?tab=guardrails" aria-current="page">Guardrails</a>' in html
    assert "Guardrails of version 1.0.0" in html
    assert 'id="env-guardrails"' in html
    assert "Block message of the policies without their own: “Not here, sorry.”</p>" in html
    assert '<td data-label="Policy">no-competitors</td>' in html
    assert "answers “We only talk about our products.”" in html
    assert "custom: ORDER_ID <code>&lt;ORD&gt;-[0-9]{6}</code>" in html  # escaped
    assert "<dt>Seen as typed</dt><dd>before the model; in tool calls; in the answer</dd>" in html
    assert '<table class="stack" aria-labelledby="interventions-title" id="interventions">' in html
    assert '<tr data-action="redact"><td data-label="Time">2026-11-26 08:01:02 UTC</td>' in html
    assert '<td data-label="Stage">tool results (lookup)</td>' in html
    assert '<span class="badge tone-bad">block</span>' in html
    assert '<code>s-1</code> <span class="hint">draft</span>' in html


def test_the_guardrails_tab_says_what_is_missing() -> None:
    html = _env_page(ENV, guardrails=None)
    assert "No guardrails: nothing screens" in html
    assert "Not configured: what users type is stored as typed." in html
    assert "No interventions yet" in html
    html = _env_page({**ENV, "activeVersion": None})
    assert "No version is active yet" in html
    html = _env_page(
        {**ENV, "activeVersion": "draft"}, guardrailsError="<b>forbidden</b>", interventionsError="db down"
    )
    assert "Guardrails of the draft" in html
    assert "&lt;b&gt;forbidden&lt;/b&gt;" in html
    assert '<div class="errors" role="alert"><p>db down</p></div>' in html


def test_the_version_page_shows_its_guardrails() -> None:
    version = {"version": "1.0.0", "name": "One", "description": "", "createdAt": "now", "deployedIn": [],
               "agents": [], "toolVersions": [], "mcpServers": [], "guardrails": GUARDRAILS}  # fmt: skip
    common = {"ctx": None, "csrf": "c", "flash": {}, "base": "/console/ns/x", "namespace": "x", "errors": {}}
    html = TEMPLATES.get_template("version.html").render(**common, app="bot", v=version)
    assert "<h3>Guardrails</h3>" in html
    assert '<td data-label="Policy">judge</td>' in html
    assert '<td data-label="Checks">asks model tiny</td>' in html
    html = TEMPLATES.get_template("version.html").render(**common, app="bot", v={**version, "guardrails": None})
    assert "No guardrails: nothing screens" in html


def test_the_draft_editor_keeps_the_guardrails() -> None:
    """Saving replaces the whole draft: the editor's YAML must hold the guardrails, or a save removes them."""
    values = _draft_values(
        {"name": "bot", "agents": [], "toolVersions": [], "mcpServers": [], "guardrails": GUARDRAILS}
    )
    assert "guardrails:" in values["content"]
    assert "no-competitors" in values["content"]
    assert "guardrails" not in _draft_values({"name": "bot", "agents": []})["content"]
