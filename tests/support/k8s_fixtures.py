"""Fixtures for tests against a real Kubernetes API server (markers ``k8s`` and ``e2e``, ``browser`` or
``chaos``): the cluster, an API client, a fresh namespace per test, Dockyard's CRDs. A pytest plugin,
loaded by ``tests/conftest.py`` (``pytest_plugins``), so every suite gets the same ones."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.support.cluster import E2ECluster, e2e_cluster
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cluster() -> Iterator[E2ECluster]:
    """The cluster of DOCKYARD_E2E_CLUSTER (default: the local control plane, started on demand)."""
    with e2e_cluster() as target:
        previous = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = str(target.kubeconfig)  # for kopf and kubectl in this process
        try:
            yield target
        finally:
            if previous is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = previous


@pytest.fixture(scope="session")
def api(cluster: E2ECluster) -> Iterator[client.ApiClient]:
    api_client = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    yield api_client
    api_client.close()


@pytest.fixture
def namespace(api: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (owner-referenced children go with it)."""
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{base}-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={"dockyard.dev/e2e": "true"}))
    )
    yield name
    core.delete_namespace(name)
    # The namespace itself goes later; its pods go at once, which frees their GPUs for the next test.
    wait_for(lambda: not core.list_namespaced_pod(name).items, timeout=120, what=f"the pods of {name} to go")


@pytest.fixture(scope="session")
def crds(cluster: E2ECluster) -> None:
    """Dockyard's generated CRDs, installed (server-side apply) and Established."""
    kubectl = [cluster.kubectl, "--kubeconfig", str(cluster.kubeconfig)]
    subprocess.run([*kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds")], check=True)
    subprocess.run(
        [*kubectl, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(ROOT / "crds")],
        check=True,
        capture_output=True,
    )


LOCAL_WEBHOOK_CONFIGURATION = "dockyard.dev"
"""The admission webhook configurations a locally run operator registers (kopf's managed name, set by
dockyard_operator/handlers/lifecycle.py); the chart's have names of their own."""


@pytest.fixture(scope="module")
def no_webhook_of_an_earlier_file(cluster: E2ECluster, api: client.ApiClient) -> None:
    """No admission webhook left behind by an operator of an earlier test file on this worker's cluster (one
    that was SIGKILLed, as the chaos suite does, cannot remove its own): a file that runs no operator, or one
    that starts its operator later, would see every write refused by a webhook nobody serves. Each file's
    own operator registers its webhooks again when it starts. The local control plane only: a cluster
    given by KUBECONFIG is left as it is."""
    if cluster.kind != "local":
        return
    admission = client.AdmissionregistrationV1Api(api)
    for delete in (
        admission.delete_validating_webhook_configuration,
        admission.delete_mutating_webhook_configuration,
    ):
        try:
            delete(LOCAL_WEBHOOK_CONFIGURATION)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
