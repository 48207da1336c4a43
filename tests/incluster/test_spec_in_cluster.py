"""SPEC's whole path against Dockyard installed from its chart, with nothing of Dockyard in this process.

The operator and the facade run as pods of ``helm install charts/dockyard`` (images from ``make images``),
the model's pods run llama.cpp's ``llama-server`` image on the real node (a g5.xlarge there, docs/real-node.md),
the tool runs its own image, and this test reaches the facade only through a loopback forward:

chunked import -> model deploy -> SUCCESS -> tool deploy -> version + environment -> API key -> execute
answered by the containerised engine and tool -> the widget in Chromium answered -> the operator pod
deleted in the middle of a deploy and the job still ends right -> ``helm upgrade`` to another image
while an import is half uploaded and a conversation is open: both go on -> ``helm uninstall`` leaves
only what the chart documents.

The tests of this module run in order and share one release (module scope); each step's failure names
the step.
"""

from __future__ import annotations

import json
import os
import re
import tarfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.installed import Installed, installed
from tests.support.waiting import wait_for

from dockyard_localcluster.demo import import_model
from dockyard_localcluster.tinymodel import sha256_of, write_tiny_gguf

pytestmark = pytest.mark.incluster

APP = "bot"
MODEL = "tiny-llama"
TOOL = "clock"
TOOL_VERSION = "1.0.0"
CHUNK = 128 * 1024
DEPLOY_BODY: dict[str, Any] = {
    "name": MODEL,
    "isDeployedPreviously": False,
    "deviceType": "g5.xlarge",
    "hyperParameters": {"temperature": 0.7, "maxTokens": 24, "topP": 0.95, "topK": 40},
    "scalingParameters": {"maxBatchSize": 2, "minReplicas": 1, "maxReplicas": 1},
    "optimizationInfo": {"optimizationType": "", "quantizationType": ""},
}


@dataclass
class Walk:
    """What the steps hand on to each other."""

    dockyard: Installed
    namespace: str
    http: httpx.Client
    token: str = ""
    draft_key: str = ""
    model_id: str = ""
    staging_key: str = ""
    gguf: Path = field(default_factory=Path)
    session_id: str = ""

    @property
    def mgmt(self) -> str:
        return f"{self.dockyard.url}/api/v1/namespaces/{self.namespace}"

    @property
    def user(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def public(self, environment: str) -> str:
        return f"{self.dockyard.url}/e/{self.namespace}/{environment}/api/public"

    def job(self, environment: str, key: str, job_id: str, timeout: float, what: str) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            record: dict[str, Any] = self.http.get(
                f"{self.public(environment)}/dock-status/{job_id}", headers={"x-api-key": key}
            ).json()
            return record if record.get("status") in ("SUCCESS", "FAILED") else None

        record = wait_for(done, timeout=timeout, interval=1, what=what)
        assert record["status"] == "SUCCESS", f"{what}: {record.get('reason')}: {record.get('message')}"
        return record


def ok(response: httpx.Response, status: int = 200) -> Any:
    assert response.status_code == status, f"{response.request.method} {response.request.url}: {response.text}"
    return response.json() if response.content else None


@pytest.fixture(scope="module")
def dockyard(request: pytest.FixtureRequest) -> Iterator[Installed]:
    """Dockyard installed from the chart (tests/support/installed.py), uninstalled at the end."""
    if os.environ.get("DOCKYARD_INCLUSTER", "testbed") == "testbed":
        request.getfixturevalue("testbed")  # the session's test bed (and its host-state check) comes first
    with installed() as release:
        yield release


@pytest.fixture(scope="module")
def walk(dockyard: Installed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Walk]:
    namespace = f"t-spec-{uuid.uuid4().hex[:6]}"
    dockyard.kubectl("create", "namespace", namespace)
    dockyard.kubectl("-n", namespace, "create", "serviceaccount", "alice")
    dockyard.kubectl(
        "-n", namespace, "create", "rolebinding", "alice-editor",
        f"--clusterrole={dockyard.name}-editor", f"--serviceaccount={namespace}:alice",
    )  # fmt: skip
    token = dockyard.kubectl("-n", namespace, "create", "token", "alice", "--duration=1h").stdout.strip()
    gguf = tmp_path_factory.mktemp("model") / "tiny-llama.gguf"
    write_tiny_gguf(gguf)
    with httpx.Client(timeout=120) as http:
        yield Walk(dockyard, namespace, http, token=token, gguf=gguf)
    dockyard.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def pods_of(walk: Walk, selector: str) -> list[dict[str, Any]]:
    out = walk.dockyard.kubectl("-n", walk.namespace, "get", "pods", "-l", selector, "-o", "json").stdout
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


def usage(walk: Walk) -> dict[str, int]:
    """The staging environment's usage totals, from the conversation store, through the management API."""
    report = ok(walk.http.get(f"{walk.mgmt}/environments/{APP}-staging/usage", headers=walk.user))
    totals: dict[str, int] = report["totals"]
    return totals


def test_1_operator_and_facade_run_as_pods_as_the_chart_says(dockyard: Installed) -> None:
    for component in ("operator", "api"):
        (pod,) = dockyard.pods(component)
        assert pod["status"]["phase"] == "Running", pod["status"]
        assert all(c["ready"] for c in pod["status"]["containerStatuses"]), pod["status"]
        container = pod["spec"]["containers"][0]
        assert container["image"] == dockyard.refs["dockyard"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        uid = dockyard.kubectl("-n", dockyard.namespace, "exec", pod["metadata"]["name"], "--", "id", "-u").stdout
        assert uid.strip() == "10001"
        # the root file system is read-only for real, /tmp (an emptyDir) is not
        probe = "import pathlib; pathlib.Path('/opt/x').write_text('x')"
        denied = dockyard.kubectl(
            "-n", dockyard.namespace, "exec", pod["metadata"]["name"], "--", "python", "-c", probe, check=False
        )
        assert denied.returncode != 0, denied.stdout
        assert "Read-only file system" in denied.stderr, denied.stderr


def test_2_import_and_deploy_a_model_on_the_real_node(walk: Walk) -> None:
    ok(walk.http.post(f"{walk.mgmt}/apps", json={"name": APP}, headers=walk.user), 201)
    wait_for(
        lambda: walk.http.get(f"{walk.mgmt}/environments/{APP}-draft", headers=walk.user).status_code == 200,
        timeout=60,
        what="the draft environment",
    )
    made = ok(
        walk.http.post(f"{walk.mgmt}/environments/{APP}-draft/apikeys", json={"name": "ci"}, headers=walk.user), 201
    )
    walk.draft_key = made["key"]

    # SPEC §1-§3: chunked import of the tiny GGUF, then its job until SUCCESS (the operator pod's import job)
    walk.model_id = import_model(walk.http, walk.public(f"{APP}-draft"), walk.draft_key, walk.gguf)

    # SPEC §4: the model deployed on g5.xlarge, SUCCESS only when llama-server answers in its pod
    resp = walk.http.post(
        f"{walk.public(f'{APP}-draft')}/models/{walk.model_id}/deploy",
        params={"modelType": "openSource"},
        json=DEPLOY_BODY,
        headers={"x-api-key": walk.draft_key},
    )
    record = ok(resp)
    assert record["status"] in ("IN_PROGRESS", "SUCCESS"), record
    walk.job(f"{APP}-draft", walk.draft_key, record["dockStatusId"], 300, "the model deployment job")
    (pod,) = pods_of(walk, f"dockyard.dev/model-deployment={MODEL}")
    if walk.dockyard.node is not None:
        assert pod["spec"]["nodeName"] == walk.dockyard.node, pod["spec"].get("nodeName")
    assert pod["spec"]["containers"][0]["image"] == walk.dockyard.refs["llama-cpp"]


def test_3_deploy_a_tool_from_its_image(walk: Walk) -> None:
    from dockyard_localcluster.toolserver import DESCRIPTION, PARAMETERS

    tool = {
        "apiVersion": "dockyard.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": f"{TOOL}-{TOOL_VERSION}", "namespace": walk.namespace},
        "spec": {
            "name": TOOL,
            "version": TOOL_VERSION,
            "description": DESCRIPTION,
            "container": {"image": walk.dockyard.refs["tool"], "port": 8080},
            "parameters": PARAMETERS,
        },
    }
    walk.dockyard.kubectl("apply", "-f", "-", input=json.dumps(tool))
    # SPEC §5
    resp = walk.http.post(
        f"{walk.public(f'{APP}-draft')}/tools/{TOOL}-{TOOL_VERSION}/deploy",
        json={"isAsync": True},
        headers={"x-api-key": walk.draft_key},
    )
    record = ok(resp)
    assert (record["jobType"], record["action"]) == ("TOOLS", "DEPLOY"), record
    walk.job(f"{APP}-draft", walk.draft_key, record["dockStatusId"], 180, "the tool deployment job")


def test_4_version_environment_key_and_an_answer_from_the_engine_and_the_tool(walk: Walk) -> None:
    agent = {
        "name": "assistant",
        "version": "1.0.0",
        "instructions": "You tell the time. Call the clock tool.",
        "model": MODEL,
        "tools": [TOOL],
    }
    draft = {"agents": [agent], "toolVersions": [{"name": TOOL, "version": TOOL_VERSION}]}
    ok(walk.http.put(f"{walk.mgmt}/apps/{APP}/draft", json=draft, headers=walk.user))
    ok(
        walk.http.post(
            f"{walk.mgmt}/apps/{APP}/versions", json={"version": "1.0.0", "name": "First"}, headers=walk.user
        ),
        201,
    )
    ok(walk.http.post(f"{walk.mgmt}/apps/{APP}/environments", json={"name": "staging", "appVersion": "1.0.0"},
                      headers=walk.user), 201)  # fmt: skip
    made = ok(
        walk.http.post(f"{walk.mgmt}/environments/{APP}-staging/apikeys", json={"name": "site"}, headers=walk.user),
        201,
    )
    walk.staging_key = made["key"]
    url = f"{walk.dockyard.url}/e/{walk.namespace}/{APP}-staging/v1/apps/{APP}/execute"
    headers = {"Authorization": f"Bearer {walk.staging_key}"}

    def answered() -> dict[str, Any] | None:
        resp = walk.http.post(url, json={"message": "What time is it in Oslo?", "metadata": {"user_id": "u1"}},
                              headers=headers)  # fmt: skip
        return resp.json() if resp.status_code == 200 else None

    # the environment becomes Active once its version's tools are deployed there (the operator's doing)
    body = wait_for(answered, timeout=240, interval=2, what="an answer from the staging environment")
    assert body["agent"] == "assistant", body
    assert body["session_id"], body
    assert body["tokens"]["input"] > 0, body  # llama.cpp's own usage counts
    assert body["tokens"]["output"] > 0, body
    # The tiny model's weights are random: whether it calls the tool is its choice (llama-server offers
    # the tool through the GGUF's chat template). What the agent's call would reach answers: the tool's
    # pod, through its Service's cluster DNS name, asked from the facade's pod.
    assert set(body["tools_used"]) <= {TOOL}, body
    walk.session_id = body["session_id"]

    def served() -> dict[str, Any] | None:
        found = walk.dockyard.kubectl(
            "-n", walk.namespace, "get", "tooldeployments", "-l", f"dockyard.dev/environment={APP}-staging",
            "-o", "json",
        ).stdout  # fmt: skip
        (deployment,) = json.loads(found)["items"]
        status = deployment.get("status") or {}
        return deployment if (status.get("job") or {}).get("status") == "SUCCESS" else None

    # the environment's own ToolDeployment of the version's tool, serving (its pod Ready)
    deployment = wait_for(served, timeout=180, interval=2, what="the staging environment's tool to serve")
    endpoint = deployment["status"]["endpoint"]
    assert ".svc" in endpoint, endpoint
    (facade,) = walk.dockyard.pods("api")
    body_json = json.dumps({"timezone": "Asia/Tokyo"})
    call = (
        "import sys, urllib.request\n"
        "req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), "
        "headers={'Content-Type': 'application/json'})\n"
        "print(urllib.request.urlopen(req, timeout=10).read().decode())"
    )
    answer = walk.dockyard.kubectl(
        "-n",
        walk.dockyard.namespace,
        "exec",
        facade["metadata"]["name"],
        "--",
        "python",
        "-c",
        call,
        endpoint,
        body_json,
    ).stdout
    assert json.loads(answer)["timezone"] == "Asia/Tokyo", answer

    # the admission webhooks answer through the chart's Service with its TLS: the API server asks the
    # operator pod, which refuses to delete a tool that the active version links
    refused = walk.dockyard.kubectl("-n", walk.namespace, "delete", "tool", f"{TOOL}-{TOOL_VERSION}", check=False)
    assert refused.returncode != 0, refused.stdout
    assert "admission webhook" in refused.stderr, refused.stderr
    assert "denied" in refused.stderr, refused.stderr


def test_5_the_widget_answers_in_chromium(walk: Walk) -> None:
    from tests.support.browser import chromium, serve_site

    patch = {"spec": {"widget": {"allowedOrigins": [], "tokensPerMinutePerAddress": 1000}}}
    with serve_site("127.0.0.2") as site, chromium() as browser:
        patch["spec"]["widget"]["allowedOrigins"] = [site.origin]
        walk.dockyard.kubectl(
            "-n", walk.namespace, "patch", "environment", f"{APP}-staging", "--type=merge", "-p", json.dumps(patch)
        )
        env = json.loads(
            walk.dockyard.kubectl("-n", walk.namespace, "get", "environment", f"{APP}-staging", "-o", "json").stdout
        )
        embed = env["status"]["embedCode"]
        assert walk.dockyard.url in embed, embed  # the generated URLs name the forward (the release's publicUrl)
        site.pages["/"] = (
            f"<!doctype html><html><head><title>Shop</title></head><body><h1>Shop</h1>{embed}</body></html>"
        )
        page = browser.new_page()
        page.set_default_timeout(60_000)
        page.goto(site.url("/"))
        page.get_by_role("button", name="Chat", exact=True).click()
        page.get_by_label("Message", exact=True).fill("What time is it?")
        page.keyboard.press("Enter")
        page.get_by_text(re.compile(r"Answered by assistant")).wait_for(timeout=120_000)


def test_6_the_operator_pod_deleted_in_the_middle_of_a_deploy(walk: Walk) -> None:
    body = {**DEPLOY_BODY, "name": f"{MODEL}-2"}
    resp = walk.http.post(
        f"{walk.public(f'{APP}-draft')}/models/{walk.model_id}/deploy",
        params={"modelType": "openSource"},
        json=body,
        headers={"x-api-key": walk.draft_key},
    )
    record = ok(resp)
    (operator,) = walk.dockyard.pods("operator")
    walk.dockyard.kubectl("-n", walk.dockyard.namespace, "delete", "pod", operator["metadata"]["name"], "--wait=false")
    final = walk.job(
        f"{APP}-draft", walk.draft_key, record["dockStatusId"], 300, "the job across the operator's restart"
    )
    assert final["dockStatusId"] == record["dockStatusId"]
    (new_operator,) = wait_for(lambda: walk.dockyard.pods("operator"), timeout=60, what="the new operator pod")
    assert new_operator["metadata"]["name"] != operator["metadata"]["name"]


def facade_get(walk: Walk, url: str, body: dict[str, Any] | None = None) -> Any:
    """GET (or POST ``body`` to) ``url`` from the facade's pod: what an in-cluster caller gets."""
    (facade,) = walk.dockyard.pods("api")
    call = (
        "import json, sys, urllib.request\n"
        "data = sys.argv[2].encode() if sys.argv[2] else None\n"
        "req = urllib.request.Request(sys.argv[1], data=data, headers={'Content-Type': 'application/json'})\n"
        "print(urllib.request.urlopen(req, timeout=60).read().decode())"
    )
    out = walk.dockyard.kubectl(
        "-n", walk.dockyard.namespace, "exec", facade["metadata"]["name"], "--",
        "python", "-c", call, url, json.dumps(body) if body is not None else "",
    ).stdout  # fmt: skip
    return json.loads(out)


def test_6b_a_ctranslate2_model_runs_in_dockyards_ct2_server_image(
    walk: Walk, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from tests.support.ct2_model import build as build_ct2

    # the second llama.cpp deployment gives its GPU back
    walk.dockyard.kubectl("-n", walk.namespace, "delete", "modeldeployment", f"{MODEL}-2", "--wait=true")
    model = build_ct2(tmp_path_factory.mktemp("ct2") / "tiny-ct2")
    archive = model.path.parent / "tiny-ct2.tar"
    with tarfile.open(archive, mode="w") as tar:
        tar.add(model.path, arcname="tiny-ct2")
    model_id = import_model(walk.http, walk.public(f"{APP}-draft"), walk.draft_key, archive, extension="tar")
    body = {
        **DEPLOY_BODY,
        "name": "tiny-ct2",
        "optimizationInfo": {"optimizationType": "ctranslate2", "quantizationType": "int8_float16"},
    }
    record = ok(
        walk.http.post(
            f"{walk.public(f'{APP}-draft')}/models/{model_id}/deploy",
            params={"modelType": "openSource"},
            json=body,
            headers={"x-api-key": walk.draft_key},
        )
    )
    walk.job(f"{APP}-draft", walk.draft_key, record["dockStatusId"], 300, "the CTranslate2 deployment job")
    (pod,) = pods_of(walk, "dockyard.dev/model-deployment=tiny-ct2")
    assert pod["spec"]["containers"][0]["image"] == walk.dockyard.refs["ct2-server"]
    if walk.dockyard.node is not None:
        assert pod["spec"]["nodeName"] == walk.dockyard.node
    mdep = json.loads(
        walk.dockyard.kubectl("-n", walk.namespace, "get", "modeldeployment", "tiny-ct2", "-o", "json").stdout
    )
    endpoint = mdep["status"]["endpoint"]
    health = facade_get(walk, f"{endpoint}/health")
    assert health["model"] == "tiny-ct2"
    assert health["device"] == "cpu"  # no GPU in the pod: the compute type's CPU fallback
    answer = facade_get(
        walk,
        f"{endpoint}/v1/chat/completions",
        {"model": "tiny-ct2", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8},
    )
    assert answer["usage"]["completion_tokens"] > 0, answer
    walk.dockyard.kubectl("-n", walk.namespace, "delete", "modeldeployment", "tiny-ct2", "--wait=false")


def test_7_helm_upgrade_to_another_image_keeps_an_import_and_a_conversation(walk: Walk) -> None:
    data = walk.gguf.read_bytes()
    chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]
    assert len(chunks) >= 2
    root, key = walk.public(f"{APP}-draft"), {"x-api-key": walk.draft_key}
    start = {
        "fileContext": "model", "totalChunks": len(chunks), "fileExtension": "gguf", "fileName": "again.gguf",
        "fileSize": len(data), "sha256": sha256_of(walk.gguf),
    }  # fmt: skip
    session = ok(walk.http.post(f"{root}/files/session/start", json=start, headers=key))
    half = len(chunks) // 2

    def upload(number: int) -> None:
        files = {"file": ("again.gguf", chunks[number], "application/octet-stream")}
        url = f"{root}/files/session/{session['sessionId']}"
        ok(walk.http.post(url, data={"chunkNumber": str(number)}, files=files, headers=key))

    for number in range(half):
        upload(number)

    before = usage(walk)
    assert before["requests"] >= 2, before  # the staging environment's calls so far (execute and widget)
    old_pods = {p["metadata"]["name"] for p in walk.dockyard.pods("api")}
    new_ref = walk.dockyard.upgrade_to_changed_image()
    new_pods = {p["metadata"]["name"] for p in walk.dockyard.pods("api")}
    assert new_pods.isdisjoint(old_pods), (old_pods, new_pods)

    # Dockyard's image is also the model pods' storage initializer, so the upgrade rolls the serving
    # model too (one pod at a time: maxSurge 0, maxUnavailable 1); wait until it serves again
    def model_rolled() -> bool:
        out = walk.dockyard.kubectl(
            "-n", walk.namespace, "get", "deployments", "-l", f"dockyard.dev/model-deployment={MODEL}", "-o", "json"
        ).stdout
        (deployment,) = json.loads(out)["items"]
        inits = deployment["spec"]["template"]["spec"].get("initContainers") or []
        status = deployment.get("status") or {}
        return (
            all(c["image"] == new_ref for c in inits)
            and status.get("observedGeneration") == deployment["metadata"]["generation"]
            and status.get("updatedReplicas") == status.get("availableReplicas") == 1
            and not status.get("unavailableReplicas")
        )

    wait_for(model_rolled, timeout=300, interval=2, what="the model to serve again after Dockyard's upgrade")

    for number in range(half, len(chunks)):
        upload(number)
    record = ok(walk.http.post(f"{root}/files/session/{session['sessionId']}/complete", headers=key))
    walk.job(f"{APP}-draft", walk.draft_key, record["dockStatusId"], 120, "the import finished after the upgrade")

    url = f"{walk.dockyard.url}/e/{walk.namespace}/{APP}-staging/v1/apps/{APP}/execute"
    again = {"message": "And now?", "session_id": walk.session_id, "metadata": {"user_id": "u1"}}
    resp = walk.http.post(url, json=again, headers={"Authorization": f"Bearer {walk.staging_key}"})
    body = ok(resp)
    assert body["session_id"] == walk.session_id
    # the conversation store (SQLite on the model-store volume) kept what it had: one more request counted
    assert usage(walk)["requests"] == before["requests"] + 1, before


def test_8_helm_uninstall_leaves_only_what_the_chart_documents(walk: Walk) -> None:
    dockyard = walk.dockyard
    # the test's objects go first, while the operator still runs (Environments carry its finalizer)
    dockyard.kubectl("delete", "namespace", walk.namespace, "--timeout=180s")
    dockyard.release.uninstall()
    selector = f"app.kubernetes.io/instance={dockyard.name}"
    namespaced = "deployments,replicasets,pods,services,configmaps,secrets,serviceaccounts,persistentvolumeclaims"
    cluster_scoped = "clusterroles,clusterrolebindings,validatingwebhookconfigurations,mutatingwebhookconfigurations"

    def gone() -> bool:
        left = dockyard.kubectl("-n", dockyard.namespace, "get", namespaced, "-l", selector, "-o", "name").stdout
        left += dockyard.kubectl("get", cluster_scoped, "-l", selector, "-o", "name").stdout
        return not left.strip()

    wait_for(gone, timeout=120, interval=2, what="every object of the release to go")
    # documented (docs/install.md, "CRD policy"): Helm never deletes the CRDs
    crds = dockyard.kubectl("get", "crd", "-o", "name").stdout
    assert "customresourcedefinition.apiextensions.k8s.io/modeldeployments.dockyard.dev" in crds.split()
