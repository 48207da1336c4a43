"""Public deploy API (docs/public-api.md) through a real facade, with the real operator, on the local control
plane: jobs are followed through the dock-status lookup to SUCCESS or FAILED."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from bench.common import count_diff, request_counts
from kubernetes import client

from dockyard_api.settings import ApiSettings
from dockyard_core import apikeys
from dockyard_core.resources.v1alpha1.modeldeployment import model_deployment_name
from tests.e2e.test_operator_models import OPERATOR_ENV
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create, get, hub_model
from tests.support.public import (
    PublicEnvironment,
    environment_with_key,
    lookup,
    wait_dock_status,
    wait_model_ready,
)
from tests.support.runners import RunningFacade, RunningOperator, free_port, run_facade, run_operator

# SPEC.md §4's body as its sample sends it: every field, empty optimization strings.
SPEC_SAMPLE: dict[str, Any] = {
    "name": "llama-3-8b-instruct",
    "isDeployedPreviously": False,
    "hyperParameters": {"temperature": 0.7, "maxTokens": 512, "topP": 0.9, "topK": 50, "stopSequence": []},
    "scalingParameters": {
        "maxBatchSize": 16,
        "minReplicas": 1,
        "maxReplicas": 2,
        "scaleUpDelay": 300,
        "scaleDownDelay": 600,
    },
    "deviceType": "g5.xlarge",
    "optimizationInfo": {"optimizationType": "", "quantizationType": ""},
}


@pytest.fixture(scope="module")
def operator(cluster: E2ECluster, crds: None) -> Iterator[RunningOperator]:
    with run_operator(env={**OPERATOR_ENV, "DOCKYARD_OPERATOR_ENDPOINT_TIMEOUT_SECONDS": "1"}) as running:
        yield running


@pytest.fixture(scope="module")
def facade(operator: RunningOperator) -> Iterator[RunningFacade]:
    with run_facade(ApiSettings(sync_deploy_timeout_seconds=60)) as running:
        yield running


@pytest.fixture
def env(api: client.ApiClient, namespace: str) -> PublicEnvironment:
    return environment_with_key(api, namespace)


def deploy_model(
    http: httpx.Client, env: PublicEnvironment, model: str, body: dict[str, Any], model_type: str | None = "openSource"
) -> httpx.Response:
    params = {"modelType": model_type} if model_type is not None else {}
    return http.post(f"{env.base}/api/public/models/{model}/deploy", params=params, json=body, headers=env.headers)


def deploy_tool(http: httpx.Client, env: PublicEnvironment, tool_id: str, body: Any) -> httpx.Response:
    return http.post(f"{env.base}/api/public/tools/{tool_id}/deploy", json=body, headers=env.headers)


def ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def refused(response: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    for word in words:
        assert word in error["message"], error
    return error


def assert_job_record(record: dict[str, Any], **expected: str) -> None:
    assert record["dockStatusId"]
    assert record["dock-statusId"] == record["dockStatusId"]
    for key, value in expected.items():
        assert record[key] == value, (key, record)


# --- model deploy -------------------------------------------------------------------------------------


def test_the_spec_sample_deploys_a_hub_model_to_success(
    api: client.ApiClient, namespace: str, env: PublicEnvironment, facade: RunningFacade
) -> None:
    hub_model(api, namespace, "llama-3-8b")
    wait_model_ready(api, namespace, "llama-3-8b")
    started = ok(deploy_model(facade.client, env, "llama-3-8b", SPEC_SAMPLE))
    assert_job_record(started, modelId="llama-3-8b", jobType="MODELS", action="DEPLOY", status="IN_PROGRESS")
    assert "toolId" not in started

    mdep = get(api, namespace, "modeldeployments", SPEC_SAMPLE["name"])
    assert mdep["metadata"]["labels"]["dockyard.dev/dock-status-id"] == started["dockStatusId"]
    assert mdep["spec"]["modelRef"] == "llama-3-8b"
    assert mdep["spec"]["optimizationInfo"] == {"optimizationType": "", "quantizationType": ""}
    assert mdep["spec"]["hyperParameters"] == SPEC_SAMPLE["hyperParameters"]

    done = wait_dock_status(facade.client, env, started["dockStatusId"])
    assert_job_record(done, modelId="llama-3-8b", jobType="MODELS", action="DEPLOY", status="SUCCESS")
    assert done["dockStatusId"] == started["dockStatusId"]
    assert done["reason"] == "Available"
    assert done["deploymentName"] == SPEC_SAMPLE["name"]

    # the lookup reads the cluster, not the facade's memory: a new facade process answers the same
    with run_facade(ApiSettings()) as restarted:
        again = ok(lookup(restarted.client, env, started["dockStatusId"]))
    assert again == done
    refused(lookup(facade.client, env, "no-such-job"), 404, "no-such-job")


def test_redeploy_is_a_new_job_on_the_same_deployment(
    api: client.ApiClient, namespace: str, env: PublicEnvironment, facade: RunningFacade
) -> None:
    hub_model(api, namespace, "mistral", hub_id="mistralai/Mistral-7B-Instruct-v0.3")
    hub_model(api, namespace, "phi", hub_id="microsoft/phi-2")
    wait_model_ready(api, namespace, "mistral")
    wait_model_ready(api, namespace, "phi")
    body = {"name": "chat", "deviceType": "g5.xlarge", "hyperParameters": SPEC_SAMPLE["hyperParameters"]}

    # isDeployedPreviously true: a redeploy of an existing deployment; there is none yet
    refused(deploy_model(facade.client, env, "mistral", {**body, "isDeployedPreviously": True}), 404, "chat")
    first = ok(deploy_model(facade.client, env, "mistral", body))
    assert wait_dock_status(facade.client, env, first["dockStatusId"])["status"] == "SUCCESS"

    # the name is taken by mistral's deployment: another model cannot have it, either way
    error = refused(deploy_model(facade.client, env, "phi", body), 409, "chat", "mistral")
    assert error["details"]["modelId"] == "mistral"
    refused(deploy_model(facade.client, env, "phi", {**body, "isDeployedPreviously": True}), 409, "mistral")

    # a redeploy replaces the spec (no hyperParameters now) and is a new job; the old id is superseded
    redeploy = {"name": "chat", "deviceType": "g5.2xlarge", "isDeployedPreviously": True}
    second = ok(deploy_model(facade.client, env, "mistral", redeploy))
    assert second["dockStatusId"] != first["dockStatusId"]
    spec = get(api, namespace, "modeldeployments", "chat")["spec"]
    assert spec["deviceType"] == "g5.2xlarge"
    assert "hyperParameters" not in spec
    assert spec["isDeployedPreviously"] is True
    done = wait_dock_status(facade.client, env, second["dockStatusId"])
    assert (done["status"], done["modelId"]) == ("SUCCESS", "mistral")
    refused(lookup(facade.client, env, first["dockStatusId"]), 404)

    # isDeployedPreviously false on this model's own deployment: an update (a retry is harmless)
    third = ok(deploy_model(facade.client, env, "mistral", body))
    assert third["dockStatusId"] not in (first["dockStatusId"], second["dockStatusId"])
    assert wait_dock_status(facade.client, env, third["dockStatusId"])["status"] == "SUCCESS"


def test_any_text_as_the_name_deploys_under_an_object_named_after_it(
    api: client.ApiClient, namespace: str, env: PublicEnvironment, facade: RunningFacade
) -> None:
    """SPEC.md §4's body with ``"name": "Llama 3 8B"``: the ModelDeployment is named after it (a DNS label
    with a hash), spec.name keeps it; the job record names both; a redeploy by the same name finds it."""
    hub_model(api, namespace, "llama-3-8b")
    hub_model(api, namespace, "phi", hub_id="microsoft/phi-2")
    wait_model_ready(api, namespace, "llama-3-8b")
    wait_model_ready(api, namespace, "phi")
    body = {**SPEC_SAMPLE, "name": "Llama 3 8B"}
    object_name = model_deployment_name("Llama 3 8B")
    assert object_name.startswith("llama-3-8b-")

    started = ok(deploy_model(facade.client, env, "llama-3-8b", body))
    assert (started["name"], started["deploymentName"]) == ("Llama 3 8B", object_name)
    mdep = get(api, namespace, "modeldeployments", object_name)
    assert (mdep["spec"]["name"], mdep["spec"]["modelRef"]) == ("Llama 3 8B", "llama-3-8b")
    done = wait_dock_status(facade.client, env, started["dockStatusId"])
    assert (done["status"], done["name"], done["deploymentName"]) == ("SUCCESS", "Llama 3 8B", object_name)

    # the DNS label that the name slugs to is another name: another deployment, never this one
    other = ok(deploy_model(facade.client, env, "phi", {**body, "name": "llama-3-8b"}))
    assert (other["name"], other["deploymentName"]) == ("llama-3-8b", "llama-3-8b")
    assert get(api, namespace, "modeldeployments", object_name)["spec"]["modelRef"] == "llama-3-8b"

    # the same name is the same deployment: a redeploy finds it; another model cannot take the name
    redeploy = {"name": "Llama 3 8B", "deviceType": "g5.2xlarge", "isDeployedPreviously": True}
    again = ok(deploy_model(facade.client, env, "llama-3-8b", redeploy))
    assert (again["name"], again["deploymentName"]) == ("Llama 3 8B", object_name)
    assert again["dockStatusId"] != started["dockStatusId"]
    assert get(api, namespace, "modeldeployments", object_name)["spec"]["deviceType"] == "g5.2xlarge"
    assert wait_dock_status(facade.client, env, again["dockStatusId"])["status"] == "SUCCESS"
    error = refused(deploy_model(facade.client, env, "phi", body), 409, "Llama 3 8B", "llama-3-8b")
    assert error["details"]["modelId"] == "llama-3-8b"
    missing = {**redeploy, "name": "Llama 3 70B"}
    refused(deploy_model(facade.client, env, "llama-3-8b", missing), 404, "Llama 3 70B")


def test_a_name_whose_object_is_another_names_deployment_is_refused(
    api: client.ApiClient, namespace: str, env: PublicEnvironment, facade: RunningFacade
) -> None:
    """Two names never share a deployment silently: when the object a name maps to holds the deployment of
    another name (here made so with kubectl), the call is refused with 409 naming both."""
    hub_model(api, namespace, "llama")
    wait_model_ready(api, namespace, "llama")
    object_name = model_deployment_name("Llama 3 8B")
    spec = {"modelRef": "llama", "modelType": "openSource", "name": "Someone else's", "deviceType": "g5.xlarge"}
    create(api, namespace, "modeldeployments", "ModelDeployment", object_name, spec)
    error = refused(deploy_model(facade.client, env, "llama", {**SPEC_SAMPLE, "name": "Llama 3 8B"}), 409)
    assert "Someone else's" in error["message"]
    assert error["details"] == {"name": "Someone else's", "deploymentName": object_name}
    assert get(api, namespace, "modeldeployments", object_name)["spec"]["name"] == "Someone else's"


def test_a_deployment_no_node_pool_can_place_fails_with_its_reason(
    api: client.ApiClient, namespace: str, env: PublicEnvironment, facade: RunningFacade
) -> None:
    hub_model(api, namespace, "big")
    wait_model_ready(api, namespace, "big")
    # the local pool has 2 g5.48xlarge nodes of 8 GPUs: a third replica never fits (deadline: 6 s here)
    body = {"name": "big", "deviceType": "g5.48xlarge", "scalingParameters": {"minReplicas": 3}}
    started = ok(deploy_model(facade.client, env, "big", body))
    failed = wait_dock_status(facade.client, env, started["dockStatusId"])
    assert_job_record(failed, modelId="big", jobType="MODELS", action="DEPLOY", status="FAILED")
    assert failed["reason"] == "Unschedulable"
    assert "no g5.48xlarge node with 8 free GPUs" in failed["message"]


def test_model_deploy_refusals(
    api: client.ApiClient, namespace: str, env: PublicEnvironment, facade: RunningFacade
) -> None:
    http = facade.client
    hub_model(api, namespace, "llama")
    wait_model_ready(api, namespace, "llama")
    upload = {"fileContext": "model", "fileName": "m", "fileExtension": "tar", "fileSize": 10, "totalChunks": 1}
    create(api, namespace, "models", "Model", "importing", {"source": {"upload": upload}})

    refused(deploy_model(http, env, "no-such-model", SPEC_SAMPLE), 404, "no-such-model")
    error = refused(deploy_model(http, env, "importing", SPEC_SAMPLE), 409, "importing", "ReadyToDeploy")
    assert error["details"]["modelId"] == "importing"
    assert error["details"]["phase"] in (None, "Importing")

    def invalid(response: httpx.Response, field: str) -> None:
        error = refused(response, 422, field)
        assert error["code"] == "invalid_request"
        assert any(d["field"] == field for d in error["details"]), error

    invalid(deploy_model(http, env, "llama", SPEC_SAMPLE, model_type=None), "query.modelType")
    invalid(deploy_model(http, env, "llama", SPEC_SAMPLE, model_type="closedSource"), "query.modelType")
    # the name is any text (SPEC.md §4): only one without a letter or digit, too long, or with control
    # characters is refused ("Llama 3" and 64 characters, refused while it had to be a DNS label, now deploy)
    for name in ("", "!!!", "x" * 254, "Llama\n3"):
        invalid(deploy_model(http, env, "llama", {**SPEC_SAMPLE, "name": name}), "body.name")
    invalid(deploy_model(http, env, "llama", {**SPEC_SAMPLE, "deviceType": "p4d.24xlarge"}), "body.deviceType")
    invalid(deploy_model(http, env, "llama", {**SPEC_SAMPLE, "maxtokens": 5}), "body.maxtokens")
    hot = copy.deepcopy(SPEC_SAMPLE)
    hot["hyperParameters"]["temperature"] = 2.5
    invalid(deploy_model(http, env, "llama", hot), "body.hyperParameters.temperature")
    inverted = {**SPEC_SAMPLE, "scalingParameters": {"minReplicas": 5, "maxReplicas": 2}}
    invalid(deploy_model(http, env, "llama", inverted), "body.scalingParameters.minReplicas")
    invalid(deploy_model(http, env, "Bad_Id", SPEC_SAMPLE), "path.modelId")
    not_json = http.post(
        f"{env.base}/api/public/models/llama/deploy",
        params={"modelType": "openSource"},
        content=b"{not json",
        headers={**env.headers, "Content-Type": "application/json"},
    )
    refused(not_json, 422)
    # the model's own modelType, when it declares one, must match the call's
    invalid(deploy_model(http, env, "llama", SPEC_SAMPLE, model_type="fineTune"), "query.modelType")
    # nothing of the above created a deployment
    assert (
        client.CustomObjectsApi(api).list_namespaced_custom_object(
            "dockyard.dev", "v1alpha1", namespace, "modeldeployments"
        )["items"]
        == []
    )


def test_api_keys_guard_the_public_api(
    api: client.ApiClient, namespace: str, env: PublicEnvironment, facade: RunningFacade
) -> None:
    http = facade.client
    hub_model(api, namespace, "llama")
    staging = environment_with_key(api, namespace, environment="staging")
    url = f"{env.base}/api/public/models/llama/deploy"
    for headers in ({}, {"x-api-key": "dky_aaaaaaaaaaaa_" + "b" * 43}, {"x-api-key": "not-a-key"}):
        error = refused(http.post(url, params={"modelType": "openSource"}, json=SPEC_SAMPLE, headers=headers), 401)
        assert error["code"] == "unauthenticated"
    other = http.post(url, params={"modelType": "openSource"}, json=SPEC_SAMPLE, headers=staging.headers)
    error = refused(other, 403, "staging")
    assert error["code"] == "forbidden"
    refused(http.post(f"{env.base}/api/public/tools/weather-1.0.0/deploy", json={"isAsync": True}), 401)
    refused(http.get(f"{env.base}/api/public/dock-status/x", headers=staging.headers), 403)


def test_a_key_is_read_once_for_concurrent_calls_and_a_revocation_still_takes_effect_in_the_cache_time(
    api: client.ApiClient, namespace: str, crds: None, env: PublicEnvironment
) -> None:
    """32 calls with a key the facade has not cached share one read of its Secret (they sent 32); a key in
    use is read again ahead of its entry's expiry, yet a key revoked elsewhere (its Secret deleted, as
    another replica revokes) is refused from at most the cache time after the revocation."""
    ttl = 2.0
    settings = ApiSettings(api_key_cache_seconds=ttl, last_used_interval_seconds=3600)
    with run_facade(settings) as facade:
        probe = f"{env.base}/api/public/dock-status/no-such-job"  # authenticated, then 404: no job
        start = threading.Barrier(32)

        def call(_: int) -> int:
            start.wait()
            return facade.client.get(probe, headers=env.headers).status_code

        before = request_counts(api)
        with ThreadPoolExecutor(32) as pool:
            statuses = list(pool.map(call, range(32)))
        reads = count_diff(request_counts(api), before)[("secrets", "GET")]
        assert statuses == [404] * 32
        assert 1 <= reads <= 4, f"{reads} reads of Secrets for 32 concurrent calls (other clients may add a few)"

        # in use for longer than the cache time: every call is answered from the cache or a refresh
        until = time.monotonic() + 2 * ttl
        while time.monotonic() < until:
            refused(facade.client.get(probe, headers=env.headers), 404, "no job")
            time.sleep(0.05)
        secret = apikeys.secret_name(apikeys.key_id_of(env.key) or "")
        client.CoreV1Api(api).delete_namespaced_secret(secret, namespace)
        revoked = time.monotonic()
        while True:
            sent = time.monotonic()
            status = facade.client.get(probe, headers=env.headers).status_code
            if status == 401:
                break
            assert status == 404
            assert sent < revoked + ttl, "a call sent more than the cache time after the revocation was let in"
            time.sleep(0.05)


# --- tool deploy --------------------------------------------------------------------------------------


def image_tool(api: client.ApiClient, namespace: str, name: str, version: str) -> str:
    spec = {"name": name, "version": version, "container": {"image": f"registry.example.com/{name}:{version}"}}
    create(api, namespace, "tools", "Tool", f"{name}-{version}", spec)
    return f"{name}-{version}"


def test_synchronous_tool_deploy_answers_with_the_finished_job(
    api: client.ApiClient, namespace: str, env: PublicEnvironment, facade: RunningFacade
) -> None:
    tool_id = image_tool(api, namespace, "weather", "1.2.0")
    done = ok(deploy_tool(facade.client, env, tool_id, {"isAsync": False}))
    assert_job_record(done, toolId=tool_id, jobType="TOOLS", action="DEPLOY", status="SUCCESS")
    assert "modelId" not in done
    assert done["deploymentName"] == f"{env.environment}-weather-1-2-0"
    tdep = get(api, namespace, "tooldeployments", done["deploymentName"])
    assert tdep["spec"] == {"toolRef": tool_id, "isAsync": False, "replicas": 1}
    assert tdep["metadata"]["ownerReferences"][0]["name"] == env.environment
    assert tdep["status"]["readyReplicas"] == 1
    assert ok(lookup(facade.client, env, done["dockStatusId"])) == done

    # deploying again is a new job on the same ToolDeployment
    again = ok(deploy_tool(facade.client, env, tool_id, {"isAsync": False}))
    assert again["status"] == "SUCCESS"
    assert again["dockStatusId"] != done["dockStatusId"]
    assert again["deploymentName"] == done["deploymentName"]


def test_asynchronous_tool_deploy_answers_at_once(
    api: client.ApiClient, namespace: str, env: PublicEnvironment, facade: RunningFacade
) -> None:
    tool_id = image_tool(api, namespace, "crm", "2.0.1")
    started = ok(deploy_tool(facade.client, env, tool_id, {"isAsync": True}))
    assert_job_record(started, toolId=tool_id, jobType="TOOLS", action="DEPLOY", status="IN_PROGRESS")
    done = wait_dock_status(facade.client, env, started["dockStatusId"])
    assert (done["status"], done["reason"]) == ("SUCCESS", "Available")


def test_synchronous_tool_deploy_reports_failure_and_stays_bounded(
    api: client.ApiClient, namespace: str, env: PublicEnvironment, facade: RunningFacade
) -> None:
    down = f"http://127.0.0.1:{free_port()}/api"
    create(api, namespace, "tools", "Tool", "offline-1.0.0", {"name": "offline", "version": "1.0.0", "endpoint": down})
    failed = ok(deploy_tool(facade.client, env, "offline-1.0.0", {"isAsync": False}))
    assert_job_record(failed, toolId="offline-1.0.0", jobType="TOOLS", status="FAILED")
    assert failed["reason"] == "EndpointUnreachable"
    assert "is not reachable" in failed["message"]

    # a synchronous call never waits longer than the facade's bound: then it answers IN_PROGRESS (an image
    # tool needs a Deployment, a scheduled pod and its readiness: far longer than 0.05 s)
    tool_id = image_tool(api, namespace, "search", "1.0.0")
    with run_facade(ApiSettings(sync_deploy_timeout_seconds=0.05)) as hasty:
        pending = ok(deploy_tool(hasty.client, env, tool_id, {"isAsync": False}))
    assert_job_record(pending, toolId=tool_id, status="IN_PROGRESS")
    assert "after 0.05s" in pending["message"]
    assert "dock-status" in pending["message"]
    done = wait_dock_status(facade.client, env, pending["dockStatusId"])
    assert (done["status"], done["reason"]) == ("SUCCESS", "Available")


def test_tool_deploy_refusals(
    api: client.ApiClient, namespace: str, env: PublicEnvironment, facade: RunningFacade
) -> None:
    http = facade.client
    image_tool(api, namespace, "weather", "1.0.0")
    refused(deploy_tool(http, env, "no-such-tool-1.0.0", {"isAsync": True}), 404, "no-such-tool-1.0.0")
    for body, field in (
        ({}, "body.isAsync"),
        ({"isAsync": "yes"}, "body.isAsync"),
        ({"isAsync": 1}, "body.isAsync"),
        ([], "body"),
    ):
        error = refused(deploy_tool(http, env, "weather-1.0.0", body), 422, field)
        assert any(d["field"] == field for d in error["details"]), error
    assert (
        client.CustomObjectsApi(api).list_namespaced_custom_object(
            "dockyard.dev", "v1alpha1", namespace, "tooldeployments", label_selector="dockyard.dev/dock-status-id"
        )["items"]
        == []
    )
