"""Knowledge bases end to end (docs/knowledge-bases.md) on the real local control plane: the operator (indexing
runs as host processes, ``knowledge_runs: local``, as ``make run`` sets) and the facade; documents imported
through the PUBLIC chunked import (fileContext document) with an environment's API key and attached to a
KnowledgeBase version; the index built with vectors from a REAL llama.cpp server (``llama-server
--embedding``, the tiny GGUF the tests generate) serving the ModelDeployment ``tiny-embed``; the agent's
model a scripted OpenAI-compatible server (a random-weight model will not choose to call a tool, so the
test scripts the call; this test plays the local engine runner, as test_execute does). The agent calls
``search_harbour``, the answer lists the sources; a deleted document is gone from the next answer; the
checklist item, the deletion guard and a re-index into a new generation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dockyard_localcluster.tinymodel import write_tiny_gguf
from tests.e2e.test_execute import _key, serve_model
from tests.e2e.test_execute_real_engine import sse
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create, get, hub_model, model_deployment, patch
from tests.support.engines import embedding_server
from tests.support.knowledge import local_knowledge_runs
from tests.support.publicapi import ImportClient
from tests.support.runners import RunningFacade, run_local_runtime
from tests.support.scripted_model import Call, Reply, ScriptedModel, scripted_model
from tests.support.users import kubectl
from tests.support.waiting import wait_for

ENVIRONMENT = "bot-draft"
GUIDE = (
    "# Harbour guide\n\n## Fees\n\nBerthing costs 40 euros per metre and day.\n\n"
    "## Pilots\n\nA pilot boards every ship at buoy 3 before it enters the channel.\n"
)
RULES = (
    "<html><head><title>Harbour rules</title></head><body><h1>Rules</h1>"
    "<p>Anchoring is forbidden in the channel. The speed limit inside the harbour is 5 knots.</p></body></html>"
)
BROKEN_PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\nxref\n0 2\ntrailer << /Root 1 0 R"


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kb")


@pytest.fixture(scope="module")
def embedding_engine(state: Path) -> Iterator[str]:
    """llama.cpp's server with embeddings on (mean pooling) for the tiny GGUF; its base URL."""
    with embedding_server(write_tiny_gguf(state / "tiny.gguf"), state / "llama.log") as url:
        yield url


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, crds: None, state: Path) -> Iterator[RunningFacade]:
    with run_local_runtime(state, local_knowledge_runs(state), execute_turn_timeout_seconds=60) as (_, running):
        yield running


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    with scripted_model() as server:
        yield server


class Public:
    """The public API of the draft environment with its key."""

    def __init__(self, facade: RunningFacade, namespace: str, key: str) -> None:
        self.http = facade.client
        self.imports = ImportClient(facade.client, namespace, ENVIRONMENT, key)
        self.kb = f"{self.imports.root}/knowledge-bases"
        self.headers = {"x-api-key": key}
        self.execute_path = f"/e/{namespace}/{ENVIRONMENT}/v1/apps/bot/execute"
        self.bearer = {"Authorization": f"Bearer {key}"}

    def upload(self, name: str, data: bytes) -> dict[str, Any]:
        """A document through the three steps of the chunked import (two chunks when it is long enough)."""
        half = max(1, len(data) // 2)
        chunks = [data[:half], data[half:]] if len(data) > 1 else [data]
        started = self.imports.start(fileContext="document", fileName=name, fileExtension=name.rsplit(".", 1)[-1],
                                     fileSize=len(data), totalChunks=len(chunks))  # fmt: skip
        assert started.status_code == 200, started.text
        session = started.json()["sessionId"]
        for number, chunk in enumerate(chunks):
            sent = self.imports.chunk(session, number, chunk)
            assert sent.status_code == 200, sent.text
        done = self.imports.complete(session)
        assert done.status_code == 200, done.text
        answer: dict[str, Any] = done.json()
        return answer

    def execute(self, message: str) -> dict[str, Any]:
        answer = self.http.post(self.execute_path, json={"message": message}, headers=self.bearer, timeout=90)
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body


def _kb(api: client.ApiClient, namespace: str) -> dict[str, Any]:
    return get(api, namespace, "knowledgebases", "harbour-1.0.0")


def _indexed(api: client.ApiClient, namespace: str, documents: int, after: str = "") -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        kb = _kb(api, namespace)
        status = kb.get("status") or {}
        done = status.get("phase") == "Ready" and status.get("documents") == documents
        return kb if done and status.get("indexedSpec", "") != after else None

    try:
        found: dict[str, Any] = wait_for(ready, timeout=90, what=f"harbour-1.0.0 Ready with {documents} document(s)")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: last status {_kb(api, namespace).get('status')}") from None
    return found


def test_documents_imported_indexed_searched_by_the_agent_with_sources_and_deleted(
    api: client.ApiClient,
    cluster: E2ECluster,
    namespace: str,
    facade: RunningFacade,
    model: ScriptedModel,
    embedding_engine: str,
) -> None:
    hub_model(api, namespace, "tiny")
    model_deployment(
        api, namespace, "tiny", hyperParameters={"temperature": 0.0, "maxTokens": 100, "topP": 1.0, "topK": 40}
    )
    hub_model(api, namespace, "tiny-embed")
    model_deployment(api, namespace, "tiny-embed")
    agent = {"name": "helper", "version": "1.0.0", "instructions": "Answer from the harbour guide.", "model": "tiny"}
    create(api, namespace, "apps", "App", "bot", {"agents": [agent]})
    serve_model(api, namespace, model.url, "tiny")
    serve_model(api, namespace, embedding_engine, "tiny-embed")
    public = Public(facade, namespace, _key(api, namespace, ENVIRONMENT))

    created = public.http.post(public.kb, headers=public.headers, json={
        "name": "harbour", "version": "1.0.0", "description": "the harbour's guide and rules",
        "embedding": {"modelDeployment": "tiny-embed"}, "chunking": {"maxChars": 300, "overlapChars": 30},
    })  # fmt: skip
    assert created.status_code == 200, created.text
    bad = public.http.post(public.kb, headers=public.headers, json={"name": "x", "version": "1.0.0",
                                                                      "chunking": {"maxChars": 10}})  # fmt: skip
    assert bad.status_code == 422, bad.text
    assert "maxChars" in bad.text

    # three documents through the public chunked import: the unreadable PDF fails with the reason
    files = (("guide.md", GUIDE.encode()), ("rules.html", RULES.encode()), ("scan.pdf", BROKEN_PDF))
    guide, rules, broken = (public.upload(name, data) for name, data in files)
    assert (guide["status"], rules["status"], guide["action"]) == ("SUCCESS", "SUCCESS", "EXPORT")
    assert broken["status"] == "FAILED"
    assert "PDF" in broken["message"], broken
    for answer, name in ((guide, None), (rules, None)):
        attached = public.http.post(f"{public.kb}/harbour/1.0.0/documents", headers=public.headers,
                                    json={"fileId": answer["modelId"], **({"name": name} if name else {})})  # fmt: skip
        assert attached.status_code == 200, attached.text
    refused = public.http.post(f"{public.kb}/harbour/1.0.0/documents", headers=public.headers,
                               json={"fileId": broken["modelId"]})  # fmt: skip
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["details"]["reason"] == broken["message"]

    kb = _indexed(api, namespace, 2)
    status = kb["status"]
    assert status["chunks"] >= 3
    assert status["bytes"] == len(GUIDE.encode()) + len(RULES.encode())
    assert status["lastIndexed"]
    assert status["errorCount"] == 0
    first_generation = status["activeGeneration"]
    conditions = {c["type"]: c for c in status["conditions"]}  # what kubectl describe kb shows
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("True", "Indexed")
    assert conditions["Indexing"]["status"] == "False"
    listed = kubectl(cluster, "get", "kb", "-n", namespace, "-o", "wide").splitlines()
    assert listed[0].split() == ["NAME", "VERSION", "DOCUMENTS", "CHUNKS", "STATUS", "LAST-INDEXED", "EMBEDDING",
                                 "ERRORS", "AGE"]  # fmt: skip
    assert listed[1].split()[:5] == ["harbour-1.0.0", "1.0.0", "2", str(status["chunks"]), "Ready"]
    assert listed[1].split()[6:8] == ["tiny-embed", "0"]
    described = kubectl(cluster, "describe", "kb", "harbour-1.0.0", "-n", namespace)
    assert "Indexed" in described
    assert "IndexingStarted" in described  # the operator's Event
    shown = public.http.get(f"{public.kb}/harbour/1.0.0", headers=public.headers).json()
    assert [(d["name"], d["state"]) for d in shown["documents"]] == [("guide.md", "indexed"), ("rules.html", "indexed")]

    # the agent searches: a scripted tool call, the passages go back to the model, the answer lists sources
    patch(api, namespace, "apps", "bot", {"spec": {
        "agents": [{**agent, "knowledgeBases": ["harbour"]}],
        "knowledgeBaseVersions": [{"name": "harbour", "version": "1.0.0"}],
    }})  # fmt: skip
    model.reset()
    model.script(Reply(calls=[Call("search_harbour", {"query": "where does the pilot board"})]),
                 Reply(text="The pilot boards at buoy 3 [1]."))  # fmt: skip

    def answered() -> dict[str, Any] | None:
        body = public.execute("Where does the pilot board?")
        return body if body["tools_used"] == ["search_harbour"] else None

    body = wait_for(answered, timeout=30, what="an answer that searched the knowledge base")
    assert body["response"] == "The pilot boards at buoy 3 [1]."
    offered = model.bodies()[-2]["tools"]
    assert [t["function"]["name"] for t in offered] == ["search_harbour"]
    passages = next(m["content"] for m in model.bodies()[-1]["messages"] if m["role"] == "tool")
    assert "guide.md > Pilots" in passages
    assert "buoy 3" in passages
    documents = {s["document"] for s in body["sources"]}
    assert "guide.md" in documents
    pilot = next(s for s in body["sources"] if s["headingPath"][-1:] == ["Pilots"])
    assert (pilot["knowledgeBase"], pilot["version"], pilot["page"]) == ("harbour", "1.0.0", None)
    assert GUIDE[pilot["start"] : pilot["end"]].strip()  # offsets into the document's text

    # streamed: the done event carries the same sources
    model.script(Reply(calls=[Call("search_harbour", {"query": "where does the pilot board"})]),
                 Reply(text="At buoy 3 [1]."))  # fmt: skip
    with public.http.stream("POST", public.execute_path, headers=public.bearer, timeout=90,
                            json={"message": "Where does the pilot board?", "stream": True}) as streamed:  # fmt: skip
        streamed.read()
    assert streamed.status_code == 200, streamed.text
    events = sse(streamed.text)
    assert events[-1][0] == "done"
    assert {s["document"] for s in events[-1][1]["sources"]} == documents

    # the checklist of the environment that serves the draft computes the item
    seen: list[Any] = []

    def item() -> dict[str, Any] | None:
        env = get(api, namespace, "environments", ENVIRONMENT)
        items = (env.get("status") or {}).get("checklist") or []
        found = next((i for i in items if i["item"] == "Knowledge bases connected and indexed"), None)
        seen[:] = [found, (_kb(api, namespace).get("status") or {})]
        return found if found and found["state"] == "Done" and "Ready" in found["detail"] else None

    try:
        wait_for(item, timeout=30, what="the knowledge-base checklist item Done")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: item and knowledge base last seen: {seen}") from None

    # the deletion guard: the draft an environment serves pins it
    with pytest.raises(client.ApiException) as refused_delete:
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            "dockyard.dev", "v1alpha1", namespace, "knowledgebases", "harbour-1.0.0"
        )
    assert refused_delete.value.status == 409
    assert "draft of app bot" in str(refused_delete.value.body)

    # delete guide.md: gone from the index, from the passages and from the sources
    before = _kb(api, namespace)["status"]["indexedSpec"]
    deleted = public.http.delete(f"{public.kb}/harbour/1.0.0/documents/guide.md", headers=public.headers)
    assert deleted.status_code == 200, deleted.text
    after = _indexed(api, namespace, 1, after=before)
    assert after["status"]["activeGeneration"] == first_generation  # in place: the active generation
    model.reset()
    model.script(Reply(calls=[Call("search_harbour", {"query": "where does the pilot board at buoy"})]),
                 Reply(text="I do not know."))  # fmt: skip
    again = public.execute("Where does the pilot board?")
    assert again["tools_used"] == ["search_harbour"]
    assert "guide.md" not in {s["document"] for s in again["sources"]}
    passages = next(m["content"] for m in model.bodies()[-1]["messages"] if m["role"] == "tool")
    assert "guide.md" not in passages

    # re-index: a new generation, switched to when ready
    asked = public.http.post(f"{public.kb}/harbour/1.0.0/reindex", headers=public.headers)
    assert asked.status_code == 200, asked.text
    rebuilt = _indexed(api, namespace, 1, after=after["status"]["indexedSpec"])
    assert rebuilt["status"]["activeGeneration"] > first_generation
    model.reset()
    model.script(Reply(calls=[Call("search_harbour", {"query": "anchoring in the channel"})]), Reply(text="No."))
    third = public.execute("May I anchor in the channel?")
    assert [s["document"] for s in third["sources"]][:1] == ["rules.html"]
