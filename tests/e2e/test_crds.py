"""The real API server enforces Dockyard's CRDs: every limit, enum, required field and CEL rule,
with a rejection that names the field; kubectl is useful (explain, get, short names, categories)."""

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

from dockyard_api.settings import ApiSettings
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION
from dockyard_core.resources.v1alpha1.modeldeployment import model_deployment_name
from tests.limits import ABSENT, LIMITS, Limit, deploy_request, http_field, manifest, valid_spec
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create as create_object
from tests.support.dockyard import get as get_object
from tests.support.public import PublicEnvironment, environment_with_key, ready_model_status
from tests.support.runners import RunningFacade, run_facade

ROOT = Path(__file__).resolve().parents[2]
CASES = [
    pytest.param(limit, value, accepted, id=f"{'ok' if accepted else 'bad'}:{limit.case_id(value)}")
    for limit in LIMITS
    for value, accepted in limit.cases()
]

pytestmark = pytest.mark.usefixtures("crds")


def create(api: client.ApiClient, namespace: str, plural: str, body: dict[str, Any], dry_run: bool = False) -> Any:
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, plural, body, dry_run="All" if dry_run else None
    )


def rejection(exc: ApiException) -> str:
    assert exc.status == 422, exc.body
    return str(json.loads(exc.body)["message"])


@pytest.mark.parametrize(("limit", "value", "accepted"), CASES)
def test_limits_table_on_the_real_api_server(
    api: client.ApiClient, namespace: str, limit: Limit, value: Any, accepted: bool
) -> None:
    body = manifest(limit.spec(value), name="limits", namespace=namespace)
    if accepted:
        created = create(api, namespace, "modeldeployments", body, dry_run=True)
        assert created["metadata"]["name"] == "limits"
        return
    with pytest.raises(ApiException) as err:
        create(api, namespace, "modeldeployments", body, dry_run=True)
    message = rejection(err.value)
    field = "spec." + ".".join(limit.path)
    if value is ABSENT:  # "spec.hyperParameters.topK: Required value"
        assert f"{field}: Required value" in message, message
    else:
        assert field in message, message


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, crds: None) -> Iterator[RunningFacade]:
    with run_facade(ApiSettings()) as running:
        yield running


@pytest.fixture(scope="module")
def limits_environment(api: client.ApiClient, crds: None) -> Iterator[PublicEnvironment]:
    """A namespace with an environment, its API key and the Model the table's spec names, ReadyToDeploy.

    No operator runs in this module: the Model's status is what the operator writes for a hub model.
    The Model declares no modelType, so that both modelType values are in the table's inside values.
    """
    name = f"t-public-limits-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    model = valid_spec()["modelRef"]
    create_object(api, name, "models", "Model", model, {"source": {"hub": {"id": "acme/limits"}}})
    ready_model_status(api, name, model)
    yield environment_with_key(api, name)
    core.delete_namespace(name)


@pytest.mark.parametrize(("limit", "value", "accepted"), CASES)
def test_limits_table_through_the_facade(
    api: client.ApiClient,
    facade: RunningFacade,
    limits_environment: PublicEnvironment,
    limit: Limit,
    value: Any,
    accepted: bool,
) -> None:
    """The same rows, sent as the public deploy call: inside values deploy (200) and reach the stored
    ModelDeployment unchanged; outside values are a 422 that names the field and create nothing."""
    env = limits_environment
    call = deploy_request(limit.spec(value))
    response = facade.client.post(call.path(env.base), params=call.params, json=call.body, headers=env.headers)
    if accepted:
        assert response.status_code == 200, response.text
        record = response.json()
        stored = get_object(api, env.namespace, "modeldeployments", call.body["name"])
        assert stored["metadata"]["labels"]["dockyard.dev/dock-status-id"] == record["dockStatusId"]
        node: Any = stored["spec"]
        for key in limit.path:
            node = node[key]
        assert node == value
        return
    if limit.path == ("modelRef",):  # no modelId: .../models//deploy is no route at all
        assert response.status_code == 404, response.text
        return
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    field = http_field(limit.path)  # or an item of it: body.hyperParameters.stopSequence.0
    assert any(f == field or f.startswith(f"{field}.") for f in (d["field"] for d in error["details"])), error
    assert field in error["message"], error


def test_every_example_is_accepted(cluster: E2ECluster, namespace: str) -> None:
    out = subprocess.run(
        [cluster.kubectl, "--kubeconfig", str(cluster.kubeconfig), "apply", "-n", namespace,
         "-f", str(ROOT / "docs" / "examples")],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    kinds = {doc["kind"] for path in (ROOT / "docs" / "examples").glob("*.yaml")
             for doc in yaml.safe_load_all(path.read_text()) if doc}  # fmt: skip
    assert kinds == {
        "Model", "ModelDeployment", "Tool", "ToolDeployment", "App", "AppVersion", "Environment", "KnowledgeBase"
    }  # fmt: skip
    assert out.count(" created") >= len(kinds)


def kubectl(cluster: E2ECluster, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cluster.kubectl, "--kubeconfig", str(cluster.kubeconfig), *args], capture_output=True, text=True
    )


def test_kubectl_get_dockyard_category_short_names_and_columns(cluster: E2ECluster, namespace: str) -> None:
    assert kubectl(cluster, "apply", "-n", namespace, "-f", str(ROOT / "docs" / "examples")).returncode == 0
    listing = kubectl(cluster, "get", "dockyard", "-n", namespace)
    assert listing.returncode == 0, listing.stderr
    for kind in ("model.", "modeldeployment.", "tool.", "tooldeployment.", "app.", "appversion.", "environment.",
                 "knowledgebase."):  # fmt: skip
        assert f"{kind}dockyard.dev/" in listing.stdout
    for short in ("mdl", "mdep", "tool", "tdep", "app", "appv", "env", "kb"):
        assert kubectl(cluster, "get", short, "-n", namespace).returncode == 0, short
    header = kubectl(cluster, "get", "mdep", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "MODEL", "DEVICE", "REPLICAS", "READY", "STATUS", "AGE"]
    env_header = kubectl(cluster, "get", "env", "-n", namespace).stdout.splitlines()[0].split()
    assert env_header[:3] == ["NAME", "APP", "VERSION"]
    assert "STATUS" in env_header


def test_kubectl_get_mdep_wide_shows_the_deploy_calls_name(
    api: client.ApiClient, cluster: E2ECluster, namespace: str
) -> None:
    """The object is named after the deploy call's name (docs/public-api.md); -o wide shows that name too."""
    object_name = model_deployment_name("Llama 3 8B")
    spec = {"modelRef": "llama", "modelType": "openSource", "name": "Llama 3 8B", "deviceType": "g5.xlarge"}
    create_object(api, namespace, "modeldeployments", "ModelDeployment", object_name, spec)
    lines = kubectl(cluster, "get", "mdep", "-n", namespace, "-o", "wide").stdout.splitlines()
    assert "DISPLAY-NAME" in lines[0].split()
    assert lines[1].startswith(object_name)
    assert "Llama 3 8B" in lines[1]


def test_kubectl_explain_prints_the_spec_descriptions(cluster: E2ECluster) -> None:
    out = kubectl(cluster, "explain", "modeldeployment.spec.scalingParameters.scaleDownDelay")
    assert out.returncode == 0, out.stderr
    assert "Milliseconds" in out.stdout
    spec = kubectl(cluster, "explain", "modeldeployment.spec").stdout
    for field in ("deviceType", "hyperParameters", "scalingParameters", "optimizationInfo", "modelRef"):
        assert field in spec


def test_scale_subresource_respects_the_schema(api: client.ApiClient, cluster: E2ECluster, namespace: str) -> None:
    body = manifest(LIMITS[0].spec(1.0), name="scaled", namespace=namespace)
    create(api, namespace, "modeldeployments", body)
    ok = kubectl(cluster, "scale", "-n", namespace, "mdep/scaled", "--replicas=3")
    assert ok.returncode == 0, ok.stderr
    stored = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "modeldeployments", "scaled"
    )
    assert stored["spec"]["replicas"] == 3
    too_many = kubectl(cluster, "scale", "-n", namespace, "mdep/scaled", "--replicas=51")
    assert too_many.returncode != 0
    assert "spec.replicas" in too_many.stderr


def test_immutable_fields_are_refused_on_update(api: client.ApiClient, namespace: str) -> None:
    objects = client.CustomObjectsApi(api)
    body = manifest(LIMITS[0].spec(1.0), name="immutable", namespace=namespace)
    create(api, namespace, "modeldeployments", body)
    with pytest.raises(ApiException) as err:
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "modeldeployments", "immutable", {"spec": {"modelRef": "another-model"}}
        )
    assert "spec.modelRef" in rejection(err.value)
    assert "immutable" in rejection(err.value)
    # everything else may change: a redeploy with other sampling settings is accepted
    objects.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "modeldeployments", "immutable", {"spec": {"deviceType": "g5.12xlarge"}}
    )


def test_tool_name_must_be_name_dash_version(api: client.ApiClient, namespace: str) -> None:
    tool = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tool",
        "metadata": {"name": "weather-9.9.9", "namespace": namespace},
        "spec": {"name": "weather", "version": "1.2.0", "endpoint": "https://weather.example.com/api"},
    }
    with pytest.raises(ApiException) as err:
        create(api, namespace, "tools", tool, dry_run=True)
    assert "<spec.name>-<spec.version>" in rejection(err.value)
    tool["metadata"]["name"] = "weather-1.2.0"
    create(api, namespace, "tools", tool, dry_run=True)


def test_appversion_version_is_major_minor_patch(api: client.ApiClient, namespace: str) -> None:
    base = yaml.safe_load((ROOT / "docs" / "examples" / "appversion.yaml").read_text())
    base["metadata"] = {"name": f"{base['spec']['appRef']}-1.2", "namespace": namespace}
    base["spec"]["version"] = "1.2"
    with pytest.raises(ApiException) as err:
        create(api, namespace, "appversions", base, dry_run=True)
    assert "spec.version" in rejection(err.value)
