"""A chart release in the test bed rendered by the pinned helm (dockyard_localcluster.incluster; its pure
parts: tests/unit/localcluster/test_incluster.py)."""

from __future__ import annotations

from dockyard_localcluster import incluster
from tests.support.helm import Helm, helm_binary, one

REFS = {  # the same image references as tests/unit/localcluster/test_incluster.py
    "dockyard": "localhost/dockyard:0123456789abcdef",
    "llama-cpp": "localhost/dockyard-llama-cpp:fedcba9876543210",
    "ct2-server": "localhost/dockyard-ct2-server:0011",
    "tool": "localhost/dockyard-tool:00aa",
}


def test_the_testbed_values_render_with_the_chart() -> None:
    """The values file and the image sets give objects that use the local images and never pull them,
    and the facade Service name incluster forwards to is the chart's."""
    values = [
        str(incluster.testbed_values()),
        *[a for a in incluster.helm_args(REFS, "http://127.0.0.1:1", []) if a != "--set"],
    ]
    objects = Helm(helm_binary()).objects(release="dockyard", values=values)
    for component in ("operator", "api"):
        deployment = one(objects, "Deployment", incluster.Release.deployment_name("dockyard", component))
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] == REFS["dockyard"]
        assert container["imagePullPolicy"] == "Never"
    assert one(objects, "Service", incluster.facade_service("dockyard"))
    claim = one(objects, "PersistentVolumeClaim")
    assert claim["spec"]["storageClassName"] == incluster.STORAGE_CLASS
    # the runtime catalog the operator reads names the local engine images
    catalog = one(objects, "ConfigMap", "dockyard-runtime-catalog")["data"]["runtimes.yaml"]
    assert REFS["llama-cpp"] in catalog
    assert REFS["ct2-server"] in catalog
