"""The Helm chart on the real API server: every rendered object is accepted (server-side dry run), and
`helm install --wait` / `helm upgrade` / `helm uninstall` of a release work end to end.

kwok simulates the pods (images are never pulled); the real scheduler places them, and the chart's
pods land on the untainted general-purpose (CPU) nodes, never on the tainted GPU pools. The
operator does not really run, so its admission webhooks cannot answer. After an upgrade that points
them at 127.0.0.1 (webhook.url; the API server never sends a request off this machine), the API
server's failing calls show the configurations are wired, and what `failurePolicy` does while the
operator is down.

Guard for the rest of the suite: the release's webhooks only match its own namespace
(webhook.namespaceSelector), and a `finally` uninstalls the release and deletes what it left, so a
failed run never leaves a webhook that refuses other tests' Tool deletes.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import KINDS, VERSION
from dockyard_localcluster.nodes import POOL_LABEL
from tests.support.cluster import E2ECluster
from tests.support.helm import CHART, Helm, helm_binary
from tests.support.runners import free_port
from tests.support.waiting import wait_for

CRD_NAMES = {f"{kind.crd.plural}.{GROUP}" for kind in KINDS} | {"clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"}
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}  # cert-manager is not installed on the local control plane

# Namespaced kinds the chart creates (and helm's own release records are Secrets).
NAMESPACED = (
    "deployments,replicasets,pods,services,configmaps,secrets,serviceaccounts,persistentvolumeclaims,"
    "ingresses,networkpolicies"
)
CLUSTER_SCOPED = (
    "clusterroles,clusterrolebindings,validatingwebhookconfigurations,mutatingwebhookconfigurations,clusterkopfpeerings"
)


class Kubectl:
    def __init__(self, cluster: E2ECluster) -> None:
        self.base = [cluster.kubectl, "--kubeconfig", str(cluster.kubeconfig)]

    def __call__(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*self.base, *args], input=input, capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args[:3])} failed:\n{proc.stderr}")
        return proc

    def names(self, kinds: str, selector: str, namespace: str | None = None) -> list[str]:
        where = ["-n", namespace] if namespace else []
        out = self(*where, "get", kinds, "-l", selector, "-o", "name", "--ignore-not-found").stdout
        return sorted(out.split())


@pytest.fixture(scope="module")
def kubectl(cluster: E2ECluster) -> Kubectl:
    return Kubectl(cluster)


@pytest.fixture(scope="module")
def helm(cluster: E2ECluster) -> Helm:
    return Helm(helm_binary(), cluster.kubeconfig)


# --- every rendered object is accepted by the API server -------------------------------------------

DRY_RUN_CASES: dict[str, list[str]] = {
    "defaults": [],
    "ingress-networkpolicy": [
        "facade.ingress.enabled=true",
        "facade.ingress.className=nginx",
        "facade.ingress.tls[0].secretName=dockyard-tls",
        "facade.ingress.tls[0].hosts[0]=dockyard.example.com",
        "networkPolicy.enabled=true",
    ],
    "existing-claim-ignore-namespaces": [
        "modelStore.existingClaim=shared-models",
        "webhook.failurePolicy=Ignore",
        "operator.watchNamespaces={default}",
        "deviceCatalog[0].name=g5.xlarge,deviceCatalog[0].vcpu=4,deviceCatalog[0].memory_gib=16",
        "deviceCatalog[0].gpus=1,deviceCatalog[0].gpu_model=A10G,deviceCatalog[0].gpu_memory_gb=24",
    ],
    "cert-manager": ["webhook.certificate.source=certManager"],
}


@pytest.mark.parametrize("case", sorted(DRY_RUN_CASES))
def test_rendered_objects_are_accepted_by_the_api_server(
    helm: Helm, kubectl: Kubectl, namespace: str, case: str
) -> None:
    # The documented CRD upgrade step (docs/install.md), which also makes the kopf.dev kinds known.
    kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds"))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(CHART / "crds"))
    release = f"dry-{uuid.uuid4().hex[:6]}"
    values = [*DRY_RUN_CASES[case], f"operator.peering.name={release}"]
    rendered = helm.template(release=release, namespace=namespace, values=values, extra=["--include-crds"]).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "ValidatingWebhookConfiguration", "CustomResourceDefinition"} <= kinds
    accepted = [d for d in docs if d["kind"] not in CERT_MANAGER_KINDS]
    proc = kubectl("apply", "--dry-run=server", "-o", "name", "-f", "-", input=yaml.safe_dump_all(accepted))
    assert len(proc.stdout.split()) == len(accepted), proc.stdout
    if case == "cert-manager":
        assert kinds & CERT_MANAGER_KINDS == CERT_MANAGER_KINDS


# --- install, upgrade, uninstall -------------------------------------------------------------------


def tool(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tool",
        "metadata": {"name": f"{name}-1.0.0"},
        "spec": {"name": name, "version": "1.0.0", "description": "webhook probe", "endpoint": "https://example.com"},
    }


def delete_tool(api: client.ApiClient, namespace: str, name: str) -> None:
    client.CustomObjectsApi(api).delete_namespaced_custom_object(GROUP, VERSION, namespace, "tools", name)


@pytest.fixture
def release(api: client.ApiClient, helm: Helm, kubectl: Kubectl, namespace: str) -> Iterator[tuple[str, str, Path]]:
    """A release name, its namespace, and a PersistentVolume its model-store claim can bind to."""
    name = f"dy-e2e-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=f"{name}-models", labels={"dockyard.dev/e2e": "true"}),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "1Gi"},
                access_modes=["ReadWriteMany"],
                storage_class_name=f"{name}-models",
                persistent_volume_reclaim_policy="Retain",
                host_path=client.V1HostPathVolumeSource(path=f"/tmp/{name}-models"),
            ),
        )
    )
    try:
        yield name, namespace, CHART
    finally:
        helm.run("uninstall", name, "--namespace", namespace, "--wait", "--timeout", "120s", check=False)
        selector = f"app.kubernetes.io/instance={name}"
        # never leave a webhook configuration behind: it would refuse other tests' operations
        kubectl("delete", CLUSTER_SCOPED, "-l", selector, "--ignore-not-found", "--wait=false", check=False)
        core.delete_persistent_volume(f"{name}-models")


def deployment_ready(api: client.ApiClient, namespace: str, name: str, replicas: int) -> bool:
    status = client.AppsV1Api(api).read_namespaced_deployment_status(name, namespace).status
    return status.ready_replicas == replicas and status.available_replicas == replicas and status.replicas == replicas


def test_install_upgrade_uninstall(
    api: client.ApiClient, helm: Helm, kubectl: Kubectl, release: tuple[str, str, Path]
) -> None:
    name, ns, chart = release
    selector = f"app.kubernetes.io/instance={name}"
    apps, core, custom = client.AppsV1Api(api), client.CoreV1Api(api), client.CustomObjectsApi(api)
    admission = client.AdmissionregistrationV1Api(api)
    base = [
        f"operator.peering.name={name}",
        f"modelStore.storageClass={name}-models",
        "modelStore.size=1Gi",
        "webhook.timeoutSeconds=3",
        f"webhook.namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name={ns}",
    ]

    def sets(*values: str) -> list[str]:
        return [arg for value in (*base, *values) for arg in ("--set", value)]

    def tls() -> dict[str, str]:
        return dict(core.read_namespaced_secret(f"{name}-dockyard-webhook-tls", ns).data)

    def validating() -> Any:
        return admission.read_validating_webhook_configuration(f"{name}-dockyard-validate")

    # install: the defaults (webhooks behind the operator's Service) -----------------------------------
    helm.run("install", name, str(chart), "--namespace", ns, "--wait", "--timeout", "180s", *sets())
    assert deployment_ready(api, ns, f"{name}-dockyard-operator", 1)
    assert deployment_ready(api, ns, f"{name}-dockyard-api", 1)  # one: the default SQLite conversation store
    assert core.read_namespaced_persistent_volume_claim(f"{name}-dockyard-model-store", ns).status.phase == "Bound"
    pods = core.list_namespaced_pod(ns, label_selector=selector).items
    assert len(pods) == 2
    for pod in pods:  # on the general-purpose pool: the GPU pools are tainted and the chart tolerates nothing
        node = core.read_node(pod.spec.node_name)
        assert node.metadata.labels[POOL_LABEL] == "cpu", (pod.metadata.name, pod.spec.node_name)
        assert pod.status.phase == "Running"
    crds = {c.metadata.name for c in client.ApiextensionsV1Api(api).list_custom_resource_definition().items}
    assert crds >= CRD_NAMES
    custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", name)
    for role in ("viewer", "editor", "admin"):
        client.RbacAuthorizationV1Api(api).read_cluster_role(f"{name}-{role}")

    def aggregated_into_view() -> bool:
        view = client.RbacAuthorizationV1Api(api).read_cluster_role("view")
        return any("dockyard.dev" in (rule.api_groups or []) for rule in view.rules or [])

    wait_for(aggregated_into_view, timeout=30, what="the viewer role to be aggregated into `view`")
    notes = helm.run("get", "notes", name, "--namespace", ns).stdout
    assert f"kubectl -n {ns} port-forward svc/{name}-dockyard-api 8080:80" in notes
    assert "/api/v1/namespaces/$NS/environments/$ENV/apikeys" in notes
    assert f"--clusterrole={name}-editor" in notes
    installed_tls = tls()
    for hook in validating().webhooks:
        assert hook.client_config.service.name == f"{name}-dockyard-webhook"
        assert hook.client_config.ca_bundle == installed_tls["ca.crt"]  # both base64, as the API returns them

    # upgrade 1: changed values; the webhooks now point at 127.0.0.1, where no operator listens, so the
    # API server's calls fail on the loopback interface and failurePolicy Fail refuses a Tool delete
    operator_template = apps.read_namespaced_deployment(f"{name}-dockyard-operator", ns).spec.template
    url = f"https://127.0.0.1:{free_port()}"
    changed = [
        f"webhook.url={url}",
        "webhook.certificate.extraIPAddresses={127.0.0.1}",
        "facade.replicas=3",
        "networkPolicy.enabled=true",
        "facade.ingress.enabled=true",
        "runtimeCatalog.runtimes.vllm.image=vllm/vllm-openai:v0.11.1",
    ]
    helm.run("upgrade", name, str(chart), "--namespace", ns, "--wait", "--timeout", "180s", *sets(*changed))
    assert deployment_ready(api, ns, f"{name}-dockyard-api", 3)
    assert deployment_ready(api, ns, f"{name}-dockyard-operator", 1)
    rolled = apps.read_namespaced_deployment(f"{name}-dockyard-operator", ns).spec.template
    assert (
        rolled.metadata.annotations["checksum/catalogs"] != operator_template.metadata.annotations["checksum/catalogs"]
    )
    catalog = core.read_namespaced_config_map(f"{name}-dockyard-runtime-catalog", ns).data["runtimes.yaml"]
    assert yaml.safe_load(catalog)["runtimes"]["vllm"]["image"] == "vllm/vllm-openai:v0.11.1"
    assert kubectl.names("ingresses,networkpolicies", selector, ns) == sorted(
        [
            f"ingress.networking.k8s.io/{name}-dockyard-api",
            f"networkpolicy.networking.k8s.io/{name}-dockyard-api",
            f"networkpolicy.networking.k8s.io/{name}-dockyard-operator",
        ]
    )
    reissued = tls()  # the certificate must now also name 127.0.0.1: a new one was issued
    assert reissued["tls.crt"] != installed_tls["tls.crt"]
    for hook in validating().webhooks:
        assert hook.client_config.url == f"{url}/{hook.name.removesuffix('.dockyard.dev')}"
        assert hook.client_config.ca_bundle == reissued["ca.crt"]
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, "tools", tool("probe"))
    with pytest.raises(ApiException) as refused:
        delete_tool(api, ns, "probe-1.0.0")
    message = json.loads(refused.value.body)["message"]
    assert 'failed calling webhook "validate-tool.dockyard.dev"' in message, message
    assert f"{url}/validate-tool" in message, message
    custom.get_namespaced_custom_object(GROUP, VERSION, ns, "tools", "probe-1.0.0")  # still there

    # upgrade 2: failurePolicy Ignore; same names, so the certificate is reused (lookup) -----------------
    helm.run(
        "upgrade", name, str(chart), "--namespace", ns, "--wait", "--timeout", "180s",
        *sets(*changed, "webhook.failurePolicy=Ignore"),
    )  # fmt: skip
    assert tls() == reissued
    assert {hook.failure_policy for hook in validating().webhooks} == {"Ignore"}
    delete_tool(api, ns, "probe-1.0.0")  # the call still fails, and is now ignored
    history = json.loads(helm.run("history", name, "--namespace", ns, "-o", "json").stdout)
    assert [(h["revision"], h["status"]) for h in history] == [(1, "superseded"), (2, "superseded"), (3, "deployed")]

    # uninstall leaves nothing but the CRDs ------------------------------------------------------------
    helm.run("uninstall", name, "--namespace", ns, "--wait", "--timeout", "120s")
    wait_for(
        lambda: not kubectl.names(NAMESPACED, selector, ns),
        timeout=60,
        what=f"the objects of {name} to go (left: {kubectl.names(NAMESPACED, selector, ns)})",
    )
    assert kubectl.names(CLUSTER_SCOPED, selector) == []
    assert kubectl.names("secrets", f"owner=helm,name={name}", ns) == []  # helm's release records
    assert core.list_namespaced_persistent_volume_claim(ns).items == []
    crds = {c.metadata.name for c in client.ApiextensionsV1Api(api).list_custom_resource_definition().items}
    assert crds >= CRD_NAMES  # the CRD policy: helm never deletes the CRDs it installed from crds/
