"""``dockyard env settings``: the merge patch its options make (the allowed origins are the current ones,
added to and removed from; 0 removes a rate limit; ``--config KEY=VALUE``)."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from dockyard_client.cli.environments import _settings_patch
from dockyard_client.models import Environment

CURRENT = Environment.model_validate(
    {"name": "staging", "objectName": "demo-staging", "namespace": "team",
     "widget": {"allowedOrigins": ["https://a.example.com", "https://b.example.com"]}}
)  # fmt: skip


def patch_of(**options: Any) -> dict[str, Any]:
    args: dict[str, Any] = dict.fromkeys(("web_client", "token_ttl", "requests_per_minute", "tokens_per_day"))
    args |= {"allow": [], "remove": [], "config": [], "unset_config": []}
    return _settings_patch(CURRENT, **{**args, **options})


def test_no_option_changes_nothing() -> None:
    assert patch_of() == {}


def test_origins_are_added_to_and_removed_from_the_current_ones() -> None:
    patch = patch_of(allow=["https://c.example.com", "https://a.example.com"], remove=["https://b.example.com"])
    assert patch == {"widget": {"allowedOrigins": ["https://a.example.com", "https://c.example.com"]}}


def test_each_option_sets_its_member() -> None:
    patch = patch_of(web_client="public", token_ttl=300, requests_per_minute=0, tokens_per_day=5000,
                     config=["greeting=Hello = you", "empty="], unset_config=["old"])  # fmt: skip
    assert patch == {
        "access": {"webClient": "public"},
        "widget": {"tokenTtlSeconds": 300},
        "rateLimits": {"requestsPerMinute": None, "tokensPerDay": 5000},
        "configuration": {"old": None, "greeting": "Hello = you", "empty": ""},
    }


def test_a_config_without_a_key_is_a_usage_error() -> None:
    with pytest.raises(typer.BadParameter, match="KEY=VALUE"):
        patch_of(config=["novalue"])


def test_oidc_options_patch_the_provider() -> None:
    oidc = {"issuer": "https://id.example.com", "clientId": "web", "clientSecretRef": None}
    assert patch_of(web_client="oidc", oidc=oidc) == {
        "access": {"webClient": "oidc", "oidc": {"issuer": "https://id.example.com", "clientId": "web"}}
    }
    assert patch_of(oidc={"issuer": None, "clientId": None, "clientSecretRef": ""}) == {
        "access": {"oidc": {"clientSecretRef": None}}  # '': a public client (the Secret's name removed)
    }
