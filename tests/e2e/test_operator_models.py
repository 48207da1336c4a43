"""The operator serves ModelDeployments on the requested GPU nodes and tells the truth in its dock
status: SUCCESS only when serving, FAILED with a reason for every failure it can recognise."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from dockyard_core.devices import BUILT_IN as DEVICES
from dockyard_core.devices import GPU_RESOURCE, INSTANCE_TYPE_LABEL
from dockyard_operator.builders.common import MODEL_DEPLOYMENT_LABEL
from dockyard_operator.scheduling import parse_quantity
from tests.support.cluster import E2ECluster
from tests.support.dockyard import condition, create, get, hub_model, job, model_deployment, patch, wait_job
from tests.support.runners import RunningOperator, run_operator
from tests.support.waiting import holds_for, wait_for

OPERATOR_ENV = {
    "DOCKYARD_OPERATOR_UNSCHEDULABLE_DEADLINE_SECONDS": "6",
    "DOCKYARD_OPERATOR_PROGRESS_DEADLINE_SECONDS": "10",
}


@pytest.fixture(scope="module")
def operator(cluster: E2ECluster, crds: None) -> Iterator[RunningOperator]:
    with run_operator(env=OPERATOR_ENV) as running:
        yield running


pytestmark = pytest.mark.usefixtures("operator")


def workload(api: client.ApiClient, namespace: str, name: str) -> tuple[list[Any], list[Any], list[Any]]:
    selector = f"{MODEL_DEPLOYMENT_LABEL}={name}"
    deployments = client.AppsV1Api(api).list_namespaced_deployment(namespace, label_selector=selector).items
    services = client.CoreV1Api(api).list_namespaced_service(namespace, label_selector=selector).items
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    return deployments, services, pods


def events_of(api: client.ApiClient, namespace: str, name: str) -> list[Any]:
    selector = f"involvedObject.name={name},involvedObject.kind=ModelDeployment"
    items: list[Any] = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=selector).items
    return items


def engine_args(deployment: Any) -> list[str]:
    args: list[str] = deployment.spec.template.spec.containers[0].args
    return args


def test_serves_on_the_requested_gpu_nodes(api: client.ApiClient, namespace: str) -> None:
    hub_model(api, namespace, "llama")
    model_deployment(
        api, namespace, "llama", "g5.12xlarge",
        hyperParameters={"temperature": 0.7, "maxTokens": 256, "topP": 0.9, "topK": 40, "stopSequence": ["</s>"]},
        scalingParameters={"minReplicas": 2, "maxBatchSize": 64},
        optimizationInfo={"optimizationType": "", "quantizationType": ""},
    )  # fmt: skip
    done = wait_job(api, namespace, "modeldeployments", "llama", "SUCCESS")
    assert (done["jobType"], done["action"], done["reason"]) == ("MODELS", "DEPLOY", "Available")

    deployments, services, pods = workload(api, namespace, "llama")
    assert len(deployments) == 1
    assert len(services) == 1
    ready = [p for p in pods if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]
    assert len(ready) >= 2
    device = DEVICES["g5.12xlarge"]
    core = client.CoreV1Api(api)
    for pod in ready:
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels[INSTANCE_TYPE_LABEL] == "g5.12xlarge"
        requests = pod.spec.containers[0].resources.requests
        assert requests[GPU_RESOURCE] == "4"
        assert parse_quantity(requests["cpu"]) < device.vcpu
        assert parse_quantity(requests["memory"]) < device.memory_gib * 2**30
        assert any(t.key == "nvidia.com/gpu" and t.effect == "NoSchedule" for t in pod.spec.tolerations)
    args = engine_args(deployments[0])
    assert "--tensor-parallel-size=4" in args
    assert "--max-num-seqs=64" in args
    assert "--model=meta-llama/Llama-3.1-8B-Instruct" in args
    override = json.loads(next(a for a in args if a.startswith("--override-generation-config=")).split("=", 1)[1])
    assert override == {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "max_new_tokens": 256}

    mdep = get(api, namespace, "modeldeployments", "llama")
    assert condition(mdep, "Ready")["status"] == "True"
    assert condition(mdep, "Failed")["status"] == "False"
    assert mdep["status"]["readyReplicas"] >= 2
    assert mdep["status"]["endpoint"] == f"http://model-llama.{namespace}.svc:8000"
    assert mdep["metadata"]["labels"]["dockyard.dev/dock-status-id"] == done["dockStatusId"]
    # a successful job posts no Event (DOCKYARD_OPERATOR_SUCCESS_EVENTS is off): its record is the status
    assert [e.reason for e in events_of(api, namespace, "llama")] == []


def test_a_spec_change_is_a_new_job_a_scale_is_not(api: client.ApiClient, namespace: str) -> None:
    hub_model(api, namespace, "mistral", hub_id="mistralai/Mistral-7B-Instruct-v0.3")
    model_deployment(api, namespace, "mistral", scalingParameters={"minReplicas": 1, "maxReplicas": 2})
    first = wait_job(api, namespace, "modeldeployments", "mistral", "SUCCESS")

    patch(api, namespace, "modeldeployments", "mistral", {"spec": {"replicas": 2}})
    wait_for(lambda: get(api, namespace, "modeldeployments", "mistral")["status"].get("readyReplicas") == 2,
             what="2 ready replicas")  # fmt: skip
    assert job(api, namespace, "modeldeployments", "mistral")["dockStatusId"] == first["dockStatusId"]

    patch(api, namespace, "modeldeployments", "mistral", {"spec": {"scalingParameters": {"maxBatchSize": 8}}})
    second = wait_job(api, namespace, "modeldeployments", "mistral", "SUCCESS", not_id=first["dockStatusId"])
    assert second["templateHash"] != first["templateHash"]
    deployments, _, _ = workload(api, namespace, "mistral")
    assert len(deployments) == 1
    assert "--max-num-seqs=8" in engine_args(deployments[0])


def test_deleting_the_model_deployment_removes_its_workload(api: client.ApiClient, namespace: str) -> None:
    hub_model(api, namespace, "phi")
    model_deployment(api, namespace, "phi")
    wait_job(api, namespace, "modeldeployments", "phi", "SUCCESS")
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "dockyard.dev", "v1alpha1", namespace, "modeldeployments", "phi"
    )
    wait_for(lambda: workload(api, namespace, "phi") == ([], [], []), timeout=60, what="garbage collection")


@pytest.mark.parametrize(
    ("simulate", "reason", "words"),
    [
        ("image-pull-error", "ImagePullError", "ImagePullBackOff"),
        ("crash-loop", "CrashLoop", "last exit code 1"),
        ("never-ready", "ProgressDeadlineExceeded", "progress"),
        # the kubelet's FailedMount Event (kwok's stand-in, stage dockyard-failed-mount): at once, named
        ("failed-mount", "MissingSecret", 'volume "credentials" of pod model-broken-'),
    ],
)
def test_failures_are_reported_with_their_reason(
    api: client.ApiClient, namespace: str, simulate: str, reason: str, words: str
) -> None:
    hub_model(api, namespace, "broken")
    model_deployment(api, namespace, "broken", labels={"dockyard.dev/simulate": simulate})
    failed = wait_job(api, namespace, "modeldeployments", "broken", "FAILED", timeout=90)
    assert failed["reason"] == reason
    assert words in failed["message"]
    mdep = get(api, namespace, "modeldeployments", "broken")
    failed_condition = condition(mdep, "Failed")
    assert (failed_condition["status"], failed_condition["reason"]) == ("True", reason)
    assert condition(mdep, "Ready")["status"] == "False"
    warnings = [e for e in events_of(api, namespace, "broken") if e.type == "Warning"]
    assert any(e.reason == reason and failed["dockStatusId"] in e.message for e in warnings)


def test_unschedulable_longer_than_the_deadline_fails(api: client.ApiClient, namespace: str) -> None:
    hub_model(api, namespace, "big")
    # the pool has 2 g5.48xlarge nodes, each with 8 GPUs: a third replica can never be placed
    model_deployment(api, namespace, "big", "g5.48xlarge", scalingParameters={"minReplicas": 3})
    in_progress = wait_for(
        lambda: (j := job(api, namespace, "modeldeployments", "big")) and j["reason"] == "Unschedulable" and j,
        what="IN_PROGRESS Unschedulable",
    )
    assert in_progress["status"] == "IN_PROGRESS"
    failed = wait_job(api, namespace, "modeldeployments", "big", "FAILED", timeout=60)
    assert failed["reason"] == "Unschedulable"
    assert "no g5.48xlarge node with 8 free GPUs" in failed["message"]
    assert "Insufficient nvidia.com/gpu" in failed["message"]


def test_a_request_no_node_can_ever_hold_fails_at_once(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    nodes = core.list_node(label_selector=f"{INSTANCE_TYPE_LABEL}=g6e.xlarge").items
    assert nodes

    def set_gpus(count: str) -> None:
        for node in nodes:
            body = {"status": {"allocatable": {GPU_RESOURCE: count}, "capacity": {GPU_RESOURCE: count}}}
            core.patch_node_status(node.metadata.name, body)

    set_gpus("0")  # e.g. a broken device plugin on every node of the type
    try:
        hub_model(api, namespace, "nofit")
        model_deployment(api, namespace, "nofit", "g6e.xlarge")
        failed = wait_job(api, namespace, "modeldeployments", "nofit", "FAILED", timeout=30)
        assert failed["reason"] == "NoFittingNode"
        assert "no g6e.xlarge node can ever hold a replica" in failed["message"]
        assert "nvidia.com/gpu 1" in failed["message"]
    finally:
        set_gpus("1")


def test_a_model_that_is_not_ready_to_deploy_fails(api: client.ApiClient, namespace: str) -> None:
    upload = {"fileContext": "model", "fileName": "m", "fileExtension": "tar", "fileSize": 10, "totalChunks": 1}
    create(api, namespace, "models", "Model", "importing", {"source": {"upload": upload}})
    model_deployment(api, namespace, "importing")
    failed = wait_job(api, namespace, "modeldeployments", "importing", "FAILED", timeout=30)
    assert failed["reason"] == "ModelNotReady"
    assert "Model importing" in failed["message"]
    assert "ReadyToDeploy" in failed["message"]
    assert workload(api, namespace, "importing") == ([], [], [])


def test_an_adapter_is_served_on_its_base_model_with_lora(api: client.ApiClient, namespace: str) -> None:
    hub_model(api, namespace, "base")
    hub_model(api, namespace, "support-lora", hub_id="acme/support-lora", isAdapter=True, baseModel="base")
    model_deployment(api, namespace, "support-lora")
    wait_job(api, namespace, "modeldeployments", "support-lora", "SUCCESS")
    deployments, _, _ = workload(api, namespace, "support-lora")
    args = engine_args(deployments[0])
    assert "--model=meta-llama/Llama-3.1-8B-Instruct" in args
    assert "--enable-lora" in args
    assert "--lora-modules=support-lora=acme/support-lora" in args


def test_int8_float16_is_served_by_ctranslate2(api: client.ApiClient, namespace: str) -> None:
    hub_model(api, namespace, "quant")
    model_deployment(
        api, namespace, "quant", optimizationInfo={"optimizationType": "", "quantizationType": "int8_float16"}
    )
    wait_job(api, namespace, "modeldeployments", "quant", "SUCCESS")
    assert get(api, namespace, "modeldeployments", "quant")["status"]["runtime"] == "ctranslate2"
    deployments, _, _ = workload(api, namespace, "quant")
    assert "--compute-type=int8_float16" in engine_args(deployments[0])

    model_deployment(api, namespace, "quant-vllm", model="quant",
                     optimizationInfo={"optimizationType": "vllm", "quantizationType": "int8_float16"})  # fmt: skip
    failed = wait_job(api, namespace, "modeldeployments", "quant-vllm", "FAILED", timeout=30)
    assert failed["reason"] == "InvalidOptimization"


def test_replicas_stay_within_bounds(api: client.ApiClient, namespace: str) -> None:
    hub_model(api, namespace, "bounded")
    model_deployment(api, namespace, "bounded", scalingParameters={"minReplicas": 2, "maxReplicas": 3})
    wait_job(api, namespace, "modeldeployments", "bounded", "SUCCESS")
    patch(api, namespace, "modeldeployments", "bounded", {"spec": {"replicas": 40}})  # beyond maxReplicas

    def deployment_replicas() -> int:
        deployments, _, _ = workload(api, namespace, "bounded")
        return int(deployments[0].spec.replicas)

    wait_for(lambda: deployment_replicas() == 3, what="the Deployment clamped to maxReplicas")

    def within_bounds() -> None:
        assert 2 <= deployment_replicas() <= 3

    holds_for(within_bounds, seconds=3)
