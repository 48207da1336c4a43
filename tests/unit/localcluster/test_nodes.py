from __future__ import annotations

import pytest

from dockyard_core.devices import BUILT_IN as DEVICES
from dockyard_core.devices import DEVICE_TYPES, GPU_RESOURCE, INSTANCE_TYPE_LABEL
from dockyard_localcluster.nodes import gpu_node, node_name, parse_pools, pool_nodes


def test_catalog_holds_the_eight_spec_device_types() -> None:
    assert set(DEVICE_TYPES) == {
        "g4dn.xlarge", "g5.xlarge", "g5.2xlarge", "g6e.xlarge",
        "g4dn.12xlarge", "g5.12xlarge", "g5.48xlarge", "g4dn.metal",
    }  # fmt: skip
    assert (DEVICES["g5.12xlarge"].vcpu, DEVICES["g5.12xlarge"].memory_gib, DEVICES["g5.12xlarge"].gpus) == (48, 192, 4)
    assert (DEVICES["g6e.xlarge"].gpu_model, DEVICES["g6e.xlarge"].gpu_memory_gb) == ("L40S", 48)


@pytest.mark.parametrize("device_type", DEVICE_TYPES)
def test_gpu_node_carries_catalog_capacity_label_and_taint(device_type: str) -> None:
    node = gpu_node(device_type, 3)
    device = DEVICES[device_type]
    assert node["metadata"]["name"] == node_name(device_type, 3)
    assert "." not in node["metadata"]["name"]
    assert node["metadata"]["labels"][INSTANCE_TYPE_LABEL] == device_type
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    for key in ("capacity", "allocatable"):
        assert node["status"][key][GPU_RESOURCE] == str(device.gpus)
        assert node["status"][key]["cpu"] == str(device.vcpu)
        assert node["status"][key]["memory"] == f"{device.memory_gib}Gi"
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def test_parse_pools_defaults_and_overrides() -> None:
    pools = parse_pools("g5.xlarge=4, g5.48xlarge=0", default_size=2)
    assert pools["g5.xlarge"] == 4
    assert pools["g5.48xlarge"] == 0
    assert pools["g4dn.metal"] == 2
    assert len(pool_nodes(pools)) == 4 + 0 + 2 * 6


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("p4d.24xlarge=1", "deviceType one of"),
        ("g5.xlarge", "expected <deviceType>=<count>"),
        ("g5.xlarge=many", "must be an integer"),
        ("g5.xlarge=-1", "must be >= 0"),
    ],
)
def test_parse_pools_rejects_bad_entries(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_pools(text, default_size=1)


def test_a_thousand_nodes_have_unique_names() -> None:
    pools = dict.fromkeys(DEVICE_TYPES, 125)
    nodes = pool_nodes(pools)
    assert len(nodes) == 1000
    assert len({n["metadata"]["name"] for n in nodes}) == 1000
