"""The console's pure parts: sealed session cookies, CSRF, cookie attributes, and the view models."""

from __future__ import annotations

import re
import time
from importlib.resources import files
from typing import get_args

import pytest
from pydantic import ValidationError

from dockyard_api.console import session as sess
from dockyard_api.console import settings, views
from dockyard_api.console.common import TEMPLATES
from dockyard_api.management.catalog.service import agent_versions
from dockyard_api.management.schemas import EnvironmentSettings, VersionCreate
from dockyard_core.resources.v1alpha1 import Agent
from dockyard_core.resources.v1alpha1.environment import WebClientAccess

KEY = b"k" * 32


def test_session_is_sealed_and_opens_only_with_the_same_key() -> None:
    sealer = sess.Sealer(KEY)
    session = sess.Session(token="eyJhbGciOi.secret-token", namespace="team-a", csrf=sess.new_csrf())
    cookie = sealer.seal_session(session)
    assert "secret-token" not in cookie
    assert "team-a" not in cookie  # encrypted, not merely signed
    assert sealer.open_session(cookie) == session
    assert sess.Sealer(b"x" * 32).open_session(cookie) is None  # another facade's key
    tampered = cookie[:-4] + ("AAAA" if not cookie.endswith("AAAA") else "BBBB")
    assert sealer.open_session(tampered) is None
    assert sealer.open_session(None) is None
    assert sealer.open_session("garbage") is None


def test_session_expires() -> None:
    sealer = sess.Sealer(KEY)
    value = sealer.seal({"c": "x"})
    assert sealer.open(value, max_age=60) == {"c": "x"}
    old = sess.Sealer(KEY)._fernet.encrypt_at_time(b'{"c":"x"}', int(time.time()) - 3600).decode()
    assert sealer.open(old, max_age=60) is None


def test_csrf_tokens() -> None:
    a, b = sess.new_csrf(), sess.new_csrf()
    assert a != b
    assert len(a) >= 40
    assert sess.csrf_ok(a, a)
    assert not sess.csrf_ok(a, b)
    assert not sess.csrf_ok(a, "")
    assert not sess.csrf_ok("", "")
    assert not sess.csrf_ok(None, None)


@pytest.mark.parametrize(
    ("scheme", "forwarded", "secure"),
    [
        ("http", None, False),
        ("https", None, True),
        ("http", "https", True),
        ("https", "http", False),
        ("http", "https, http", True),
    ],
)
def test_cookie_is_secure_over_tls(scheme: str, forwarded: str | None, secure: bool) -> None:
    assert sess.over_tls(scheme, forwarded) is secure
    options = sess.cookie_options(secure, 60)
    assert options == {"httponly": True, "samesite": "strict", "secure": secure, "path": "/console", "max_age": 60}


def test_field_paths_map_to_form_fields() -> None:
    assert views.field_of("spec.toolVersions[0].name") == "toolVersions"
    assert views.field_of("body.version") == "version"
    assert views.field_of("displayName") == "name"
    assert views.field_of("tool_versions.0.version") == "toolVersions"
    assert views.field_of("spec.mcpServers[0].url") == "mcpServers"
    assert views.field_of("spec.appRef") is None
    assert views.field_of("") is None


def test_validation_errors_land_next_to_their_fields() -> None:
    with pytest.raises(ValidationError) as caught:
        VersionCreate(version="1.0", name="", tool_versions=[{"name": "weather", "version": "x"}])  # type: ignore[list-item]
    errors = views.errors_from_validation(caught.value)
    assert set(errors.fields) == {"version", "name", "toolVersions"}
    assert not errors.general


def test_api_errors_use_causes_then_words() -> None:
    causes = [{"field": "spec.toolVersions[0]", "message": "Tool weather-9.9.9 does not exist"}]
    errors = views.errors_from_api("admission webhook denied the request", causes)
    assert errors.of("toolVersions") == ["Tool weather-9.9.9 does not exist"]
    assert not errors.general
    plain = views.errors_from_api('appversions.dockyard.dev is forbidden: User "vic" cannot create', None)
    assert plain.general == ['appversions.dockyard.dev is forbidden: User "vic" cannot create']
    webhook = views.errors_from_api(
        'admission webhook "validate-appversion.dockyard.dev" denied the request: the version is not valid: '
        "spec.toolVersions[0]: tool clock version 1.0.0 does not exist (no Tool clock-1.0.0); "
        "spec.agents[1].model: agent helper has no model (name its ModelDeployment); "
        "spec.mcpServers[0]: MCP server docs at http://x/mcp does not answer: ConnectError; "
        "spec.appRef: app 'bot' does not exist",
        None,
    )
    assert webhook.of("toolVersions") == [
        "spec.toolVersions[0]: tool clock version 1.0.0 does not exist (no Tool clock-1.0.0)"
    ]
    assert webhook.of("agents") == ["spec.agents[1].model: agent helper has no model (name its ModelDeployment)"]
    assert webhook.of("mcpServers") == [
        "spec.mcpServers[0]: MCP server docs at http://x/mcp does not answer: ConnectError"
    ]
    assert webhook.general == ["spec.appRef: app 'bot' does not exist"]
    # the management API's causes of the same refusal: each next to its field, the rest on top
    causes = [
        {"field": "spec.agents[0].model", "message": "agent helper has no model"},
        {"field": "spec.appRef", "message": "app 'bot' does not exist"},
    ]
    both = views.errors_from_api("admission webhook denied the request: the version is not valid: ...", causes)
    assert both.of("agents") == ["agent helper has no model"]
    assert both.general == ["spec.appRef: app 'bot' does not exist"]


def test_environment_list_puts_draft_first() -> None:
    rows = views.environment_rows([{"name": "prod"}, {"name": "draft"}, {"name": "staging"}])
    assert [r["name"] for r in rows] == ["draft", "prod", "staging"]


def test_health_and_progress() -> None:
    active = {"phase": "Active", "appVersion": "1.0.0", "activeVersion": "1.0.0"}
    assert views.health(active) == {"phase": "Active", "tone": "ok", "reason": ""}
    assert not views.in_progress(active)
    moving = {**active, "appVersion": "1.1.0"}
    assert views.in_progress(moving)  # linked another version, still serving the old one
    failed = {
        "phase": "Failed",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ToolFailed", "message": "weather: 503"}],
    }
    assert views.health(failed) == {"phase": "Failed", "tone": "bad", "reason": "weather: 503"}
    assert views.health({"deletingSince": "2026-01-01T00:00:00Z", "phase": "Active"})["phase"] == "Deleting"
    assert views.health({})["phase"] == "Pending"


def test_dock_status_summarises_jobs() -> None:
    ok = {"status": "SUCCESS", "reason": "Available"}
    busy = {"status": "IN_PROGRESS", "reason": "Progressing", "message": "1 of 2 pods ready"}
    bad = {"status": "FAILED", "reason": "ImagePullBackOff", "message": "image not found"}
    assert views.dock_status([]) == {"status": None, "reasons": []}
    assert views.dock_status([ok, None])["status"] == "SUCCESS"
    assert views.dock_status([ok, busy]) == {"status": "IN_PROGRESS", "reasons": ["1 of 2 pods ready"]}
    assert views.dock_status([busy, bad])["status"] == "FAILED"


def test_history_rows_offer_rollback_to_previous_working_versions_only() -> None:
    env = {
        "appVersion": "1.2.0",
        "activeVersion": "1.2.0",
        "history": [
            {"version": "1.2.0", "status": "Active", "deployedBy": "alice", "healthy": True},
            {"version": "1.1.0", "status": "Previous", "deployedBy": "bob", "healthy": False},
            {"version": "1.0.0", "status": "Previous", "deployedBy": "alice", "healthy": True, "action": "Deploy"},
            {"version": "1.2.0", "status": "Previous", "deployedBy": "alice", "healthy": True},
        ],
    }
    rows = views.history_rows(env)
    assert [(r["version"], r["canRollback"]) for r in rows] == [
        ("1.2.0", False),
        ("1.1.0", False),
        ("1.0.0", True),
        ("1.2.0", False),
    ]
    assert rows[0]["action"] == "Deploy"


def test_checklist_groups_in_spec_order_with_computed_items() -> None:
    items = [
        {"category": "Security", "item": "API keys generated", "state": "Done"},
        {"category": "Testing", "item": "Key flows", "state": "Manual"},
    ]
    groups = views.checklist_groups(items)
    assert [g["category"] for g in groups] == ["Configuration", "Testing", "Security", "Monitoring"]
    assert groups[2]["items"][0]["computed"] is True
    assert groups[1]["items"][0]["computed"] is False
    assert groups[0]["items"] == []


def test_next_version_and_sizes() -> None:
    assert views.next_version([]) == "1.0.0"
    assert views.next_version(["1.0.0", "1.4.2", "0.9.0", "bogus"]) == "1.5.0"
    assert views.human_size(None) == "—"
    assert views.human_size(512) == "512 B"
    assert views.human_size(3 * 1024 * 1024) == "3.0 MiB"


def test_usage_chart_is_an_accessible_svg_scaled_to_the_data() -> None:
    days = [
        {"day": "2026-11-01", "requests": 2, "tokensIn": 10, "tokensOut": 5},
        {"day": "2026-11-02", "requests": 4, "tokensIn": 0, "tokensOut": 0},
        {"day": "2026-11-03", "requests": 0, "tokensIn": 30, "tokensOut": 0},
    ]
    svg = views.usage_chart(days, width=300, height=100)
    assert svg.startswith("<svg")
    assert 'role="img"' in svg
    assert "6 requests and 45 tokens from 2026-11-01 to 2026-11-03" in svg
    heights = [float(h) for h in re.findall(r'<rect class="bar"[^>]*height="([0-9.]+)"', svg)]
    assert heights[1] == max(heights)
    assert heights[2] == 0
    assert heights[0] == pytest.approx(heights[1] / 2)
    assert svg.count("</title>") == 4  # the chart's title and one per day
    assert "<polyline" in views.usage_chart(days)
    empty = views.usage_chart([])
    assert "0 requests" in empty
    assert "<polyline" not in empty


def test_usage_chart_escapes() -> None:
    assert "<script>" not in views.usage_chart([{"day": "<script>", "requests": 1}])


def test_agent_versions_from_draft_and_versions() -> None:
    helper1 = {"name": "helper", "version": "1.0.0", "model": "tiny"}
    helper2 = {"name": "helper", "version": "1.10.0", "model": "tiny"}
    helper_b = {"name": "helper", "version": "1.2.0"}
    draft = [Agent.model_validate(helper2)]
    versions = [
        ("1.0.0", [Agent.model_validate(helper1)]),
        ("1.1.0", [Agent.model_validate(helper_b), Agent.model_validate(helper1)]),
    ]
    found = [a.wire() for a in agent_versions(draft, versions)]
    assert [(a["name"], a["version"]) for a in found] == [
        ("helper", "1.0.0"),
        ("helper", "1.2.0"),
        ("helper", "1.10.0"),
    ]
    assert found[0]["foundIn"] == ["1.0.0", "1.1.0"]
    assert found[2]["foundIn"] == ["draft"]
    assert found[0]["agent"] == helper1


def test_templates_escape_what_users_typed() -> None:
    errors = views.FormErrors()
    errors.add("name", "<b>bad</b>")
    page = TEMPLATES.get_template("environment_new.html").render(
        ctx=None,
        csrf="c",
        flash={},
        base="/console/ns/x",
        namespace="x",
        app="bot",
        versions=[],
        errors=errors,
        values={"name": '"><script>alert(1)</script>'},
    )
    assert "<script>alert(1)" not in page
    assert "&lt;b&gt;bad&lt;/b&gt;" in page
    assert 'aria-invalid="true" aria-describedby="name-error"' in page
    assert 'name="csrf" value="c"' in page


def _luminance(color: str) -> float:
    value = color.lstrip("#")
    channels = [int(value[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a: str, b: str) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_both_themes_meet_wcag_aa_contrast() -> None:
    css = (files("dockyard_api.console") / "static" / "console.css").read_text()
    themes = [
        dict(re.findall(r"--([a-z]+):\s*(#[0-9a-fA-F]{6})", block))
        for block in re.findall(r"\{([^{}]*--bg:[^{}]*)\}", css)
    ]
    assert len(themes) == 3  # light, dark by the system's choice, dark by the Theme button
    for colors in themes:
        for text in ("fg", "mut", "ac", "err", "ok", "busy"):
            for background in ("bg", "panel", "code"):
                assert _contrast(colors[text], colors[background]) >= 4.5, (text, background, colors)
        assert _contrast(colors["acfg"], colors["ac"]) >= 4.5  # a primary button's label
        assert _contrast(colors["bg"], colors["err"]) >= 4.5  # a danger button's label


def test_dense_days_fill_the_period_with_zeros() -> None:
    report = {"from": "2026-11-01", "to": "2026-11-04", "days": [{"day": "2026-11-03", "requests": 5}]}
    days = views.dense_days(report)
    assert [d["day"] for d in days] == ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]
    assert [d["requests"] for d in days] == [0, 0, 5, 0]


ENV_VIEW = {
    "name": "prod",
    "objectName": "bot-prod",
    "app": "bot",
    "access": {"webClient": "signIn"},
    "widget": {
        "allowedOrigins": ["https://a.example"],
        "tokenTtlSeconds": 900,
        "requestsPerMinutePerToken": 20,
        "requestsPerMinutePerAddress": 60,
        "tokensPerMinutePerAddress": 10,
    },
    "rateLimits": {"requestsPerMinute": 30},
    "configuration": {"company": "Acme", "n": 3},
}


def test_settings_form_shows_the_environment() -> None:
    shown = settings.form_values(ENV_VIEW)
    assert shown["webClient"] == "kubernetes"  # the deprecated signIn stored, shown as its new name
    assert shown["allowedOrigins"] == "https://a.example"
    assert shown["tokenTtlSeconds"] == "900"
    assert (shown["requestsPerMinute"], shown["tokensPerDay"]) == ("30", "")
    assert shown["configuration"] == "company=Acme\nn=3"
    assert [v for v, _ in settings.web_client_choices()] == ["public", "oidc", "kubernetes", "disabled"]
    assert set(get_args(WebClientAccess)) == {"public", "oidc", "kubernetes", "signIn", "disabled"}
    assert (shown["oidcIssuer"], shown["oidcClientId"], shown["oidcClientSecretRef"]) == ("", "", "")
    defaults = settings.form_values({"name": "draft"})  # the view leaves out what is at its default
    assert (defaults["webClient"], defaults["tokenTtlSeconds"], defaults["allowedOrigins"]) == ("public", "900", "")
    assert settings.settings_patch({"name": "draft"}, defaults) == ({}, views.FormErrors())


def test_settings_patch_sends_only_what_changed() -> None:
    sent = settings.form_values(ENV_VIEW)
    assert settings.settings_patch(ENV_VIEW, sent) == ({}, views.FormErrors())
    sent.update(
        webClient="public",
        allowedOrigins="https://a.example\n\n https://b.example/ \n",
        tokenTtlSeconds="1800",
        requestsPerMinute="",
        tokensPerDay="100000",
        configuration="n=3\ncity=Paris",
    )
    patch, errors = settings.settings_patch(ENV_VIEW, sent)
    assert not errors
    assert patch == {
        "access": {"webClient": "public"},
        "widget": {"allowedOrigins": ["https://a.example", "https://b.example"], "tokenTtlSeconds": 1800},
        "rateLimits": {"requestsPerMinute": None, "tokensPerDay": 100000},  # empty: the limit removed
        "configuration": {"city": "Paris", "company": None},  # n=3 unchanged (kept as the number 3)
    }
    body = EnvironmentSettings.model_validate(patch)
    assert body.spec_patch() == patch


def test_settings_form_errors_are_next_to_their_fields() -> None:
    sent = {**settings.form_values(ENV_VIEW), "tokenTtlSeconds": "soon", "tokensPerDay": "1e6"}
    sent["configuration"] = "company=Acme\njust words\ncompany=Other"
    _, errors = settings.settings_patch(ENV_VIEW, sent)
    assert errors.of("tokenTtlSeconds") == ["'soon' is not a whole number."]
    assert errors.of("tokensPerDay") == ["'1e6' is not a whole number."]
    assert errors.of("configuration") == [
        "Line 2: write KEY=VALUE (got 'just words').",
        "Line 3: company is set twice.",
    ]
    _, errors = settings.settings_patch(ENV_VIEW, {**settings.form_values(ENV_VIEW), "tokenTtlSeconds": " "})
    assert errors.of("tokenTtlSeconds") == ["Enter a whole number."]
    # the resource type's own rules, named by field
    with pytest.raises(ValidationError) as caught:
        EnvironmentSettings.model_validate({"widget": {"allowedOrigins": ["shop.example.com"], "tokenTtlSeconds": 5}})
    errors = settings.errors_from(caught.value)
    assert errors.of("allowedOrigins") == [
        "'shop.example.com' is not a site's origin: write scheme://host[:port] as the browser shows it, no path, "
        "e.g. https://shop.example.com."
    ]
    assert errors.of("tokenTtlSeconds") == ["Input should be greater than or equal to 60"]
    assert settings.errors_from(caught.value, "origin").of("origin")  # the one-step form's field
    # the service's refusal: its causes next to their fields, else its message on top
    api = settings.errors_from_api("x", [{"field": "body.rateLimits.tokensPerDay", "message": "too big"}])
    assert api.of("tokensPerDay") == ["too big"]
    denied = settings.errors_from_api("you may not update environments", None)
    assert denied.general == ["you may not update environments"]
    assert settings.field_of("body.widget.allowedOrigins.0") == "allowedOrigins"
    assert settings.field_of("configuration.company") == "configuration"
    assert settings.field_of("body.metadata") is None


def test_settings_oidc_fields_patch_the_provider_with_errors_named() -> None:
    sent = {**settings.form_values(ENV_VIEW), "webClient": "oidc", "oidcIssuer": " https://id.example.com "}
    sent["oidcClientId"] = "dockyard-web"
    patch, errors = settings.settings_patch(ENV_VIEW, sent)
    assert not errors
    assert patch == {
        "access": {
            "webClient": "oidc",
            "oidc": {"issuer": "https://id.example.com", "clientId": "dockyard-web", "clientSecretRef": None},
        }
    }
    assert EnvironmentSettings.model_validate(patch).spec_patch() == patch
    configured = {**ENV_VIEW, "access": {"webClient": "oidc", "oidc": patch["access"]["oidc"]}}
    shown = settings.form_values(configured)
    assert (shown["webClient"], shown["oidcIssuer"]) == ("oidc", "https://id.example.com")
    patch, _ = settings.settings_patch(configured, {**shown, "oidcClientSecretRef": "web-oidc"})
    assert patch == {"access": {"oidc": {"clientSecretRef": "web-oidc"}}}  # only what changed
    # oidc without a provider, or a bad issuer: the type's refusal next to the field
    needs = "Value error, webClient oidc needs access.oidc (the provider's issuer and the client id)"
    refused = settings.errors_from_api("x", [{"field": "body.access.oidc", "message": needs}])  # the service's
    assert refused.of("oidcIssuer") == [needs]
    with pytest.raises(ValidationError) as caught:
        EnvironmentSettings.model_validate({"access": {"oidc": {"issuer": "http://id.example.com", "clientId": ""}}})
    errors = settings.errors_from(caught.value)
    assert errors.of("oidcIssuer")
    assert errors.of("oidcClientId")
    assert settings.field_of("body.access.oidc.clientSecretRef") == "oidcClientSecretRef"


def test_allow_a_site_adds_its_origin_once() -> None:
    assert settings.allow_patch(ENV_VIEW, " https://b.example/ ") == {
        "widget": {"allowedOrigins": ["https://a.example", "https://b.example"]}
    }
    assert settings.allow_patch(ENV_VIEW, "https://a.example") is None
    assert settings.allow_patch({"widget": {}}, "http://localhost:8080") == {
        "widget": {"allowedOrigins": ["http://localhost:8080"]}
    }


def _environment_page(tab: str, **values: object) -> str:
    common: dict[str, object] = {"ctx": None, "csrf": "c", "flash": {}, "base": "/console/ns/x", "namespace": "x"}
    health = {"phase": "Active", "tone": "ok", "reason": ""}
    page = {"env": ENV_VIEW, "versions": [], "tab": tab, "tabs": ("embed", "settings"), "health": health}
    return TEMPLATES.get_template("environment.html").render(**common, **page, **values)


def test_settings_tab_and_allow_a_site_show_errors_next_to_fields() -> None:
    errors = views.FormErrors()
    errors.add("allowedOrigins", "<i>not an origin</i>")
    shown = {**settings.form_values(ENV_VIEW), "allowedOrigins": "nope"}
    html = _environment_page(
        "settings", errors={"settings": errors}, settings=shown, webClientChoices=settings.web_client_choices()
    )
    assert 'action="/console/ns/x/environments/bot-prod/settings"' in html
    assert '<option value="kubernetes" selected>' in html
    assert 'id="oidcIssuer" name="oidcIssuer" value=""' in html
    assert ">nope</textarea>" in html
    assert '<p class="field-error" id="allowedOrigins-error" role="alert">&lt;i&gt;not an origin&lt;/i&gt;</p>' in html
    assert 'aria-describedby="allowedOrigins-help allowedOrigins-error" aria-invalid="true"' in html
    assert 'id="tokenTtlSeconds" name="tokenTtlSeconds" value="900"' in html
    allow = views.FormErrors()
    allow.add("origin", "bad origin")
    html = _environment_page("embed", errors={"allow": allow}, origin="shop")
    assert 'action="/console/ns/x/environments/bot-prod/allow-origin"' in html
    assert 'value="shop"' in html
    assert 'id="origin-error" role="alert">bad origin</p>' in html
    assert "works on any site until this list names one" in html
    assert '<span id="allowed-origins">https://a.example</span>' in html
