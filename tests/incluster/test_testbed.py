"""The real-node test bed itself (docs/real-node.md): a real kubelet node beside kwok's GPU pools,
pods with real containers, Services and DNS between them, a GPU pod on the real node, loopback-only
access from the host, and the host's network state untouched.

Nothing here sends a packet from the host's namespace to a cluster address: pods are reached through
:meth:`TestBed.forward` (a loopback relay) or from other pods.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest
import yaml
from tests.support.testbed import SessionTestBed, host_network_snapshot, route_to
from tests.support.waiting import wait_for

from dockyard_core.devices import GPU_RESOURCE, GPU_TAINT_KEY, INSTANCE_TYPE_LABEL
from dockyard_localcluster import images
from dockyard_localcluster.testbed import TestBed
from dockyard_localcluster.testbed.addons import REAL_DEVICE_TYPE, REAL_NODE_GPUS, kwok_pools
from dockyard_localcluster.testbed.config import CLUSTER_CIDR, SERVICE_CIDR

WEB_PORT = 8080


@pytest.fixture(scope="module")
def bed(testbed: SessionTestBed) -> TestBed:
    return testbed.bed


@pytest.fixture(scope="module")
def python_image(bed: TestBed) -> str:
    """The images' Debian base (python3, nothing of this repository): a server and a client for the
    network checks. Keyed on the apt sources only, so it is not rebuilt when the code changes."""
    ref = images.ensure_base(images.Store())
    bed.load_refs([ref])
    return ref


@pytest.fixture(scope="module")
def ns(bed: TestBed) -> Iterator[str]:
    name = f"tb-{uuid.uuid4().hex[:6]}"
    bed.kubectl("create", "namespace", name)
    yield name
    bed.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _pod(name: str, image: str, command: list[str], **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": image, "imagePullPolicy": "Never", "command": command}
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [container], **spec},
    }


def _get(bed: TestBed, *args: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(bed.kubectl("get", *args, "-o", "json"))
    return data


def _phase(bed: TestBed, ns: str, name: str) -> str:
    return str(_get(bed, "-n", ns, "pod", name).get("status", {}).get("phase", ""))


def _run_to_completion(bed: TestBed, ns: str, pod: dict[str, Any], timeout: float = 120) -> str:
    """Create the pod, wait until it ends, return its log (it must have succeeded)."""
    bed.kubectl("-n", ns, "create", "-f", "-", input=yaml.safe_dump(pod))
    name = pod["metadata"]["name"]
    phase = wait_for(
        lambda: (p := _phase(bed, ns, name)) in ("Succeeded", "Failed") and p,
        timeout=timeout,
        interval=1,
        what=f"pod {name} to finish",
    )
    out = bed.kubectl("-n", ns, "logs", name)
    assert phase == "Succeeded", out
    return out


@pytest.fixture(scope="module")
def web(bed: TestBed, ns: str, python_image: str) -> str:
    """An HTTP server pod on the real node and its Service ``web``; returns the ClusterIP."""
    pod = _pod(
        "web",
        python_image,
        ["python3", "-c", "import http.server as h, os, pathlib; pathlib.Path('/tmp/w').mkdir();"
         "pathlib.Path('/tmp/w/index.html').write_text('hello from ' + os.environ['HOSTNAME']); os.chdir('/tmp/w');"
         f"h.ThreadingHTTPServer(('', {WEB_PORT}), h.SimpleHTTPRequestHandler).serve_forever()"],
        container={"readinessProbe": {"tcpSocket": {"port": WEB_PORT}, "periodSeconds": 1}},
    )  # fmt: skip
    pod["spec"]["restartPolicy"] = "Always"
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": WEB_PORT}]},
    }
    bed.kubectl("-n", ns, "create", "-f", "-", input=yaml.safe_dump_all([pod, service]))
    bed.kubectl("-n", ns, "wait", "--for=condition=Ready", "pod/web", "--timeout=120s", timeout="0")
    return str(_get(bed, "-n", ns, "service", "web")["spec"]["clusterIP"])


def test_the_real_node_is_ready_beside_the_kwok_gpu_pools(bed: TestBed) -> None:
    nodes = {n["metadata"]["name"]: n for n in _get(bed, "nodes")["items"]}
    real = nodes.pop(bed.layout.node_name)
    ready = {c["type"]: c["status"] for c in real["status"]["conditions"]}["Ready"]
    assert ready == "True"
    assert "kwok.x-k8s.io/node" not in real["metadata"].get("annotations", {})
    assert real["metadata"]["labels"][INSTANCE_TYPE_LABEL] == REAL_DEVICE_TYPE
    assert real["status"]["allocatable"][GPU_RESOURCE] == str(REAL_NODE_GPUS)
    assert real["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    wanted = sum(kwok_pools(bed.settings.nodes_per_type).values())
    assert len(nodes) == wanted
    for node in nodes.values():
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        assert node["metadata"]["labels"][INSTANCE_TYPE_LABEL] != REAL_DEVICE_TYPE
        assert {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"] == "True"


def test_the_host_reaches_the_api_server_through_loopback_only(bed: TestBed) -> None:
    server = yaml.safe_load(bed.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert urlparse(server).hostname == "127.0.0.1"
    assert bed.kubectl("get", "--raw", "/readyz").strip() == "ok"


def test_a_pod_runs_a_real_container_and_a_service_reaches_it_from_another_pod(
    bed: TestBed, ns: str, python_image: str, web: str
) -> None:
    pod = _get(bed, "-n", ns, "pod", "web")
    assert pod["spec"]["nodeName"] == bed.layout.node_name
    assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    # kube-proxy programs a new Service's rules a moment after its pod is Ready (longer on a busy machine): the
    # client retries a refused connection for up to 30 s, as a real client would
    script = (
        "import time, urllib.request\n"
        "for attempt in range(60):\n"
        "    try:\n"
        f"        print(urllib.request.urlopen('http://{web}:80/', timeout=10).read().decode()); break\n"
        "    except OSError:\n"
        "        if attempt == 59: raise\n"
        "        time.sleep(0.5)\n"
    )
    client = _pod("client", python_image, ["python3", "-c", script])
    assert _run_to_completion(bed, ns, client).strip() == "hello from web"


def test_dns_resolves_service_names_from_a_pod(bed: TestBed, ns: str, python_image: str, web: str) -> None:
    script = (
        "import socket, urllib.request;"
        f"print(socket.gethostbyname('web.{ns}.svc.cluster.local'));"
        "print(socket.gethostbyname('web'));"
        "print(socket.gethostbyname('kubernetes.default'));"
        f"print(urllib.request.urlopen('http://web.{ns}.svc.cluster.local/', timeout=10).read().decode())"
    )
    out = _run_to_completion(bed, ns, _pod("resolver", python_image, ["python3", "-c", script])).split()
    assert out[:3] == [web, web, "10.96.0.1"]
    assert " ".join(out[3:]) == "hello from web"


def test_a_service_is_forwarded_to_a_loopback_port(bed: TestBed, ns: str, web: str) -> None:
    port = bed.forward(ns, "web", 80)
    assert bed.forward(ns, "web", 80) == port  # reused
    try:
        resp = httpx.get(f"http://127.0.0.1:{port}/", timeout=10)
        assert resp.text == "hello from web"
    finally:
        bed.stop_forward(ns, "web", 80)


def test_a_g5_xlarge_gpu_pod_runs_on_the_real_node(bed: TestBed, ns: str) -> None:
    pause = bed.load_images(["pause"])["pause"]
    pod = _pod(
        "gpu",
        pause,
        ["/pause"],
        nodeSelector={INSTANCE_TYPE_LABEL: REAL_DEVICE_TYPE},
        tolerations=[{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        container={"resources": {"requests": {GPU_RESOURCE: "1", "cpu": "100m"}, "limits": {GPU_RESOURCE: "1"}}},
    )
    names = [f"gpu-{i}" for i in range(REAL_NODE_GPUS)]
    for name in names:
        one = {**pod, "metadata": {"name": name, "labels": {"app": name}}}
        bed.kubectl("-n", ns, "create", "-f", "-", input=yaml.safe_dump(one))
    for name in names:
        bed.kubectl("-n", ns, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s", timeout="0")
        status = _get(bed, "-n", ns, "pod", name)
        assert status["spec"]["nodeName"] == bed.layout.node_name
        assert status["status"]["containerStatuses"][0]["state"].get("running")
        assert status["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    # every GPU is taken: one more GPU pod stays Pending (kwok has no g5.xlarge nodes)
    extra = {**pod, "metadata": {"name": "gpu-extra", "labels": {"app": "gpu-extra"}}}
    bed.kubectl("-n", ns, "create", "-f", "-", input=yaml.safe_dump(extra))
    reason = wait_for(
        lambda: next(
            (c.get("reason") for c in _get(bed, "-n", ns, "pod", "gpu-extra")["status"].get("conditions", [])
             if c["type"] == "PodScheduled" and c["status"] == "False"),
            None,
        ),
        timeout=60,
        what="gpu-extra to be unschedulable",
    )  # fmt: skip
    assert reason == "Unschedulable"
    bed.kubectl("-n", ns, "delete", "pod", *names, "gpu-extra", "--wait=false")


@pytest.mark.timeout(1200)
def test_zz_the_host_network_is_the_same_before_during_and_after(testbed: SessionTestBed) -> None:
    """THE NETWORK RULE: a full cycle down -> up -> down leaves the host's iptables, routes, rules,
    links and sysctls as they were, and while the test bed runs the host has no route into it."""
    bed = testbed.bed
    was_running = bed.is_running()
    bed.down()
    before = host_network_snapshot()
    routes_before = {a: route_to(a) for a in ("10.96.0.1", "10.96.0.10", "10.244.0.2", "10.200.0.1")}
    bed.up()
    try:
        during = host_network_snapshot()
        assert during == before
        for address, route in routes_before.items():
            assert route_to(address) == route  # the host's own default route, as before: no test bed device
        assert all(dev not in route_to(a) for a in routes_before for dev in ("tbcni0", "tb0"))
        host_routes = before["route"] + before["route6"]
        assert SERVICE_CIDR not in host_routes
        assert CLUSTER_CIDR.rsplit(".", 2)[0] not in host_routes
    finally:
        bed.down()
    after = host_network_snapshot()
    assert after == before
    assert not bed.layout.netns_path.exists()
    assert not bed.layout.work.exists()
    if was_running and not testbed.started_here:
        bed.up()  # as this session found it
