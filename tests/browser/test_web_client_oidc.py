"""The web client's access modes against the real facade and operator on the local control plane: the
public default (a fresh environment chats without any sign-in), and oidc with a real OpenID Connect
provider (zitadel/oidc's, built from its Go modules: tests/support/oidc.py), first over HTTP with its
refusals, then in Chromium (the page sends the browser to the provider's login form and comes back)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.browser.conftest import Facade, Tab, deploy_bot
from tests.support.dockyard import get, patch
from tests.support.oidc import PASSWORD, USER, USER_EMAIL, handed_token, run_provider, sign_in_over_http
from tests.support.runners import free_port
from tests.support.scripted_model import Reply, ScriptedModel
from tests.support.waiting import wait_for

PHONE = {"width": 390, "height": 760}
CLIENT_ID = "dockyard-web"


def client_secret(api: client.ApiClient, namespace: str, value: str) -> None:
    body = client.V1Secret(metadata={"name": "oidc-client"}, string_data={"clientSecret": value})
    core = client.CoreV1Api(api)
    try:
        core.create_namespaced_secret(namespace, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_secret("oidc-client", namespace, body)


def error_of(answer: httpx.Response, status: int) -> dict[str, object]:
    assert answer.status_code == status, answer.text
    error: dict[str, object] = answer.json()["error"]
    return error


def test_public_is_the_default_a_fresh_environment_chats_without_sign_in(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel, open_tab: Callable[..., Tab]
) -> None:
    bot = deploy_bot(api, namespace, model)  # spec.access absent
    assert "access" not in get(api, namespace, "environments", "bot-draft")["spec"]
    tab = open_tab(PHONE)
    page = tab.page
    page.goto(bot.status["urls"]["webClientUrl"])
    model.script(Reply(text="Hello, anonymous visitor."))
    page.get_by_label("Message", exact=True).fill("Hi")
    page.keyboard.press("Enter")
    page.get_by_text("Hello, anonymous visitor.").wait_for()
    assert page.get_by_role("button", name="Sign in").count() == 0
    end_user = page.evaluate("Object.values(localStorage).map(v => JSON.parse(v).endUser).join()")
    assert str(end_user).startswith("anon-")
    assert not tab.errors, tab.errors


def test_oidc_sign_in_over_http_with_its_refusals(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel, tmp_path: Path
) -> None:
    base = f"{facade.url}/e/{namespace}/bot-draft"
    secret = secrets.token_urlsafe(16)
    client_secret(api, namespace, secret)
    with run_provider(tmp_path, [(CLIENT_ID, secret, [f"{base}/web/oidc/callback"])]) as provider:
        oidc = {"issuer": provider.issuer, "clientId": CLIENT_ID, "clientSecretRef": "oidc-client"}
        bot = deploy_bot(api, namespace, model, access={"webClient": "oidc", "oidc": oidc})
        assert bot.base == base
        with pytest.raises(ApiException) as refused:  # the CEL rule: oidc needs its provider
            patch(api, namespace, "environments", "bot-draft", {"spec": {"access": {"oidc": None}}})
        assert refused.value.status == 422
        assert "spec.access.oidc" in str(refused.value.body)

        http, origin = facade.http, {"Origin": facade.url}
        needed = error_of(http.post(f"{base}/web/token", json={}, headers=origin), 401)
        assert needed["details"] == {"reason": "sign_in_required", "signIn": "oidc", "signInUrl": "oidc/login"}

        browser = httpx.Client(timeout=30)
        login = browser.get(f"{base}/web/oidc/login")
        assert login.status_code == 303
        to = login.headers["location"]
        assert to.startswith(f"{provider.url}/auth?")
        assert "code_challenge_method=S256" in to
        assert "nonce=" in to
        callback = sign_in_over_http(browser, f"{base}/web/oidc/login")
        token = handed_token(callback)
        assert callback.headers["location"].startswith(f"{base}/web/#")

        # the page confirms the token it was handed, then chats as the signed-in user
        confirmed = http.post(f"{base}/web/token", json={}, headers={**origin, "Authorization": f"Bearer {token}"})
        assert confirmed.status_code == 200, confirmed.text
        assert confirmed.json()["endUser"] == f"oidc:{USER_EMAIL}"
        assert confirmed.json()["signedInAs"] == USER_EMAIL
        model.script(Reply(text="Hello, signed-in user."))
        execute = f"{base}/v1/apps/bot/execute"
        bearer = {"Authorization": f"Bearer {token}"}
        answer = http.post(execute, json={"message": "hi"}, headers=bearer)
        assert answer.status_code == 200, answer.text
        assert "Hello, signed-in user." in answer.text

        # the callback replayed: its sign-in is over (the cookie is gone) -> 400, a readable page for a browser
        replay = browser.get(str(callback.url))
        assert error_of(replay, 400)["code"] == "bad_state"
        page = browser.get(str(callback.url), headers={"Accept": "text/html"})
        assert page.status_code == 400
        assert "Sign-in failed" in page.text
        assert "Back to the chat" in page.text
        forged = browser.get(f"{base}/web/oidc/callback?code=x&state=forged")
        assert error_of(forged, 400)["code"] == "bad_state"

        # a wrong client secret: the provider refuses the code exchange
        client_secret(api, namespace, "not-the-secret")
        wrong = sign_in_over_http(httpx.Client(timeout=30), f"{base}/web/oidc/login")
        assert error_of(wrong, 401)["details"]["reason"] == "code_refused"  # type: ignore[index]
        client_secret(api, namespace, secret)

        # a public client: no secret, PKCE alone binds the code to this sign-in
        with run_provider(tmp_path, [("dockyard-spa", "", [f"{base}/web/oidc/callback"])]) as spa:
            public = {"issuer": spa.issuer, "clientId": "dockyard-spa", "clientSecretRef": None}
            patch(api, namespace, "environments", "bot-draft", {"spec": {"access": {"oidc": public}}})
            spa_token = handed_token(sign_in_over_http(httpx.Client(timeout=30), f"{base}/web/oidc/login"))
            spa_bearer = {**origin, "Authorization": f"Bearer {spa_token}"}
            assert http.post(f"{base}/web/token", json={}, headers=spa_bearer).json()["signedInAs"] == USER_EMAIL
        patch(api, namespace, "environments", "bot-draft", {"spec": {"access": {"oidc": oidc}}})

        # another issuer: a provider whose discovery names another issuer than the one configured
        clients = [(CLIENT_ID, secret, [f"{base}/web/oidc/callback"])]
        with run_provider(tmp_path, clients, issuer_host="localhost") as other:
            patch(api, namespace, "environments", "bot-draft", {"spec": {"access": {"oidc": {"issuer": other.url}}}})
            error = error_of(httpx.get(f"{base}/web/oidc/login"), 401)
            assert error["details"]["reason"] == "wrong_issuer"  # type: ignore[index]
            assert error["details"]["field"] == "spec.access.oidc.issuer"  # type: ignore[index]
        # a provider that is not there
        gone = f"http://127.0.0.1:{free_port()}"
        patch(api, namespace, "environments", "bot-draft", {"spec": {"access": {"oidc": {"issuer": gone}}}})
        assert error_of(httpx.get(f"{base}/web/oidc/login"), 502)["code"] == "provider_unreachable"
        # sign-ins started count against the per-address token limit (each may make the facade ask the provider)
        patch(api, namespace, "environments", "bot-draft", {"spec": {"widget": {"tokensPerMinutePerAddress": 1}}})
        limited = [httpx.get(f"{base}/web/oidc/login") for _ in range(2)][-1]
        assert error_of(limited, 429)["code"] == "rate_limited"
        assert int(limited.headers["retry-after"]) > 0

        # access switched away from oidc: the signed-in token is refused at once
        patch(api, namespace, "environments", "bot-draft", {"spec": {"access": {"webClient": "kubernetes"}}})
        changed = error_of(http.post(execute, json={"message": "hi"}, headers=bearer), 401)
        assert changed["details"] == {"reason": "access_changed"}
        assert error_of(httpx.get(f"{base}/web/oidc/login"), 401)["details"]["reason"] == "access_changed"  # type: ignore[index]
        patch(api, namespace, "environments", "bot-draft", {"spec": {"access": {"webClient": "disabled"}}})
        assert error_of(http.post(execute, json={"message": "hi"}, headers=bearer), 401)["details"] == {
            "reason": "access_changed"
        }
        assert http.get(f"{base}/web/").status_code == 404


def test_oidc_web_client_in_the_browser_signs_in_at_the_provider_and_chats(
    api: client.ApiClient,
    namespace: str,
    facade: Facade,
    model: ScriptedModel,
    open_tab: Callable[..., Tab],
    tmp_path: Path,
) -> None:
    base = f"{facade.url}/e/{namespace}/bot-draft"
    secret = secrets.token_urlsafe(16)
    client_secret(api, namespace, secret)
    with run_provider(tmp_path, [(CLIENT_ID, secret, [f"{base}/web/oidc/callback"])]) as provider:
        oidc = {"issuer": provider.issuer, "clientId": CLIENT_ID, "clientSecretRef": "oidc-client"}
        bot = deploy_bot(api, namespace, model, access={"webClient": "oidc", "oidc": oidc})
        url = bot.status["urls"]["webClientUrl"]
        tab = open_tab(PHONE)
        page = tab.page
        page.goto(url)
        sign_in = page.get_by_role("button", name="Sign in")
        sign_in.wait_for()
        assert "OpenID provider" in page.get_by_role("alert").inner_text()
        assert page.get_by_label("Message", exact=True).is_disabled()
        tab.shot("web-client-oidc-sign-in")
        sign_in.click()
        page.wait_for_url(f"{provider.url}/login/**")  # the provider's own login form
        page.get_by_label("Username:").fill(USER)
        page.get_by_label("Password:").fill(PASSWORD)
        page.get_by_role("button", name="Login").click()
        page.wait_for_url(url + "**")  # back on the web client
        wait_for(lambda: page.url == url, timeout=10, what="the handed-over token to leave the address")
        message = page.get_by_label("Message", exact=True)
        wait_for(message.is_enabled, timeout=10, what="the chat to be enabled after the sign-in")
        model.script(Reply(text="Welcome back, signed-in user."))
        message.fill("Hello")
        page.keyboard.press("Enter")
        page.get_by_text("Welcome back, signed-in user.").wait_for()
        stored = str(page.evaluate("JSON.stringify(localStorage)"))
        assert f"oidc:{USER_EMAIL}" in stored
        tab.shot("web-client-oidc-signed-in")
        assert not tab.errors, tab.errors
