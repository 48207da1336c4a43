"""Which Kubernetes cluster the e2e suite runs against.

``DOCKYARD_E2E_CLUSTER``:
  ``local`` (default)  the suite's own local control plane (kwokctl, binary runtime): the cluster
                       ``dockyard-test`` with its state in ``.dockyard/test`` (``SuiteClusterSettings``,
                       ``DOCKYARD_TEST_*``; one per pytest-xdist worker: ``dockyard-test-gw0``, ...),
                       never ``make run``'s ``dockyard``; created if it does not
                       exist and deleted again at the end of the session if this session created it
                       (also after Ctrl-C; ``DOCKYARD_KEEP_CLUSTER=1`` keeps it), left as it was if not;
  ``kind``             a kind cluster ``dockyard-e2e`` with in-cluster kwok (needs Docker and kind;
                       not exercised in Dockyard's CI);
  ``existing``         the cluster ``KUBECONFIG`` names, used as it is (it must run kwok with
                       Dockyard's stages and GPU node pools, or have real GPU nodes).

An explicit choice is required to use ``KUBECONFIG``: a shell that happens to point at a
production cluster never receives test objects by accident.

While a ``local`` session runs, the ``DOCKYARD_*`` variables of the local control plane name the suite's
cluster (:meth:`LocalClusterSettings.as_env`): ``LocalCluster()`` in this process (the chaos suite's
control plane) and ``python -m dockyard_localcluster run`` in a child (``make run``'s own test) reach the
suite's cluster and its state dir, not the demo's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dockyard_localcluster.cluster import LocalCluster, Provisioner
from dockyard_localcluster.nodes import parse_pools
from dockyard_localcluster.settings import LocalClusterSettings, SuiteClusterSettings

KIND_NAME = "dockyard-e2e"
KWOK_RELEASE = "https://github.com/kubernetes-sigs/kwok/releases/download/v0.8.0"


@dataclass(frozen=True)
class E2ECluster:
    kubeconfig: Path
    kind: str
    kubectl: str


@contextmanager
def e2e_cluster() -> Iterator[E2ECluster]:
    mode = os.environ.get("DOCKYARD_E2E_CLUSTER", "local")
    if mode == "existing":
        path = os.environ.get("KUBECONFIG")
        if not path:
            raise RuntimeError("DOCKYARD_E2E_CLUSTER=existing needs KUBECONFIG")
        yield E2ECluster(Path(path), mode, shutil.which("kubectl") or "kubectl")
    elif mode == "kind":
        yield from _kind()
    elif mode == "local":
        yield from _local()
    else:
        raise RuntimeError(f"DOCKYARD_E2E_CLUSTER must be local, kind or existing, not {mode!r}")


def suite_settings() -> SuiteClusterSettings:
    """The suite's cluster settings; a pytest-xdist worker (``PYTEST_XDIST_WORKER``, e.g. ``gw1``) has a cluster
    of its own, ``dockyard-test-gw1`` in ``.dockyard/test/gw1``: workers never see one another's objects,
    operators or admission webhooks, and the chaos suite restarts only its worker's control plane.
    Refused if ``DOCKYARD_TEST_*`` and ``DOCKYARD_*`` name one cluster (worker or not)."""
    settings = SuiteClusterSettings()
    if settings.same_cluster(LocalClusterSettings()):
        raise RuntimeError(
            f"the test suite's cluster {settings.cluster_name!r} in {settings.kwok_workdir} is `make run`'s: "
            "set DOCKYARD_TEST_CLUSTER_NAME or DOCKYARD_TEST_STATE_DIR to another one"
        )
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        settings = settings.model_copy(
            update={"cluster_name": f"{settings.cluster_name}-{worker}", "state_dir": settings.state_dir / worker}
        )
    return settings


def suite_cluster() -> LocalCluster:
    """The suite's own local cluster (:func:`suite_settings`)."""
    return LocalCluster(suite_settings())


def _local() -> Iterator[E2ECluster]:
    cluster = suite_cluster()
    # Whether this session creates it (a file-system fact: kwokctl's work dir), not whether it answers
    # /readyz now: a cluster that exists is someone's, and a slow answer must not make it ours to delete.
    created_here = not cluster.exists()
    saved = {key: os.environ.get(key) for key in cluster.settings.as_env()}
    try:
        cluster.up()  # inside the try: a creation interrupted by Ctrl-C is deleted as well
        os.environ.update(cluster.settings.as_env())
        yield E2ECluster(cluster.settings.kubeconfig, "local", str(cluster.bin_dir / "kubectl"))
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if created_here and not os.environ.get("DOCKYARD_KEEP_CLUSTER"):
            cluster.down()


def _kind() -> Iterator[E2ECluster]:
    """kind + in-cluster kwok + Dockyard's stages and GPU node pools (needs Docker; not in our CI)."""
    tools = LocalCluster(suite_settings())  # the pinned kubectl and kwok's stock stage files
    settings = tools.settings
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    kubeconfig = settings.state_dir / "kind-kubeconfig"
    clusters = subprocess.run(["kind", "get", "clusters"], capture_output=True, text=True, check=True).stdout
    if KIND_NAME not in clusters.split():
        subprocess.run(
            ["kind", "create", "cluster", "--name", KIND_NAME, "--kubeconfig", str(kubeconfig), "--wait", "120s"],
            check=True,
        )
    else:
        subprocess.run(
            ["kind", "export", "kubeconfig", "--name", KIND_NAME, "--kubeconfig", str(kubeconfig)], check=True
        )
    provisioner = Provisioner(tools, kubeconfig)
    # kwok's release manifest: the Stage CRDs and the kwok controller, which manages only the nodes
    # annotated kwok.x-k8s.io/node=fake (ours), so kind's own node keeps running real pods.
    provisioner.kubectl("apply", "-f", f"{KWOK_RELEASE}/kwok.yaml")
    provisioner.apply_stages(tools.stage_dir)
    pools = parse_pools(settings.node_pools, settings.nodes_per_type)
    provisioner.ensure_nodes(pools, settings.cpu_nodes, settings.wait_seconds)
    yield E2ECluster(kubeconfig, "kind", str(tools.bin_dir / "kubectl"))
