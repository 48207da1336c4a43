"""Proof that the cluster behaves like a GPU cluster: the real scheduler places and refuses GPU pods,
the node pools match the device catalog, and the simulation stages do what they claim."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from kubernetes import client

from dockyard_core.devices import BUILT_IN as DEVICES
from dockyard_core.devices import DEVICE_TYPES, GPU_RESOURCE, INSTANCE_TYPE_LABEL
from dockyard_localcluster.nodes import POOL_LABEL
from dockyard_localcluster.stages import SIMULATE_LABEL
from tests.support.cluster import E2ECluster
from tests.support.waiting import holds_for, wait_for

GPU_TOLERATION = client.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")


def gpu_deployment(name: str, device_type: str, gpus: int, labels: dict[str, str] | None = None) -> Any:
    pod_labels = {"app": name, **(labels or {})}
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels={"app": name}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=pod_labels),
                spec=client.V1PodSpec(
                    node_selector={INSTANCE_TYPE_LABEL: device_type},
                    tolerations=[GPU_TOLERATION],
                    containers=[
                        client.V1Container(
                            name="engine",
                            image="vllm/vllm-openai:v0.11.0",
                            resources=client.V1ResourceRequirements(
                                requests={GPU_RESOURCE: str(gpus), "cpu": "1", "memory": "2Gi"},
                                limits={GPU_RESOURCE: str(gpus)},
                            ),
                        )
                    ],
                ),
            ),
        ),
    )


def pods_of(api: client.ApiClient, namespace: str, app: str) -> list[client.V1Pod]:
    items: list[client.V1Pod] = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"app={app}").items
    return items


def one_pod(api: client.ApiClient, namespace: str, app: str) -> client.V1Pod | None:
    pods = pods_of(api, namespace, app)
    return pods[0] if pods else None


def condition(pod: client.V1Pod, kind: str) -> str | None:
    for cond in pod.status.conditions or []:
        if cond.type == kind:
            return str(cond.status)
    return None


def test_binaries_report_their_real_version(cluster: E2ECluster) -> None:
    if cluster.kind != "local":
        pytest.skip("versions are pinned only for the local control plane")
    out = subprocess.run(
        [cluster.kubectl, "--kubeconfig", str(cluster.kubeconfig), "version", "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert '"gitVersion": "v1.36.3"' in out  # client and server, not v0.0.0-master


def test_node_pools_match_the_device_catalog(api: client.ApiClient) -> None:
    nodes = client.CoreV1Api(api).list_node(label_selector=f"{POOL_LABEL},nvidia.com/gpu.present=true").items
    seen = {n.metadata.labels[INSTANCE_TYPE_LABEL] for n in nodes}
    assert seen == set(DEVICE_TYPES)
    for node in nodes:
        device = DEVICES[node.metadata.labels[INSTANCE_TYPE_LABEL]]
        assert node.status.capacity[GPU_RESOURCE] == str(device.gpus)
        assert node.status.allocatable["cpu"] == str(device.vcpu)
        assert node.status.allocatable["memory"] == f"{device.memory_gib}Gi"
        assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [("nvidia.com/gpu", "present", "NoSchedule")]
        assert condition(node, "Ready") == "True"


def test_general_purpose_pool_has_no_gpus_and_no_taint(api: client.ApiClient) -> None:
    nodes = client.CoreV1Api(api).list_node(label_selector=f"{POOL_LABEL}=cpu").items
    assert nodes
    for node in nodes:
        assert GPU_RESOURCE not in node.status.capacity
        assert not node.spec.taints
        assert condition(node, "Ready") == "True"


def test_four_gpus_on_g5_12xlarge_run_on_that_type(api: client.ApiClient, namespace: str) -> None:
    client.AppsV1Api(api).create_namespaced_deployment(namespace, gpu_deployment("fits", "g5.12xlarge", 4))
    pod = wait_for(
        lambda: next((p for p in pods_of(api, namespace, "fits") if condition(p, "Ready") == "True"), None),
        what="a Ready pod",
    )
    node = client.CoreV1Api(api).read_node(pod.spec.node_name)
    assert node.metadata.labels[INSTANCE_TYPE_LABEL] == "g5.12xlarge"
    assert pod.status.phase == "Running"
    deployment = wait_for(
        lambda: (
            (d := client.AppsV1Api(api).read_namespaced_deployment("fits", namespace)).status.available_replicas and d
        ),
        what="the Deployment to be available",
    )
    assert deployment.status.ready_replicas == 1


def test_eight_gpus_on_g5_xlarge_stay_pending_with_the_schedulers_reason(api: client.ApiClient, namespace: str) -> None:
    client.AppsV1Api(api).create_namespaced_deployment(namespace, gpu_deployment("toobig", "g5.xlarge", 8))
    pod = wait_for(lambda: one_pod(api, namespace, "toobig"), what="the pod")
    core = client.CoreV1Api(api)

    def scheduler_event() -> str | None:
        events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod.metadata.name}")
        return next((e.message for e in events.items if e.reason == "FailedScheduling"), None)

    message = wait_for(scheduler_event, what="a FailedScheduling event")
    assert "Insufficient nvidia.com/gpu" in message
    pod = core.read_namespaced_pod(pod.metadata.name, namespace)
    assert pod.status.phase == "Pending"
    assert pod.spec.node_name is None


def test_crash_loop_stage(api: client.ApiClient, namespace: str) -> None:
    deployment = gpu_deployment("crashy", "g5.xlarge", 1, {SIMULATE_LABEL: "crash-loop"})
    client.AppsV1Api(api).create_namespaced_deployment(namespace, deployment)

    def crash_looping() -> client.V1Pod | None:
        pod = one_pod(api, namespace, "crashy")
        statuses = (pod.status.container_statuses or []) if pod else []
        waiting = [s for s in statuses if s.state.waiting and s.state.waiting.reason == "CrashLoopBackOff"]
        return pod if waiting else None

    pod = wait_for(crash_looping, what="CrashLoopBackOff")
    status = pod.status.container_statuses[0]
    assert status.restart_count > 0
    assert status.last_state.terminated.exit_code == 1
    assert condition(pod, "Ready") == "False"
    assert pod.status.phase == "Running"


def test_never_ready_stage(api: client.ApiClient, namespace: str) -> None:
    deployment = gpu_deployment("lazy", "g5.xlarge", 1, {SIMULATE_LABEL: "never-ready"})
    client.AppsV1Api(api).create_namespaced_deployment(namespace, deployment)
    wait_for(
        lambda: (p := one_pod(api, namespace, "lazy")) is not None and p.status.phase == "Running",
        what="a Running pod",
    )

    def running_but_unready() -> None:
        pod = one_pod(api, namespace, "lazy")
        assert pod is not None
        assert pod.status.phase == "Running"
        assert condition(pod, "Ready") == "False"
        assert pod.status.container_statuses[0].state.running is not None

    holds_for(running_but_unready, seconds=8)  # it must stay so, not just start that way
    deployment_status = client.AppsV1Api(api).read_namespaced_deployment("lazy", namespace).status
    assert not deployment_status.ready_replicas


def test_image_pull_error_stage(api: client.ApiClient, namespace: str) -> None:
    deployment = gpu_deployment("nopull", "g5.xlarge", 1, {SIMULATE_LABEL: "image-pull-error"})
    client.AppsV1Api(api).create_namespaced_deployment(namespace, deployment)

    def pull_failed() -> client.V1Pod | None:
        pod = one_pod(api, namespace, "nopull")
        statuses = (pod.status.container_statuses or []) if pod else []
        return pod if any(s.state.waiting and s.state.waiting.reason == "ImagePullBackOff" for s in statuses) else None

    name = wait_for(pull_failed, what="ImagePullBackOff").metadata.name

    def still_failing() -> None:  # kwok's pod-ready stage must not take it over afterwards
        pod = client.CoreV1Api(api).read_namespaced_pod(name, namespace)
        assert pod.status.phase == "Pending"
        assert condition(pod, "Ready") == "False"
        assert pod.status.container_statuses[0].state.waiting.reason == "ImagePullBackOff"

    holds_for(still_failing, seconds=4)
