"""Users of the e2e and browser suites: service accounts with the chart's user ClusterRoles (alice an
editor, vic a viewer, mallory nothing). A pytest plugin (fixtures ``user_roles``, ``users``, ``team``),
loaded by ``tests/conftest.py``."""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from dockyard_localcluster.cluster import LocalCluster
from tests.support.cluster import E2ECluster

ROOT = Path(__file__).resolve().parents[2]
USERS_NS = "dockyard-e2e-users"


@dataclass(frozen=True)
class Users:
    """Service accounts as users: alice is a Dockyard editor in each test namespace, vic a viewer,
    mallory has no Dockyard role at all."""

    tokens: dict[str, str]

    def name(self, who: str) -> str:
        return f"system:serviceaccount:{USERS_NS}:{who}"

    def headers(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}


def kubectl(cluster: E2ECluster, *args: str, input_: str | None = None, check: bool = True) -> str:
    env_args = ["--kubeconfig", str(cluster.kubeconfig)]
    done = subprocess.run([cluster.kubectl, *env_args, *args], input=input_, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def user_roles(cluster: E2ECluster) -> None:
    """The chart's user ClusterRoles, rendered with helm (one source of truth) and applied."""
    helm = str(LocalCluster().bin_dir / "helm")
    rendered = subprocess.run(
        [
            helm,
            "template",
            "dockyard",
            str(ROOT / "charts/dockyard"),
            "--show-only",
            "templates/user-clusterroles.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    kubectl(cluster, "apply", "-f", "-", input_=rendered)


@pytest.fixture(scope="module")
def users(cluster: E2ECluster, api: client.ApiClient, user_roles: None) -> Users:
    core = client.CoreV1Api(api)
    with contextlib.suppress(client.ApiException):  # exists from an earlier module run
        core.create_namespace({"metadata": {"name": USERS_NS}})
    tokens = {}
    for who in ("alice", "vic", "mallory"):
        with contextlib.suppress(client.ApiException):
            core.create_namespaced_service_account(USERS_NS, {"metadata": {"name": who}})
        tokens[who] = kubectl(cluster, "create", "token", who, "-n", USERS_NS, "--duration=2h").strip()
    return Users(tokens)


@pytest.fixture
def team(api: client.ApiClient, namespace: str, users: Users) -> Users:
    rbac = client.RbacAuthorizationV1Api(api)
    for who, role in (("alice", "dockyard-editor"), ("vic", "dockyard-viewer")):
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": f"{who}-{role}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": who, "namespace": USERS_NS}],
            },
        )
    return users
