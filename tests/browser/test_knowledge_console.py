"""The console's Knowledge bases pages in Debian's Chromium (docs/knowledge-bases.md, docs/console.md), against
the real operator (indexing runs as host processes, ``knowledge_runs: local``) and facade on the local control
plane, as alice (the chart's editor role): the list with the index state, a version's page; a Markdown
document uploaded and indexed (state, chunks, documents, last indexed), an unreadable PDF refused with the
reason, a document deleted and gone from the index; vic (a viewer) sees the page and may not delete."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import Facade, deploy_bot
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create, get, patch
from tests.support.knowledge import local_knowledge_runs
from tests.support.runners import run_local_runtime
from tests.support.scripted_model import Call, Reply, ScriptedModel
from tests.support.users import Users
from tests.support.waiting import wait_for

GUIDE = "# Harbour guide\n\n## Pilots\n\nA pilot boards every ship at buoy 3.\n\n## Fees\n\nBerthing costs 40 euros.\n"
BROKEN_PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R"
SHOTS = os.environ.get("DOCKYARD_CONSOLE_SCREENSHOTS")


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, crds: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Facade]:
    """The operator (indexing as host processes, the facade's model store) and the facade."""
    state = tmp_path_factory.mktemp("kb-console")
    with run_local_runtime(state, local_knowledge_runs(state)) as (url, running):
        yield Facade(url, running.client)


def _sign_in(page: Page, facade: Facade, token: str, namespace: str) -> None:
    page.goto(f"{facade.url}/console/")
    page.get_by_label("Kubernetes token").fill(token)
    page.get_by_label("Namespace").fill(namespace)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Apps", exact=True)).to_be_visible()


def _shot(page: Page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"console-{name}.png"), full_page=True)


def _row(page: Page, document: str) -> list[str]:
    row = page.locator("tbody tr", has_text=document)
    return [row.locator("td").nth(i).inner_text().strip() for i in range(5)]


def test_knowledge_base_pages_upload_index_refuse_and_delete(
    api: client.ApiClient,
    namespace: str,
    facade: Facade,
    team: Users,
    browser: Browser,
    model: ScriptedModel,
    tmp_path: Path,
) -> None:
    create(api, namespace, "knowledgebases", "KnowledgeBase", "harbour-1.0.0",
           {"name": "harbour", "version": "1.0.0", "description": "Port rules and fees",
            "retrieval": {"mode": "keyword", "topK": 3}})  # fmt: skip
    wait_for(lambda: (get(api, namespace, "knowledgebases", "harbour-1.0.0").get("status") or {}).get("phase")
             == "Ready", timeout=60, what="the empty knowledge base indexed")  # fmt: skip
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(30_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    _sign_in(page, facade, team.tokens["alice"], namespace)

    page.get_by_role("link", name="Knowledge bases").click()
    expect(page.get_by_role("heading", name="Knowledge bases", exact=True)).to_be_visible()
    table = page.get_by_role("table", name="Knowledge base versions")
    expect(table).to_contain_text("harbour")
    expect(table).to_contain_text("Port rules and fees")
    expect(table.locator("tbody tr").first.locator("td").nth(2)).to_have_text("Ready")
    page.get_by_role("link", name="harbour").click()
    expect(page.get_by_role("heading", name="harbour 1.0.0")).to_be_visible()
    expect(page.locator("#kb-documents")).to_have_text("0")

    # upload a Markdown document: added, then indexed (the page refreshes while it is pending)
    guide = tmp_path / "guide.md"
    guide.write_text(GUIDE)
    page.get_by_label("Text, Markdown, HTML or PDF", exact=False).set_input_files(str(guide))
    page.get_by_role("button", name="Upload and index").click()
    expect(page.get_by_role("status").first).to_contain_text("guide.md added")
    expect(page.locator("tbody tr", has_text="guide.md").locator("td").nth(1)).to_have_text("indexed", timeout=60_000)
    expect(page.locator("#kb-documents")).to_have_text("1")
    expect(page.locator("#kb-phase")).to_have_text("Ready")
    name, state, chunks, size, error = _row(page, "guide.md")
    assert (name, state, error) == ("guide.md", "indexed", "")
    assert int(chunks) >= 2, chunks  # a chunk per section
    assert size.endswith("B"), size
    assert page.locator("#kb-last-indexed").inner_text() != "—"
    assert int(page.locator("#kb-chunks").inner_text()) == int(chunks)
    _shot(page, "knowledge-base")
    status = get(api, namespace, "knowledgebases", "harbour-1.0.0")["status"]
    assert (status["documents"], status["chunks"]) == (1, int(chunks))

    # the web client (the widget's page) lists the sources of an answer that searched the knowledge base
    bot = deploy_bot(api, namespace, model, access={"webClient": "public"})
    agent = {"name": "helper", "version": "1.0.0", "instructions": "You are helpful.", "model": "tiny",
             "knowledgeBases": ["harbour"]}  # fmt: skip
    patch(api, namespace, "apps", "bot", {"spec": {"agents": [agent],
          "knowledgeBaseVersions": [{"name": "harbour", "version": "1.0.0"}]}})  # fmt: skip
    wait_for(lambda: "knowledgeBases" in get(api, namespace, "apps", "bot")["spec"]["agents"][0], timeout=10,
             what="the draft with the knowledge base")  # fmt: skip
    model.script(Reply(calls=[Call("search_harbour", {"query": "pilot buoy"})]),
                 Reply(text="The pilot boards at buoy 3.", pieces=2))  # fmt: skip
    client_page = context.new_page()
    client_page.goto(bot.status["urls"]["webClientUrl"])
    client_page.get_by_label("Message", exact=True).fill("Where does the pilot board?")
    client_page.keyboard.press("Enter")
    client_page.get_by_text("The pilot boards at buoy 3.").wait_for()
    client_page.get_by_text("Answered by helper · tools: search_harbour · sources: guide.md > Pilots").wait_for()
    _shot(client_page, "knowledge-sources")
    client_page.close()

    # an unreadable PDF is refused with the reason; nothing is added
    broken = tmp_path / "scan.pdf"
    broken.write_bytes(BROKEN_PDF)
    page.get_by_label("Text, Markdown, HTML or PDF", exact=False).set_input_files(str(broken))
    page.get_by_role("button", name="Upload and index").click()
    alert = page.get_by_role("alert").first
    expect(alert).to_contain_text("scan.pdf cannot be read")
    expect(alert).to_contain_text("PDF")
    assert page.locator("tbody tr", has_text="scan.pdf").count() == 0
    assert [d["name"] for d in get(api, namespace, "knowledgebases", "harbour-1.0.0")["spec"]["documents"]] == [
        "guide.md"
    ]

    # vic, a viewer, sees the page; deleting is refused by Kubernetes RBAC, with the reason
    viewer = browser.new_context(viewport={"width": 1280, "height": 800})
    vpage = viewer.new_page()
    _sign_in(vpage, facade, team.tokens["vic"], namespace)
    vpage.goto(f"{facade.url}/console/ns/{namespace}/knowledge/harbour/1.0.0")
    expect(vpage.locator("tbody tr", has_text="guide.md")).to_be_visible()
    vpage.get_by_role("button", name="Delete guide.md").click()
    expect(vpage.get_by_role("alert").first).to_contain_text("guide.md")
    assert len(get(api, namespace, "knowledgebases", "harbour-1.0.0")["spec"]["documents"]) == 1
    viewer.close()

    # alice deletes it: gone from the page and from the index
    page.get_by_role("button", name="Delete guide.md").click()
    expect(page.get_by_role("status").first).to_contain_text("guide.md deleted")
    expect(page.locator("#kb-documents")).to_have_text("0", timeout=60_000)
    assert page.locator("tbody tr", has_text="guide.md").count() == 0
    assert errors == []
    context.close()
