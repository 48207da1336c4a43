"""Pure builders of the test bed (dockyard_localcluster.testbed.config / addons / host / relay)."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
import threading
import tomllib
from pathlib import Path

import pytest
import yaml

from dockyard_core.devices import BUILT_IN, DEVICE_TYPES, GPU_RESOURCE, INSTANCE_TYPE_LABEL, load_catalog
from dockyard_localcluster.testbed import addons, config, host, relay
from dockyard_operator.builders.model import pod_resources

LAYOUT = config.Layout("tb", Path("/w/tb"))


def test_layout_names() -> None:
    assert LAYOUT.netns == "dockyard-tb"
    assert LAYOUT.netns_path == Path("/run/netns/dockyard-tb")
    assert LAYOUT.cgroup_root == "dockyard-tb"
    assert LAYOUT.component_kubeconfig("kubelet") == Path("/w/tb/kubeconfigs/kubelet.kubeconfig")


def test_addresses_are_consistent() -> None:
    services = ipaddress.IPv4Network(config.SERVICE_CIDR)
    cluster = ipaddress.IPv4Network(config.CLUSTER_CIDR)
    assert ipaddress.ip_address(config.KUBERNETES_SERVICE_IP) in services
    assert ipaddress.ip_address(config.DNS_SERVICE_IP) in services
    node_pods = ipaddress.IPv4Network(config.NODE_POD_CIDR)
    kwok_pods = ipaddress.IPv4Network(config.KWOK_POD_CIDR)
    assert node_pods.subnet_of(cluster)
    assert kwok_pods.subnet_of(cluster)
    assert not node_pods.overlaps(kwok_pods)
    assert ipaddress.ip_address(config.NODE_IP) not in cluster
    assert ipaddress.ip_address(config.NODE_IP) not in services


def test_containerd_config_keeps_state_in_the_work_dir_and_restricts_oom_score_adj() -> None:
    doc = tomllib.loads(config.containerd_config(LAYOUT, "localhost/pause:3.10.2"))
    assert doc["version"] == 2
    for key in ("root", "state"):
        assert doc[key].startswith("/w/tb/")
    assert doc["grpc"]["address"] == "/w/tb/containerd/containerd.sock"
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["sandbox_image"] == "localhost/pause:3.10.2"
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert cri["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": "/w/tb/cni/net.d"}


def test_cni_is_a_bridge_on_the_node_pod_cidr() -> None:
    bridge = config.cni_conflist(LAYOUT)["plugins"][0]
    assert bridge["type"] == "bridge"
    assert bridge["bridge"] == config.BRIDGE
    assert bridge["ipMasq"] is False  # nothing leaves the namespace: no NAT rules needed
    assert bridge["ipam"]["ranges"] == [[{"subnet": config.NODE_POD_CIDR}]]
    assert bridge["ipam"]["dataDir"] == "/w/tb/cni/ipam"


def test_kubelet_config_handles_the_machine_quirks() -> None:
    cfg = config.kubelet_config(LAYOUT)
    assert cfg["cgroupDriver"] == "cgroupfs"
    assert cfg["cgroupRoot"] == "/dockyard-tb"
    assert cfg["failCgroupV1"] is False
    assert cfg["protectKernelDefaults"] is False  # it would refuse to start; its writes are contained
    assert cfg["clusterDNS"] == [config.DNS_SERVICE_IP]
    assert cfg["clusterDomain"] == "cluster.local"
    assert cfg["address"] == config.NODE_IP
    assert cfg["authentication"]["anonymous"]["enabled"] is False
    assert "systemReserved" not in cfg
    assert "kubeReserved" not in cfg


def test_kube_proxy_never_touches_the_global_conntrack_table() -> None:
    cfg = config.kube_proxy_config(LAYOUT)
    assert cfg["mode"] == "iptables"
    assert cfg["conntrack"]["maxPerCore"] == 0
    assert cfg["conntrack"]["min"] == 0
    assert cfg["clusterCIDR"] == config.CLUSTER_CIDR
    assert cfg["hostnameOverride"] == "tb-node"


def test_apiserver_args() -> None:
    args = config.apiserver_args(LAYOUT)
    assert f"--secure-port={config.APISERVER_PORT}" in args
    assert f"--advertise-address={config.NODE_IP}" in args
    assert "--kubelet-preferred-address-types=InternalIP" in args  # no DNS lookup of the node name
    assert "--authorization-mode=Node,RBAC" in args
    assert f"--service-cluster-ip-range={config.SERVICE_CIDR}" in args


def test_kwok_manages_only_annotated_nodes() -> None:
    args = config.kwok_args(LAYOUT)
    assert "--manage-all-nodes=false" in args
    assert "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake" in args
    assert f"--cidr={config.KWOK_POD_CIDR}" in args


def test_component_files() -> None:
    stages = [{"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": "s"}}]
    files = config.component_files(LAYOUT, "localhost/pause:3.10.2", stages)
    assert files[Path("/w/tb/resolv.conf")] == "search cluster.local\n"
    assert list(yaml.safe_load_all(files[Path("/w/tb/kwok.yaml")])) == stages
    assert json.loads(files[Path("/w/tb/cni/net.d/10-testbed.conflist")])["name"] == "dockyard-testbed"


def test_kubeconfig_embeds_credentials() -> None:
    kc = config.kubeconfig("https://127.0.0.1:1234", b"CA", b"CERT", b"KEY", "admin")
    assert kc["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:1234"
    assert kc["users"][0]["user"]["client-key-data"] == "S0VZ"


def test_holder_binds_the_three_sysctls_and_a_private_run_containerd() -> None:
    script = host.holder_script(LAYOUT)
    for key in ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"):
        assert f"/proc/sys/{key}\n" in script
    assert "/run/containerd" in script
    assert script.rstrip().endswith("exec sleep infinity")


def test_daemons_run_in_the_holders_namespaces() -> None:
    assert host.in_daemon_namespaces(42, ["kubelet", "-v"]) == [
        "nsenter", "--target=42", "--mount", "--net", "--", "kubelet", "-v",
    ]  # fmt: skip
    assert host.in_netns(LAYOUT, ["kubectl"]) == ["nsenter", "--net=/run/netns/dockyard-tb", "--", "kubectl"]


# -- addons ------------------------------------------------------------------------------------------
def test_real_node_is_a_g5_xlarge_gpu_node_without_the_pool_label() -> None:
    labels = addons.real_node_labels()
    assert labels[INSTANCE_TYPE_LABEL] == "g5.xlarge"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A10G"
    assert "dockyard.dev/node-pool" not in labels  # the kwok pools' re-sizing would delete it
    assert "taints" not in addons.real_node_metadata_patch().get("spec", {})


def test_gpu_capacity_patch_escapes_the_resource_name() -> None:
    assert addons.gpu_capacity_patch(1) == [{"op": "add", "path": "/status/capacity/nvidia.com~1gpu", "value": "1"}]
    assert GPU_RESOURCE == "nvidia.com/gpu"


def test_kwok_pools_leave_g5_xlarge_to_the_real_node() -> None:
    pools = addons.kwok_pools(1)
    assert pools["g5.xlarge"] == 0
    assert sum(pools.values()) == len(DEVICE_TYPES) - 1
    nodes = addons.kwok_nodes(pools)
    assert len(nodes) == 7
    assert all(n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake" for n in nodes)
    assert "g5.xlarge" not in {n["metadata"]["labels"][INSTANCE_TYPE_LABEL] for n in nodes}


def test_the_catalog_override_makes_a_g5_xlarge_model_pod_fit_two_cores(tmp_path: Path) -> None:
    assert pod_resources(BUILT_IN["g5.xlarge"])["requests"]["cpu"] == "3500m"  # why the override exists
    path = tmp_path / "devices.yaml"
    path.write_text(yaml.safe_dump(addons.DEVICE_CATALOG_OVERRIDE))
    device = load_catalog(str(path))["g5.xlarge"]
    requests = pod_resources(device)["requests"]
    assert int(requests["cpu"].removesuffix("m")) <= 1000
    assert int(requests["memory"].removesuffix("Mi")) <= 2048
    assert requests[GPU_RESOURCE] == "1"
    assert addons.helm_values() == {"deviceCatalog": addons.DEVICE_CATALOG_OVERRIDE}


def test_the_charts_testbed_values_do_not_contradict_the_override() -> None:
    """The in-cluster release passes both files; the test bed's helm-values.yaml carries the catalog."""
    values = yaml.safe_load((Path(__file__).parents[3] / "charts/dockyard/ci/testbed-values.yaml").read_text())
    assert values.get("deviceCatalog", addons.DEVICE_CATALOG_OVERRIDE) == addons.DEVICE_CATALOG_OVERRIDE


def test_coredns_objects() -> None:
    objs = {o["kind"]: o for o in addons.coredns_objects("localhost/coredns:v1.14.2", "tb-node")}
    assert objs["Service"]["spec"]["clusterIP"] == config.DNS_SERVICE_IP
    assert {p["port"] for p in objs["Service"]["spec"]["ports"]} == {53}
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "tb-node"}
    assert pod["containers"][0]["image"] == "localhost/coredns:v1.14.2"
    assert pod["containers"][0]["imagePullPolicy"] == "Never"
    assert "kubernetes cluster.local" in objs["ConfigMap"]["data"]["Corefile"]
    assert "forward" not in objs["ConfigMap"]["data"]["Corefile"]


# -- relay -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "parsed"), [("10.96.0.1:443", ("10.96.0.1", 443)), ("[::1]:80", ("::1", 80))])
def test_parse_target(text: str, parsed: tuple[str, int]) -> None:
    assert relay.parse_target(text) == parsed


@pytest.mark.parametrize("text", ["10.96.0.1", ":80", "host:http"])
def test_parse_target_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        relay.parse_target(text)


def test_relay_pipes_both_ways_on_loopback() -> None:
    """The relay's serving half (no namespace switch): bytes go through and come back."""
    upstream = socket.socket()
    upstream.bind(("127.0.0.1", 0))
    upstream.listen(1)

    def echo() -> None:
        conn, _ = upstream.accept()
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data.upper())

    threading.Thread(target=echo, daemon=True).start()
    listener = relay.listen_loopback(0)
    port = listener.getsockname()[1]
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    serving = asyncio.run_coroutine_threadsafe(relay.serve(listener, upstream.getsockname()), loop)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
        client.sendall(b"hello")
        client.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := client.recv(4096):
            received += chunk
    assert received == b"HELLO"

    async def stop() -> None:
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
    assert serving.cancelled()
    loop.call_soon_threadsafe(loop.stop)
    runner.join(5)
    loop.close()
    upstream.close()
