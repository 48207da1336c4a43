"""The pure parts of a chart release in the test bed (dockyard_localcluster.incluster)."""

from __future__ import annotations

from pathlib import Path

from dockyard_localcluster import incluster

REFS = {
    "dockyard": "localhost/dockyard:0123456789abcdef",
    "llama-cpp": "localhost/dockyard-llama-cpp:fedcba9876543210",
    "ct2-server": "localhost/dockyard-ct2-server:0011",
    "tool": "localhost/dockyard-tool:00aa",
}


def test_helm_args_name_the_images_and_the_public_url() -> None:
    args = incluster.helm_args(REFS, "http://127.0.0.1:41000", [Path("/v/a.yaml")], ["facade.replicas=1"])
    assert args[:2] == ["--values", "/v/a.yaml"]
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    assert sets == [
        "image.repository=localhost/dockyard",
        "image.tag=0123456789abcdef",
        "runtimeCatalog.runtimes.llama-cpp.image=localhost/dockyard-llama-cpp:fedcba9876543210",
        "runtimeCatalog.runtimes.ctranslate2.image=localhost/dockyard-ct2-server:0011",
        "publicUrl=http://127.0.0.1:41000",
        "facade.replicas=1",
    ]


def test_the_model_store_volume_is_a_hostpath_on_the_real_node_for_the_charts_class() -> None:
    storage_class, volume = incluster.storage_objects("dockyard", "tb-node", Path("/srv/ms"))
    assert storage_class["provisioner"] == "kubernetes.io/no-provisioner"
    assert volume["spec"]["storageClassName"] == storage_class["metadata"]["name"] == incluster.STORAGE_CLASS
    assert volume["spec"]["hostPath"] == {"path": "/srv/ms", "type": "Directory"}
    (term,) = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["tb-node"]}]
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
