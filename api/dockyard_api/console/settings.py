"""The Settings tab's form and the Embed Code tab's one-step "Allow a site", as pure functions (no I/O):
the form's values from the environment's view, and the settings merge patch (only what changed) from
what was sent, with errors next to their fields. The page then calls the management service that
``PATCH .../environments/{env}/settings`` calls (:meth:`EnvironmentService.change_settings`)."""

from __future__ import annotations

import json
import re
from typing import Any, get_args

from pydantic import ValidationError

from dockyard_api.console.views import FormErrors
from dockyard_api.management.environments.service import changed_members as changed_members
from dockyard_core.resources.cel import RuleViolation
from dockyard_core.resources.v1alpha1.environment import Access, WebClientAccess, WidgetSettings

WEB_CLIENT_LABELS = {
    "public": "Public: anyone with the URL chats",
    "oidc": "Sign in with an OpenID Connect provider",
    "kubernetes": "Sign in with a Kubernetes token",
    "disabled": "Disabled: the page answers 404",
}
DEPRECATED = {"signIn": "kubernetes"}
"""Values the Environment still accepts under their old name, shown as their new one."""
OIDC_FIELDS = {"oidcIssuer": "issuer", "oidcClientId": "clientId", "oidcClientSecretRef": "clientSecretRef"}
"""The form's OpenID Connect fields and their members of spec.access.oidc."""


def web_client_choices() -> list[tuple[str, str]]:
    """(value, label) of each web client access the Environment allows (not the deprecated names)."""
    return [(v, WEB_CLIENT_LABELS.get(v, v)) for v in get_args(WebClientAccess) if v not in DEPRECATED]


WIDGET_NUMBERS = (
    "tokenTtlSeconds",
    "requestsPerMinutePerToken",
    "requestsPerMinutePerAddress",
    "tokensPerMinutePerAddress",
)
"""The widget's whole-number settings: required (their defaults are shown)."""
RATE_NUMBERS = ("requestsPerMinute", "tokensPerDay")
"""The deployed app's limits: empty means no limit."""
FIELDS = ("webClient", *OIDC_FIELDS, "allowedOrigins", *WIDGET_NUMBERS, *RATE_NUMBERS, "configuration", "origin")


def field_of(path: str) -> str | None:
    """The settings form field an error's field path names (``body.widget.allowedOrigins.0``,
    ``rateLimits.tokensPerDay``, ``body.configuration``), or None."""
    parts = [p for p in re.split(r"[.\[\]]+", path) if p and not p.isdigit() and p not in ("spec", "body")]
    if not parts:
        return None
    if parts[0] == "configuration":
        return "configuration"
    if "oidc" in parts:  # access.oidc.issuer, or access.oidc itself (webClient oidc without a provider)
        member = parts[parts.index("oidc") + 1] if parts[-1] != "oidc" else "issuer"
        return next((f for f, m in OIDC_FIELDS.items() if m == member), "oidcIssuer")
    return parts[-1] if parts[-1] in FIELDS else None


def config_text(value: Any) -> str:
    """A configuration value as its KEY=VALUE line shows it: a string as it is, other values as JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def form_values(env: dict[str, Any]) -> dict[str, str]:
    """The form's fields (all text) from the environment's view (which leaves out what is at its default)."""
    widget = {**WidgetSettings().model_dump(mode="json", by_alias=True), **(env.get("widget") or {})}
    access = {**Access().model_dump(mode="json", by_alias=True), **(env.get("access") or {})}
    rate = env.get("rateLimits") or {}
    oidc = access.get("oidc") or {}
    values = {
        "webClient": DEPRECATED.get(str(access["webClient"]), str(access["webClient"])),
        **{field: str(oidc.get(member) or "") for field, member in OIDC_FIELDS.items()},
        "allowedOrigins": "\n".join(widget.get("allowedOrigins") or []),
        "configuration": "\n".join(f"{k}={config_text(v)}" for k, v in (env.get("configuration") or {}).items()),
    }
    for name in WIDGET_NUMBERS:
        values[name] = "" if widget.get(name) is None else str(widget[name])
    for name in RATE_NUMBERS:
        values[name] = "" if rate.get(name) is None else str(rate[name])
    return values


def _origin(text: str) -> str:
    """An origin as typed, without surrounding spaces and the trailing slash a copied address has."""
    text = text.strip()
    return text[:-1] if text.endswith("/") and text.count("/") == 3 else text


def _number(sent: str, name: str, errors: FormErrors, required: bool) -> int | None:
    text = sent.strip().replace(",", "").replace("_", "")
    if not text:
        if required:
            errors.add(name, "Enter a whole number.")
        return None
    if not re.fullmatch(r"[0-9]+", text):
        errors.add(name, f"{sent.strip()!r} is not a whole number.")
        return None
    return int(text)


def parse_configuration(text: str, current: dict[str, Any], errors: FormErrors) -> dict[str, Any]:
    """KEY=VALUE lines (blank lines skipped) as the configuration; a value whose text is unchanged keeps
    its current (maybe non-string) value."""
    out: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key:
            errors.add("configuration", f"Line {number}: write KEY=VALUE (got {line.strip()!r}).")
            continue
        if key in out:
            errors.add("configuration", f"Line {number}: {key} is set twice.")
            continue
        old = current.get(key)
        out[key] = old if key in current and config_text(old) == value else value
    return out


def settings_patch(env: dict[str, Any], sent: dict[str, Any]) -> tuple[dict[str, Any], FormErrors]:
    """The settings merge patch (camelCase members of ``spec``, like the API's body) of what the form
    changed, and the form's own errors (a number that is not one, a line that is not KEY=VALUE)."""
    errors = FormErrors()
    before = form_values(env)
    text = {name: str(sent.get(name) or "") for name in FIELDS}
    patch: dict[str, Any] = {}
    if text["webClient"] and text["webClient"] != before["webClient"]:
        patch["access"] = {"webClient": text["webClient"]}
    oidc = {m: text[f].strip() or None for f, m in OIDC_FIELDS.items() if text[f].strip() != before[f]}
    if oidc:  # the provider of webClient oidc: issuer and client id required, the secret's name optional
        had = bool((env.get("access") or {}).get("oidc"))
        if not had:
            oidc = {m: text[f].strip() or None for f, m in OIDC_FIELDS.items()}
        emptied = not any(text[f].strip() for f in OIDC_FIELDS)
        patch.setdefault("access", {})["oidc"] = None if emptied else oidc
    widget: dict[str, Any] = {}
    origins = [_origin(line) for line in text["allowedOrigins"].splitlines() if line.strip()]
    if origins != (env.get("widget") or {}).get("allowedOrigins", []):
        widget["allowedOrigins"] = origins
    for name in WIDGET_NUMBERS:
        number = _number(text[name], name, errors, required=True)
        if number is not None and str(number) != before[name]:
            widget[name] = number
    if widget:
        patch["widget"] = widget
    rate: dict[str, Any] = {}
    for name in RATE_NUMBERS:
        number = _number(text[name], name, errors, required=False)
        if name not in errors.fields and ("" if number is None else str(number)) != before[name]:
            rate[name] = number  # None: the limit removed
    if rate:
        patch["rateLimits"] = rate
    current = env.get("configuration") or {}
    config = parse_configuration(text["configuration"], current, errors)
    changed = {k: v for k, v in config.items() if k not in current or current[k] != v}
    removed = {k: None for k in current if k not in config}
    if changed or removed:
        patch["configuration"] = {**changed, **removed}
    return patch, errors


def allow_patch(env: dict[str, Any], origin: str) -> dict[str, Any] | None:
    """The patch adding ``origin`` to the widget's allowed origins; None when it is listed already."""
    listed = list((env.get("widget") or {}).get("allowedOrigins") or [])
    site = _origin(origin)
    if site in listed:
        return None
    return {"widget": {"allowedOrigins": [*listed, site]}}


ORIGIN_HELP = "write scheme://host[:port] as the browser shows it, no path, e.g. https://shop.example.com"


def errors_from(exc: ValidationError, origin_field: str | None = None) -> FormErrors:
    """Pydantic's errors of the settings body (``widget.allowedOrigins.0``...) next to their fields; an
    origin's in words (``origin_field``: the field that sent the list, for the one-step form)."""
    errors = FormErrors()
    for err in exc.errors():
        cause = (err.get("ctx") or {}).get("error")
        rule_path = cause.field_path if isinstance(cause, RuleViolation) else ()
        where = field_of(".".join([*(str(p) for p in err.get("loc", ())), *rule_path]))
        message = str(err.get("msg", "is not valid")).removeprefix("Value error, ")
        if where == "allowedOrigins":
            where = origin_field or where
            if err.get("type") == "string_pattern_mismatch":
                message = f"{err.get('input')!r} is not a site's origin: {ORIGIN_HELP}."
        errors.add(where, message)
    return errors


def errors_from_api(message: str, details: Any, origin_field: str | None = None) -> FormErrors:
    """The service's refusal: each cause next to its field (``origin`` for the one-step form's list);
    the message on top when no cause names a field."""
    errors = FormErrors()
    for cause in details if isinstance(details, list) else []:
        if isinstance(cause, dict):
            where = field_of(str(cause.get("field", "")))
            if origin_field and where == "allowedOrigins":
                where = origin_field
            errors.add(where, str(cause.get("message") or message))
    if not errors.fields:
        errors = FormErrors(general=[message])
    return errors
