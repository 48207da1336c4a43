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
    assert (Access().web_client, WidgetSettings().allowed_origins) == ("public", [])  # the default (issue #25)
    with pytest.raises(ValueError, match="allowedOrigins"):
        EnvironmentSpec.model_validate({"appRef": "bot", "widget": {"allowedOrigins": ["https://x.test/path"]}})


def test_a_snippet_carrying_a_key_works_on_any_site_unless_the_owner_lists_origins() -> None:
    # SPEC §7: the user inserts the key and pastes the snippet into any page; a non-empty allowedOrigins
    # is the owner's choice to restrict the sites (then key-carrying pages of the listed ones only)
    open_to_all = BrowserConfig("team", "bot-prod", "bot", "prod", Access(), WidgetSettings())
    assert not open_to_all.restricted
    assert open_to_all.key_origin_allowed("https://any.example.org")
    assert open_to_all.key_origin_allowed(None)
    assert not open_to_all.origin_allowed("https://any.example.org")  # key-less tokens: listed sites only
    shop = WidgetSettings(allowed_origins=["https://shop.example.com"])
    restricted = BrowserConfig("team", "bot-prod", "bot", "prod", Access(), shop)
    assert restricted.restricted
    assert restricted.key_origin_allowed("https://shop.example.com")
    assert not restricted.key_origin_allowed("https://any.example.org")
    assert not restricted.key_origin_allowed("https://shop.example.com.evil.test")
    anywhere = BrowserConfig("team", "bot-prod", "bot", "prod", Access(), WidgetSettings(allowed_origins=["*"]))
    assert anywhere.restricted
    assert anywhere.key_origin_allowed("https://any.example.org")


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
    # both ways are explained: key-less for listed sites; the key inserted: any site unless restricted
    assert "attribute data-api-key" in code
    assert "works on any site, unless the environment lists allowed origins" in code
    assert "can be read by every visitor" in code


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


def test_an_api_key_from_a_page_of_an_unlisted_site_is_refused_only_when_the_owner_restricts() -> None:
    """The deployed-app API's rule for a key a page carries (deps.app_caller): servers (no Origin) and the
    facade's own pages pass; other sites pass while allowedOrigins is empty, else only the listed ones."""
    import asyncio

    from dockyard_api.web.service import WebService
    from dockyard_core.errors import ForbiddenError

    class Fixed:
        def __init__(self, widget: WidgetSettings) -> None:
            self.config = BrowserConfig("team", "bot-prod", "bot", "prod", Access(), widget)

        async def require(self, namespace: str, environment: str) -> BrowserConfig:
            return self.config

    service = object.__new__(WebService)

    async def scenario() -> None:
        service.directory = Fixed(WidgetSettings())  # type: ignore[assignment]
        await service.check_key_origin("team", "bot-prod", "https://any.example.org", "dockyard.example.com")
        service.directory = Fixed(WidgetSettings(allowed_origins=["https://shop.example.com"]))  # type: ignore[assignment]
        await service.check_key_origin("team", "bot-prod", "https://shop.example.com", "dockyard.example.com")
        await service.check_key_origin("team", "bot-prod", None, "dockyard.example.com")  # a server
        await service.check_key_origin("team", "bot-prod", "http://dockyard.example.com", "dockyard.example.com")
        with pytest.raises(ForbiddenError) as refused:
            await service.check_key_origin("team", "bot-prod", "https://any.example.org", "dockyard.example.com")
        assert refused.value.details == {"reason": "origin_not_allowed", "origin": "https://any.example.org"}
        assert "spec.widget.allowedOrigins" in refused.value.message

    asyncio.run(scenario())
