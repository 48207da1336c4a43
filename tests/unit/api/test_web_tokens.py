"""Widget and web-client tokens, limits, origins and the embed code, without a cluster."""

from __future__ import annotations

import gzip
import hmac
import time

import pytest

from dockyard_api.web import tokens
from dockyard_api.web.assets import LOADER
from dockyard_api.web.service import BrowserConfig, WindowLimiter, same_origin
from dockyard_core.errors import RateLimitedError
from dockyard_core.resources.v1alpha1.environment import Access, EnvironmentSpec, WidgetSettings
from dockyard_operator import environments as envs

KEY = tokens.derive(b"k" * 32, "team", "bot-prod")


def claims(**changes: object) -> tokens.Claims:
    now = int(time.time())
    base = {"ns": "team", "env": "bot-prod", "app": "bot", "sub": "anon-x", "kind": "widget", "iat": now,
            "exp": now + 60, "renewable": True}  # fmt: skip
    return tokens.Claims(**{**base, **changes})  # type: ignore[arg-type]


def test_a_token_verifies_with_its_key_only_and_not_after_it_expires() -> None:
    token = tokens.sign(KEY, claims())
    assert tokens.is_token(token)
    assert not tokens.is_token("dk_abc_def")
    assert tokens.verify(KEY, token).sub == "anon-x"
    assert tokens.unverified_scope(token) == ("team", "bot-prod")
    other_env = tokens.derive(b"k" * 32, "team", "bot-staging")
    with pytest.raises(tokens.TokenError) as wrong:
        tokens.verify(other_env, token)
    assert wrong.value.reason == "signature"
    head, payload, sig = token.split(".")
    forged = tokens.sign(b"x" * 32, claims(sub="anon-other")).split(".")[1]
    with pytest.raises(tokens.TokenError):
        tokens.verify(KEY, f"{head}.{forged}.{sig}")  # a payload swapped under a valid signature
    with pytest.raises(tokens.TokenError) as expired:
        tokens.verify(KEY, token, now=time.time() + 61)
    assert expired.value.reason == "token_expired"
    assert tokens.verify(KEY, token, now=time.time() + 61, leeway=3600).sub == "anon-x"  # renewal window
    for junk in ("dyw1.", "dyw1.a.b.c", "dyw1.!!!.x", f"dyw1.{payload}"):
        with pytest.raises(tokens.TokenError):
            tokens.verify(KEY, junk)


def test_the_window_limiter_refuses_over_the_limit_with_retry_after() -> None:
    limiter = WindowLimiter()
    for _ in range(3):
        limiter.hit("a", 3, "perToken")
    with pytest.raises(RateLimitedError) as refused:
        limiter.hit("a", 3, "perToken")
    assert 1 <= refused.value.retry_after <= 61
    assert refused.value.headers() == {"Retry-After": str(refused.value.retry_after)}
    limiter.hit("b", 3, "perToken")  # another key has its own window


def test_origins_access_and_frame_ancestors() -> None:
    config = BrowserConfig(
        "team", "bot-prod", "bot", "prod", Access(), WidgetSettings(allowed_origins=["https://shop.example.com"])
    )
    assert config.origin_allowed("https://shop.example.com")
    assert not config.origin_allowed("https://shop.example.com.evil.test")
    assert not config.origin_allowed("http://shop.example.com")
    assert not config.origin_allowed(None)
    assert config.frame_ancestors == "'self' https://shop.example.com"
    assert same_origin("http://127.0.0.1:8080", "127.0.0.1:8080")
    assert not same_origin("http://a:1", "a:2")
    assert not same_origin("null", "null")
    spec = EnvironmentSpec.model_validate({"appRef": "bot"})
    assert (spec.access, spec.widget) == (None, None)
    assert (Access().web_client, WidgetSettings().allowed_origins) == ("signIn", [])
    with pytest.raises(ValueError, match="allowedOrigins"):
        EnvironmentSpec.model_validate({"appRef": "bot", "widget": {"allowedOrigins": ["https://x.test/path"]}})


def test_embed_code_has_the_app_container_and_script_and_no_key() -> None:
    urls = envs.urls("https://dockyard.example.com", "team", "bot-prod")
    code = envs.embed_code(urls.widget_script, "bot")
    assert '<div id="dockyard-chat"></div>' in code
    assert (
        '<script src="https://dockyard.example.com/e/team/bot-prod/v1/loader.js" data-app-id="bot" '
        'data-container="dockyard-chat"' in code
    )
    assert "data-api-key=" not in code
    assert "allowedOrigins" in code


def test_the_loader_is_small_and_versioned() -> None:
    assert LOADER.etag.startswith('"')
    assert len(LOADER.etag) == 22
    assert gzip.decompress(LOADER.gzipped) == LOADER.body
    assert len(LOADER.gzipped) < 10 * 1024, len(LOADER.gzipped)
    assert b"__DOCKYARD_VERSION__" not in LOADER.body


def test_hostile_tokens_and_origins_are_refused_not_crashed() -> None:
    deep = tokens._b64(b"[" * 3000)
    for junk in (f"dyw1.{deep}.AAAA", "dyw1.a.b", "dyw1.\u00e9.x", "x" * 5000):
        with pytest.raises(tokens.TokenError):
            tokens.verify(KEY, junk)
    # a payload the key signed, with a deeply nested body, is still a TokenError
    body = f"dyw1.{deep}"
    signed = f"{body}.{tokens._b64(hmac.new(KEY, body.encode(), 'sha256').digest())}"
    with pytest.raises(tokens.TokenError):
        tokens.verify(KEY, signed)
    assert not same_origin("http://[x", "x")
    assert not same_origin("\x00", "a")


def test_an_api_server_that_is_away_is_a_503_with_retry_after_not_a_502(unreachable_kubeconfig: str) -> None:
    """The widget's and the web client's token endpoints read the Environment and the signing key: an API
    server that cannot be reached is the facade's one answer for that (503 upstream_unavailable)."""
    import asyncio

    from dockyard_api.settings import ApiSettings
    from dockyard_api.web.service import Directory
    from dockyard_core.errors import KubeUnavailableError
    from dockyard_core.kubeclient import AsyncKube

    async def scenario() -> None:
        kube = AsyncKube(unreachable_kubeconfig, timeout=2)
        try:
            with pytest.raises(KubeUnavailableError) as read:
                await Directory(kube, ttl=0).get("team", "bot-prod")
            assert read.value.status_code == 503
            assert read.value.headers() == {"Retry-After": "5"}
            with pytest.raises(KubeUnavailableError):
                await tokens.SigningKeys(kube, ApiSettings(kubeconfig=unreachable_kubeconfig)).key("team", "bot-prod")
        finally:
            await kube.aclose()

    asyncio.run(scenario())
