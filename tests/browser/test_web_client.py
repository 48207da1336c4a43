"""The web client page (the environment's webClientUrl) in Chromium, on a phone-sized viewport."""

from __future__ import annotations

from collections.abc import Callable

from kubernetes import client

from tests.browser.conftest import Facade, Site, Tab, deploy_bot
from tests.support.dockyard import patch
from tests.support.scripted_model import Call, Reply, ScriptedModel
from tests.support.waiting import wait_for

PHONE = {"width": 390, "height": 760}
FOCUSED = """() => { let a = document.activeElement;
  while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
  if (!a) return null;
  return a.getAttribute('aria-label') || (a.labels && a.labels.length ? a.labels[0].textContent : a.tagName); }"""


def test_public_web_client_streams_replies_themes_and_new_conversation(
    api: client.ApiClient,
    namespace: str,
    facade: Facade,
    model: ScriptedModel,
    allowed_site: Site,
    open_tab: Callable[..., Tab],
) -> None:
    bot = deploy_bot(
        api, namespace, model, access={"webClient": "public"}, widget={"allowedOrigins": [allowed_site.origin]}
    )
    url = bot.status["urls"]["webClientUrl"]
    assert url == f"{facade.url}/e/{namespace}/bot-draft/web/"
    tab = open_tab(PHONE)
    page = tab.page
    response = page.goto(url)
    assert response is not None
    assert response.status == 200
    csp = response.headers["content-security-policy"]
    assert f"frame-ancestors 'self' {allowed_site.origin}" in csp  # the widget's sites may frame the page
    assert "script-src 'self'" in csp

    # labels, and the keyboard: the input has the focus, Tab reaches Send
    message = page.get_by_label("Message", exact=True)
    message.wait_for()
    for name in ("Send message", "New conversation", "Switch theme"):
        assert page.get_by_role("button", name=name).is_visible()
    page.get_by_role("log", name="Conversation").wait_for()
    message.focus()
    page.keyboard.press("Tab")
    assert page.evaluate(FOCUSED) == "Send message"

    # a message: the reply streams in, with the agent that answered and the tools it used
    model.script(
        Reply(calls=[Call("weather", {"city": "Oslo"})], usage=(30, 5)),
        Reply(text="It is 12 degrees in Oslo. Bring a jacket.", usage=(45, 9), pieces=6),
    )
    message.fill("Weather in Oslo?")
    page.keyboard.press("Enter")
    page.get_by_text("It is 12 degrees in Oslo. Bring a jacket.").wait_for()
    page.get_by_text("Answered by helper · tools: weather").wait_for()
    assert page.get_by_text("Type a message below to start a conversation.").count() == 0  # the hint is gone
    assert model.bodies()[-1]["stream"] is True  # the page asked for a streamed answer end to end
    box = page.get_by_role("button", name="Send message").bounding_box()
    assert box is not None
    assert box["x"] + box["width"] <= PHONE["width"]  # fits the phone's width
    tab.shot("web-client-light")

    # dark theme, kept across a reload together with the conversation
    page.get_by_role("button", name="Switch theme").click()
    theme = page.locator("div[data-theme]")
    assert theme.get_attribute("data-theme") == "dark"
    page.reload()
    page.get_by_text("It is 12 degrees in Oslo. Bring a jacket.").wait_for()
    assert page.locator("div[data-theme]").get_attribute("data-theme") == "dark"
    tab.shot("web-client-dark")

    # a new conversation: the history is gone, and the model gets none
    page.get_by_role("button", name="New conversation").click()
    wait_for(lambda: page.get_by_text("Bring a jacket").count() == 0, timeout=5, what="the conversation to clear")
    model.reset()
    model.script(Reply(text="Hello, new friend.", usage=(5, 3)))
    page.get_by_label("Message", exact=True).fill("Hello")
    page.get_by_role("button", name="Send message").click()
    page.get_by_text("Hello, new friend.").wait_for()
    assert [m["content"] for m in model.bodies()[0]["messages"] if m["role"] == "user"] == ["Hello"]
    assert not tab.errors, tab.errors


def test_sign_in_web_client_needs_a_kubernetes_user_and_disabled_is_404(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel, open_tab: Callable[..., Tab]
) -> None:
    bot = deploy_bot(api, namespace, model, access={"webClient": "kubernetes"})
    url = bot.status["urls"]["webClientUrl"]
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata={"name": "reader"}))
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata={"name": "env-reader"},
            rules=[client.V1PolicyRule(api_groups=["dockyard.dev"], resources=["environments"], verbs=["get"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata={"name": "env-reader"},
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="env-reader"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)],
        ),
    )
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata={"name": "stranger"}))
    reader = core.create_namespaced_service_account_token(
        "reader", namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    ).status.token
    stranger = core.create_namespaced_service_account_token(
        "stranger", namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    ).status.token

    tab = open_tab(PHONE)
    page = tab.page
    page.goto(url)
    field = page.get_by_label("Kubernetes token")
    field.wait_for()
    assert "sign-in" in page.get_by_role("alert").inner_text()
    assert page.get_by_label("Message", exact=True).is_disabled()
    field.fill(stranger)  # a real user, without RBAC on the environment
    page.get_by_role("button", name="Sign in").click()
    wait_for(lambda: "cannot get environments" in page.get_by_role("alert").inner_text(), timeout=10, what="403")
    tab.shot("web-client-sign-in")
    field.fill(reader)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_label("Kubernetes token").wait_for(state="detached")
    model.script(Reply(text="Signed in and answering."))
    page.get_by_label("Message", exact=True).fill("Hi")
    page.keyboard.press("Enter")
    page.get_by_text("Signed in and answering.").wait_for()
    assert reader not in str(page.evaluate("JSON.stringify(localStorage)"))  # only the short-lived token is kept

    # the management API shows the Embed Code next to the cURL script (as the reader, who may get the environment)
    view = facade.http.get(
        f"/api/v1/namespaces/{namespace}/environments/bot-draft", headers={"Authorization": f"Bearer {reader}"}
    )
    assert view.status_code == 200, view.text
    assert view.json()["embedCode"] == bot.status["embedCode"]
    assert view.json()["curlScript"]

    patch(api, namespace, "environments", "bot-draft", {"spec": {"access": {"webClient": "disabled"}}})
    gone = facade.http.get(url)
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "not_found"
    assert not tab.errors, tab.errors
