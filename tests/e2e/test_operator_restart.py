"""Restart safety: the operator is SIGKILLed while many deployments are in flight; after a restart
every deployment converges, with exactly one of each child and no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from kubernetes import client

from dockyard_core.devices import DEVICE_TYPES
from dockyard_operator.builders.common import MODEL_DEPLOYMENT_LABEL
from tests.support.cluster import E2ECluster
from tests.support.dockyard import get, hub_model, job, model_deployment
from tests.support.runners import free_port, wait_http_ok
from tests.support.waiting import wait_for

PER_TYPE = 2  # the default pools have 2 nodes of each type; every replica takes a whole node


def start_operator(cluster: E2ECluster, log: Path) -> subprocess.Popen[bytes]:
    port = free_port()
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig), DOCKYARD_OPERATOR_HEALTH_PORT=str(port))
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dockyard_operator", "--standalone"], env=env, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
    wait_http_ok(f"http://127.0.0.1:{port}/readyz", timeout=60)
    return proc


def test_sigkill_mid_rollout_converges_without_duplicates_or_orphans(
    api: client.ApiClient, cluster: E2ECluster, crds: None, namespace: str, tmp_path: Path
) -> None:
    hub_model(api, namespace, "model")
    names = [f"m-{t.replace('.', '-')}-{i}" for t in DEVICE_TYPES for i in range(PER_TYPE)]
    first = start_operator(cluster, tmp_path / "operator.log")
    try:
        for name, device_type in zip(names, [t for t in DEVICE_TYPES for _ in range(PER_TYPE)], strict=True):
            model_deployment(api, namespace, name, device_type, model="model")
        # kill it mid-flight: as soon as the first job is recorded, while the others are being worked on
        wait_for(lambda: any(job(api, namespace, "modeldeployments", n) for n in names),
                 timeout=60, interval=0.02, what="a first deployment in flight")  # fmt: skip
        in_flight = [n for n in names if (j := job(api, namespace, "modeldeployments", n)) is None
                     or j["status"] == "IN_PROGRESS"]  # fmt: skip
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    assert in_flight, "the operator finished everything before it was killed; nothing was tested"

    second = start_operator(cluster, tmp_path / "operator.log")
    try:

        def converged() -> bool:
            jobs = [job(api, namespace, "modeldeployments", n) for n in names]
            return all(j is not None and j["status"] == "SUCCESS" for j in jobs)

        wait_for(converged, timeout=120, interval=1, what="every deployment SUCCESS after the restart")
    finally:
        second.terminate()
        second.wait(timeout=30)

    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    selector = MODEL_DEPLOYMENT_LABEL
    children = {
        "Deployment": apps.list_namespaced_deployment(namespace, label_selector=selector).items,
        "Service": core.list_namespaced_service(namespace, label_selector=selector).items,
    }
    # no ConfigMap per ModelDeployment: the engine's settings are its arguments
    assert not core.list_namespaced_config_map(namespace, label_selector=selector).items
    uids = {n: get(api, namespace, "modeldeployments", n)["metadata"]["uid"] for n in names}
    for kind, items in children.items():
        owners = Counter(i.metadata.labels[MODEL_DEPLOYMENT_LABEL] for i in items)
        assert owners == Counter(names), f"{kind}: one per ModelDeployment, got {owners}"
        for item in items:  # owned by the live ModelDeployment of that name: nothing orphaned
            [ref] = item.metadata.owner_references
            assert ref.uid == uids[item.metadata.labels[MODEL_DEPLOYMENT_LABEL]]
            assert ref.controller
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    assert Counter(p.metadata.labels[MODEL_DEPLOYMENT_LABEL] for p in pods) == Counter(names)
