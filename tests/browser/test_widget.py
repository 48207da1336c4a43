"""The embeddable widget (docs/web-client-and-widget.md) in Chromium, on host pages of other origins than the facade."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from kubernetes import client

from tests.browser.conftest import Bot, Facade, Site, Tab, api_key, deploy_bot
from tests.support.dockyard import patch
from tests.support.scripted_model import Call, Reply, ScriptedModel
from tests.support.waiting import wait_for

FOCUSED = """() => { let a = document.activeElement;
  while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
  if (!a) return null;
  return a.getAttribute('aria-label') || (a.labels && a.labels.length ? a.labels[0].textContent : a.tagName); }"""
STORED = (
    "() => Object.entries(localStorage).filter(([k]) => k.startsWith('dockyard-chat:')).map(([, v]) => JSON.parse(v))"
)


def widget_spec(*origins: str) -> dict[str, Any]:
    return {"widget": {"allowedOrigins": list(origins), "tokensPerMinutePerAddress": 1000}}


def styled_page(bot: Bot) -> str:
    """A page that calls init() itself with every SPEC option."""
    script = bot.status["urls"]["widgetScriptUrl"]
    return f"""<!doctype html><html lang="en"><head><title>Shop: styled</title></head><body>
<h1>Shop</h1><p>Our products.</p><div id="chat-here"></div>
<script src="{script}" onload="DockyardChat.init({{appId: 'bot', containerId: 'chat-here', theme: 'dark',
  position: 'bottom-left', greeting: 'Hi! Ask me about the weather.'}})"></script></body></html>"""


def snippet_page(bot: Bot, title: str) -> str:
    """A page with the environment's embed code pasted verbatim."""
    return f"""<!doctype html><html lang="en"><head><title>{title}</title></head><body>
<h1>{title}</h1>{bot.status["embedCode"]}</body></html>"""


def stored(tab: Tab) -> dict[str, Any]:
    found: list[dict[str, Any]] = tab.page.evaluate(STORED)
    assert len(found) == 1, found
    return found[0]


def test_widget_on_another_site_answers_keeps_the_conversation_and_reset_starts_a_new_one(
    api: client.ApiClient,
    namespace: str,
    facade: Facade,
    model: ScriptedModel,
    allowed_site: Site,
    open_tab: Callable[..., Tab],
) -> None:
    bot = deploy_bot(api, namespace, model, **widget_spec(allowed_site.origin))
    assert "data-api-key=" not in bot.status["embedCode"]
    allowed_site.pages["/styled"] = styled_page(bot)
    allowed_site.pages["/"] = snippet_page(bot, "Shop home")
    tab = open_tab()
    page = tab.page
    page.goto(allowed_site.url("/styled"))

    # init options: position bottom-left, dark theme, greeting; keyboard: Tab reaches the launcher first
    launcher = page.get_by_role("button", name="Chat", exact=True)
    launcher.wait_for()
    box = launcher.bounding_box()
    assert box is not None
    assert box["x"] < 100, box
    assert box["y"] > 760 - 100, box
    assert page.locator("div[data-position]").get_attribute("data-position") == "bottom-left"
    assert page.locator("div[data-theme]").get_attribute("data-theme") == "dark"
    page.keyboard.press("Tab")
    assert page.evaluate(FOCUSED) == "Chat"
    page.keyboard.press("Enter")
    assert launcher.get_attribute("aria-expanded") == "true"
    assert page.evaluate(FOCUSED) == "Message"  # the input gets the focus, then the send button
    page.keyboard.press("Tab")
    assert page.evaluate(FOCUSED) == "Send message"
    order = []
    for _ in range(4):
        page.keyboard.press("Shift+Tab")
        order.append(page.evaluate(FOCUSED))
    assert order == ["Message", "Conversation", "Close chat", "New conversation"], order
    page.get_by_text("Hi! Ask me about the weather.").wait_for()

    # a message goes through a widget token (no API key anywhere) and the streamed reply shows agent and tools
    model.script(
        Reply(calls=[Call("weather", {"city": "Oslo"})], usage=(30, 5)),
        Reply(text="It is 12 degrees in Oslo.", usage=(45, 9), pieces=4),
    )
    page.get_by_label("Message", exact=True).fill("Weather in Oslo?")
    page.keyboard.press("Enter")
    page.get_by_text("It is 12 degrees in Oslo.").wait_for()
    page.get_by_text("Answered by helper · tools: weather").wait_for()
    first = stored(tab)
    assert first["token"].startswith("dyw1.")
    assert first["endUser"].startswith("anon-")
    assert first["sessionId"]
    assert "dk_" not in page.content()
    tab.shot("widget-answered")

    # reloading keeps the conversation, and the server continues the same session (history sent to the model)
    page.reload()
    page.get_by_text("It is 12 degrees in Oslo.").wait_for()
    model.reset()
    model.script(Reply(text="Tomorrow too.", usage=(50, 3)))
    page.get_by_label("Message", exact=True).fill("And tomorrow?")
    page.get_by_role("button", name="Send message").click()
    page.get_by_text("Tomorrow too.").wait_for()
    sent = model.bodies()[0]["messages"]
    assert {"role": "user", "content": "Weather in Oslo?"} in sent
    assert stored(tab)["sessionId"] == first["sessionId"]

    # another page of the same site, with the embed code verbatim: the same conversation, default theme
    page.goto(allowed_site.url("/"))
    page.get_by_text("Tomorrow too.").wait_for()
    assert page.locator("div[data-theme]").get_attribute("data-theme") == "light"
    assert page.locator("div[data-position]").get_attribute("data-position") == "bottom-right"
    tab.shot("widget-other-page")

    # reset(): a new conversation (no history reaches the model, a new session id)
    assert page.evaluate("DockyardChat.reset()") is True
    wait_for(lambda: page.get_by_text("Tomorrow too.").count() == 0, timeout=5, what="the old conversation to go")
    model.reset()
    model.script(Reply(text="Hello again!", usage=(5, 2)))
    page.get_by_label("Message", exact=True).fill("Hi")
    page.keyboard.press("Enter")
    page.get_by_text("Hello again!").wait_for()
    assert [m["content"] for m in model.bodies()[0]["messages"] if m["role"] == "user"] == ["Hi"]
    # the widget stores the new session id when the streamed answer ends, a moment after its text shows
    new_session = wait_for(lambda: stored(tab)["sessionId"], timeout=10, what="the new session id to be stored")
    assert new_session != first["sessionId"]

    # Escape closes the panel and gives the focus back to the launcher; open() / close() drive it too
    page.get_by_label("Message", exact=True).focus()
    page.keyboard.press("Escape")
    assert page.get_by_role("button", name="Chat", exact=True).get_attribute("aria-expanded") == "false"
    assert page.evaluate(FOCUSED) == "Chat"
    assert page.evaluate("DockyardChat.open()") is True
    assert page.get_by_role("dialog").is_visible()
    assert page.evaluate("DockyardChat.close()") is True
    assert not tab.errors, tab.errors


def test_a_site_that_is_not_allowed_gets_no_token_and_sees_why(
    api: client.ApiClient,
    namespace: str,
    facade: Facade,
    model: ScriptedModel,
    allowed_site: Site,
    other_site: Site,
    open_tab: Callable[..., Tab],
) -> None:
    bot = deploy_bot(api, namespace, model, **widget_spec(allowed_site.origin))
    other_site.pages["/"] = snippet_page(bot, "Not allowed")
    other_site.pages["/missing"] = (
        f'<!doctype html><html><body><script src="{bot.status["urls"]["widgetScriptUrl"]}" '
        "onload=\"window.result = DockyardChat.init({appId: 'bot', containerId: 'nope'})\"></script></body></html>"
    )
    tab = open_tab()
    page = tab.page
    statuses: list[tuple[str, int]] = []
    page.on("response", lambda r: statuses.append((r.url, r.status)) if "/widget/token" in r.url else None)
    page.goto(other_site.url("/"))
    page.get_by_role("button", name="Chat", exact=True).click()
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert f"This site ({other_site.origin}) is not allowed to use this chat" in alert.inner_text()
    assert page.get_by_label("Message", exact=True).is_disabled()
    assert [s for _, s in statuses] == [403]
    assert any("not allowed" in line for line in tab.console if line.startswith("error")), tab.console
    assert stored(tab).get("token") is None
    tab.shot("widget-not-allowed")

    # a container that does not exist: a clear console error, nothing thrown into the host page
    page.goto(other_site.url("/missing"))
    wait_for(lambda: page.evaluate("window.result") is False, timeout=10, what="init() to answer false")
    assert any('no element with id "nope"' in line for line in tab.console), tab.console
    assert not tab.errors, tab.errors


def test_tokens_origins_cors_and_identify_at_the_http_level(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel, allowed_site: Site
) -> None:
    bot = deploy_bot(api, namespace, model, **widget_spec(allowed_site.origin))
    base = bot.base
    http = facade.http
    origin = {"Origin": allowed_site.origin}
    evil = {"Origin": "http://127.0.0.3:9"}
    token_url = f"{base}/v1/widget/token"
    execute = f"{base}/v1/apps/bot/execute"

    # the token endpoint answers every site readably (CORS), and gives tokens to allowed ones only
    refused = http.post(token_url, json={"appId": "bot"}, headers=evil)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["details"]["reason"] == "origin_not_allowed"
    assert refused.headers["access-control-allow-origin"] == evil["Origin"]
    assert http.post(token_url, json={"appId": "bot"}).status_code == 403  # no Origin: not a page of a site
    assert http.post(token_url, json={"appId": "other"}, headers=origin).status_code == 404
    assert http.post(token_url, json={"appId": "bot", "endUser": "alice"}, headers=origin).status_code == 403
    assert http.post(token_url, json={"appId": "bot", "x": 1}, headers=origin).status_code == 422
    issued = http.post(token_url, json={"appId": "bot"}, headers=origin).json()
    assert issued["endUser"].startswith("anon-")
    assert 0 < issued["expiresIn"] <= 900
    renewed = http.post(token_url, json={"appId": "bot", "previousToken": issued["token"]}, headers=origin).json()
    assert renewed["endUser"] == issued["endUser"]  # a renewal keeps the anonymous user (and their sessions)

    # CORS of the deployed-app API: allowed sites only
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    ok = http.options(execute, headers={**origin, **preflight})
    assert ok.status_code == 204
    assert ok.headers["access-control-allow-origin"] == allowed_site.origin
    no = http.options(execute, headers={**evil, **preflight})
    assert no.status_code == 403
    assert "access-control-allow-origin" not in no.headers

    # a widget token calls the app as its end user; the session is theirs only
    model.script(Reply(text="Hi anon!"))
    bearer = {"Authorization": f"Bearer {issued['token']}", **origin}
    answer = http.post(execute, json={"message": "hi", "metadata": {"user_id": "mallory"}}, headers=bearer)
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == allowed_site.origin
    session = answer.json()["session_id"]
    stolen = http.post(execute, json={"message": "hi", "session_id": session}, headers={**bearer, **evil})
    assert stolen.status_code == 403  # a token used from a site that is not allowed
    assert (
        http.post(execute, json={"message": "x"}, headers={"Authorization": "Bearer dyw1.e30.AAAA"}).status_code == 401
    )

    # identify: the site's server (API key) gets a token for its signed-in user; it cannot read anon's session
    key = api_key(api, namespace, bot.environment)
    server = {"Authorization": f"Bearer {key}"}
    user = http.post(token_url, json={"appId": "bot", "endUser": "alice"}, headers=server).json()
    assert user["endUser"] == "user:alice"
    as_alice = {"Authorization": f"Bearer {user['token']}"}
    theft = http.post(execute, json={"message": "hi", "session_id": session}, headers=as_alice)
    assert theft.status_code == 404, theft.text

    # limits: per end user (token) and per client address, 429 with Retry-After
    strict = {"requestsPerMinutePerToken": 1, "tokensPerMinutePerAddress": 1}
    patch(api, namespace, "environments", bot.environment, {"spec": {"widget": strict}})
    limited = http.post(execute, json={"message": "again", "session_id": session}, headers=bearer)
    assert limited.status_code == 429, limited.text
    assert "requestsPerMinutePerToken" in limited.json()["error"]["message"]
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    no_more = http.post(token_url, json={"appId": "bot"}, headers=origin)
    assert no_more.status_code == 429, no_more.text
    assert "tokensPerMinutePerAddress" in no_more.json()["error"]["message"]

    # the loader: JavaScript, cacheable, versioned by ETag, gzip
    loader = httpx.get(bot.status["urls"]["widgetScriptUrl"], headers={"Accept-Encoding": "gzip"})
    assert loader.headers["content-type"].startswith("text/javascript")
    assert loader.headers["content-encoding"] == "gzip"
    assert "max-age=" in loader.headers["cache-control"]
    again = httpx.get(bot.status["urls"]["widgetScriptUrl"], headers={"If-None-Match": loader.headers["etag"]})
    assert again.status_code == 304


def test_data_api_key_still_works_but_warns(
    api: client.ApiClient,
    namespace: str,
    facade: Facade,
    model: ScriptedModel,
    allowed_site: Site,
    open_tab: Callable[..., Tab],
) -> None:
    bot = deploy_bot(api, namespace, model, **widget_spec(allowed_site.origin))
    key = api_key(api, namespace, bot.environment)
    allowed_site.pages["/"] = snippet_page(bot, "Keyed").replace(
        ' data-app-id="bot"', f' data-api-key="{key}" data-app-id="bot"'
    )
    tab = open_tab({"width": 390, "height": 760})  # a phone: the open panel takes the whole screen
    page = tab.page
    page.goto(allowed_site.url("/"))
    page.get_by_role("button", name="Chat", exact=True).click()
    panel = page.get_by_role("dialog").bounding_box()
    assert panel is not None
    assert (panel["x"], panel["y"], panel["width"], panel["height"]) == (0, 0, 390, 760)
    model.script(Reply(text="Answered with a key."))
    page.get_by_label("Message", exact=True).fill("Hi")
    page.keyboard.press("Enter")
    page.get_by_text("Answered with a key.").wait_for()
    assert any("every visitor can read it" in line for line in tab.console if line.startswith("warning")), tab.console
    assert not tab.errors, tab.errors


def test_the_snippet_with_the_users_key_chats_on_any_site_until_the_owner_restricts_the_sites(
    api: client.ApiClient,
    namespace: str,
    facade: Facade,
    model: ScriptedModel,
    allowed_site: Site,
    other_site: Site,
    open_tab: Callable[..., Tab],
) -> None:
    """SPEC §7 as written: the user inserts the key into the Embed Code and pastes it into a page of a site
    nobody configured (allowedOrigins empty): it chats. Once the owner lists other sites, it says why not."""
    bot = deploy_bot(api, namespace, model)  # no widget settings: no origin configured beforehand
    key = api_key(api, namespace, bot.environment)
    keyed = snippet_page(bot, "Any site").replace(' data-app-id="bot"', f' data-api-key="{key}" data-app-id="bot"')
    assert keyed != snippet_page(bot, "Any site")  # the key went into the generated snippet verbatim
    other_site.pages["/"] = keyed
    allowed_site.pages["/keyless"] = snippet_page(bot, "No key")  # another site nobody listed either
    tab = open_tab()
    page = tab.page
    page.goto(other_site.url("/"))
    page.get_by_role("button", name="Chat", exact=True).click()
    model.script(Reply(text="Hello from any site."))
    page.get_by_label("Message", exact=True).fill("Hi")
    page.keyboard.press("Enter")
    page.get_by_text("Hello from any site.").wait_for()
    assert any("every visitor can read it" in line for line in tab.console if line.startswith("warning")), tab.console
    tab.shot("widget-key-any-site")

    # the key-less snippet on the same unlisted site: the token flow is unchanged (listed sites only)
    page.goto(allowed_site.url("/keyless"))
    page.get_by_role("button", name="Chat", exact=True).click()
    keyless = page.get_by_role("alert")
    keyless.wait_for()
    assert f"This site ({allowed_site.origin}) is not allowed to use this chat" in keyless.inner_text()

    # at the HTTP level: CORS and the key answer any site while the list is empty
    http = facade.http
    execute = f"{bot.base}/v1/apps/bot/execute"
    anywhere = {"Origin": other_site.origin}
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    ok = http.options(execute, headers={**anywhere, **preflight})
    assert (ok.status_code, ok.headers.get("access-control-allow-origin")) == (204, other_site.origin)
    model.script(Reply(text="Keyed."))
    keyed_call = {"Authorization": f"Bearer {key}", **anywhere}
    answer = http.post(execute, json={"message": "hi"}, headers=keyed_call)
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == other_site.origin

    # the owner restricts the sites to another one: the same page now shows the refusal
    patch(api, namespace, "environments", bot.environment, {"spec": widget_spec(allowed_site.origin)})
    refused = http.post(execute, json={"message": "hi"}, headers=keyed_call)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["details"]["reason"] == "origin_not_allowed"
    assert http.options(execute, headers={**anywhere, **preflight}).status_code == 403
    model.script(Reply(text="Keyed from a server."))
    assert http.post(execute, json={"message": "hi"}, headers={"Authorization": f"Bearer {key}"}).status_code == 200
    tab = open_tab()
    page = tab.page
    page.goto(other_site.url("/"))
    assert page.evaluate("DockyardChat.open()") is True  # (the conversation above left it open, stored)
    page.get_by_label("Message", exact=True).fill("Hi again")
    page.keyboard.press("Enter")
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert f"This site ({other_site.origin}) is not allowed to use this chat" in alert.inner_text()
    assert page.get_by_label("Message", exact=True).is_disabled()
    assert any("allowedOrigins" in line for line in tab.console if line.startswith("error")), tab.console
    tab.shot("widget-key-restricted")
    assert not tab.errors, tab.errors


def test_identify_switches_to_the_sites_signed_in_user(
    api: client.ApiClient,
    namespace: str,
    facade: Facade,
    model: ScriptedModel,
    allowed_site: Site,
    open_tab: Callable[..., Tab],
) -> None:
    bot = deploy_bot(api, namespace, model, **widget_spec(allowed_site.origin))
    allowed_site.pages["/"] = snippet_page(bot, "Signed-in shop")
    key = api_key(api, namespace, bot.environment)  # the site's server holds the key, never the page
    issued = facade.http.post(
        f"{bot.base}/v1/widget/token",
        json={"appId": "bot", "endUser": "customer-4711"},
        headers={"Authorization": f"Bearer {key}"},
    ).json()
    tab = open_tab()
    page = tab.page
    page.goto(allowed_site.url("/"))
    page.get_by_role("button", name="Chat", exact=True).click()
    model.script(Reply(text="Hello, visitor."))
    page.get_by_label("Message", exact=True).fill("Hi")
    page.keyboard.press("Enter")
    page.get_by_text("Hello, visitor.").wait_for()
    assert stored(tab)["endUser"].startswith("anon-")
    assert page.evaluate("(t) => DockyardChat.identify(t)", issued) is True
    wait_for(lambda: page.get_by_text("Hello, visitor.").count() == 0, timeout=5, what="a new conversation")
    model.script(Reply(text="Hello, customer."))
    page.get_by_label("Message", exact=True).fill("Hi again")
    page.keyboard.press("Enter")
    page.get_by_text("Hello, customer.").wait_for()
    state = stored(tab)
    assert (state["endUser"], state["identified"], state["token"]) == ("user:customer-4711", True, issued["token"])
    assert page.evaluate("DockyardChat.identify({token: 'not-a-token'})") is False  # a console error, no throw
    assert page.evaluate("DockyardChat.identify(null)") is True
    assert stored(tab)["token"] is None
    assert not tab.errors, tab.errors
