"""ToolDeployments (image and external endpoint) and Dockyard's autoscaler on the real cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from dockyard_operator.builders.common import MODEL_DEPLOYMENT_LABEL, TOOL_DEPLOYMENT_LABEL
from dockyard_operator.scaling import METRICS_URL_ANNOTATION
from tests.support.cluster import E2ECluster
from tests.support.dockyard import condition, create, get, hub_model, model_deployment, wait_job
from tests.support.fakes import EngineLoad, http_server
from tests.support.runners import RunningOperator, free_port, run_operator
from tests.support.waiting import holds_for, wait_for


@pytest.fixture(scope="module")
def operator(cluster: E2ECluster, crds: None) -> Iterator[RunningOperator]:
    with run_operator(env={"DOCKYARD_OPERATOR_ENDPOINT_TIMEOUT_SECONDS": "1"}) as running:
        yield running


pytestmark = pytest.mark.usefixtures("operator")


def tool(api: client.ApiClient, namespace: str, name: str, version: str, **spec: object) -> str:
    tool_id = f"{name}-{version}"
    create(api, namespace, "tools", "Tool", tool_id, {"name": name, "version": version, **spec})
    return tool_id


def tool_deployment(api: client.ApiClient, namespace: str, tool_id: str, **spec: object) -> None:
    create(api, namespace, "tooldeployments", "ToolDeployment", tool_id, {"toolRef": tool_id, **spec})


def test_image_tool_runs_on_general_purpose_nodes(api: client.ApiClient, namespace: str) -> None:
    tool_id = tool(api, namespace, "weather", "1.2.0", container={"image": "ghcr.io/acme/weather:1.2.0"})
    tool_deployment(api, namespace, tool_id, replicas=2)
    done = wait_job(api, namespace, "tooldeployments", tool_id, "SUCCESS")
    assert (done["jobType"], done["action"]) == ("TOOLS", "DEPLOY")
    core = client.CoreV1Api(api)
    pods = core.list_namespaced_pod(namespace, label_selector=f"{TOOL_DEPLOYMENT_LABEL}={tool_id}").items
    assert len([p for p in pods if p.status.phase == "Running"]) == 2
    for pod in pods:
        assert "nvidia.com/gpu" not in (pod.spec.containers[0].resources.requests or {})
        assert core.read_node(pod.spec.node_name).metadata.labels["dockyard.dev/node-pool"] == "cpu"
    tdep = get(api, namespace, "tooldeployments", tool_id)
    service = tdep["status"]["serviceName"]
    assert "." not in service  # a valid Service name although the tool id has dots
    core.read_namespaced_service(service, namespace)
    assert tdep["status"]["endpoint"] == f"http://{service}.{namespace}.svc"
    assert condition(tdep, "Ready")["status"] == "True"


def test_image_tool_that_cannot_be_pulled_fails(api: client.ApiClient, namespace: str) -> None:
    tool_id = tool(api, namespace, "crm", "2.0.1", container={"image": "ghcr.io/acme/crm:missing"})
    create(api, namespace, "tooldeployments", "ToolDeployment", tool_id, {"toolRef": tool_id},
           labels={"dockyard.dev/simulate": "image-pull-error"})  # fmt: skip
    failed = wait_job(api, namespace, "tooldeployments", tool_id, "FAILED")
    assert failed["reason"] == "ImagePullError"


def test_endpoint_tool_is_checked_for_reachability(api: client.ApiClient, namespace: str) -> None:
    with http_server() as server:
        up = tool(api, namespace, "search", "1.0.0", endpoint=f"{server.url}/search")
        tool_deployment(api, namespace, up, isAsync=True)
        done = wait_job(api, namespace, "tooldeployments", up, "SUCCESS")
        assert done["reason"] == "Reachable"
        assert get(api, namespace, "tooldeployments", up)["status"]["endpoint"] == f"{server.url}/search"

    down = tool(api, namespace, "offline", "1.0.0", endpoint=f"http://127.0.0.1:{free_port()}/api")
    tool_deployment(api, namespace, down)
    failed = wait_job(api, namespace, "tooldeployments", down, "FAILED")
    assert failed["reason"] == "EndpointUnreachable"
    assert "is not reachable" in failed["message"]


def test_deploying_a_missing_tool_fails(api: client.ApiClient, namespace: str) -> None:
    tool_deployment(api, namespace, "ghost-1.0.0")
    failed = wait_job(api, namespace, "tooldeployments", "ghost-1.0.0", "FAILED")
    assert failed["reason"] == "ToolNotFound"


def test_autoscaler_follows_the_engine_load_within_bounds(api: client.ApiClient, namespace: str) -> None:
    load = EngineLoad()
    with http_server(load) as engine:
        hub_model(api, namespace, "scaled")
        model_deployment(
            api, namespace, "scaled", "g4dn.xlarge",
            scalingParameters={"minReplicas": 1, "maxReplicas": 2, "maxBatchSize": 4,
                               "scaleUpDelay": 300, "scaleDownDelay": 600},
            annotations={METRICS_URL_ANNOTATION: f"{engine.url}/metrics"},
        )  # fmt: skip
        wait_job(api, namespace, "modeldeployments", "scaled", "SUCCESS")
        apps = client.AppsV1Api(api)

        def replicas() -> int:
            items = apps.list_namespaced_deployment(namespace, label_selector=f"{MODEL_DEPLOYMENT_LABEL}=scaled").items
            return int(items[0].spec.replicas)

        load.running, load.waiting = 60, 40  # far more than 2 replicas x 4 sequences
        wait_for(lambda: replicas() == 2, timeout=30, what="scale up to maxReplicas")
        wait_for(lambda: get(api, namespace, "modeldeployments", "scaled")["status"].get("readyReplicas") == 2,
                 what="2 ready replicas")  # fmt: skip

        def at_most_max() -> None:
            assert replicas() <= 2

        holds_for(at_most_max, seconds=2)
        load.running, load.waiting = 0, 0
        wait_for(lambda: replicas() == 1, timeout=30, what="scale down to minReplicas")

        def at_least_min() -> None:
            assert replicas() >= 1

        holds_for(at_least_min, seconds=2)
        mdep = get(api, namespace, "modeldeployments", "scaled")
        assert mdep["spec"]["replicas"] == 1
