"""Unit tests of the pure builders (operator/dockyard_operator/builders/: common.py, model.py, tool.py): no cluster."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest

from dockyard_core.devices import BUILT_IN as DEVICES
from dockyard_core.devices import DEVICE_TYPES, GPU_RESOURCE, INSTANCE_TYPE_LABEL
from dockyard_core.resources.v1alpha1 import (
    DOCK_STATUS_ID_LABEL,
    HyperParameters,
    Model,
    ModelDeployment,
    ObjectMeta,
    Tool,
    ToolDeployment,
)
from dockyard_operator.builders.common import TEMPLATE_HASH_ANNOTATION, child_name, endpoint_of, user_labels
from dockyard_operator.builders.model import (
    MODEL_STORE_MOUNT,
    Delivery,
    ModelNotDeployable,
    ModelWorkload,
    ServedModel,
    download_secret,
    download_secret_name,
    model_workload,
    pod_resources,
    resolve_served_model,
    weights_size_limit,
)
from dockyard_operator.builders.tool import ToolWorkload, tool_workload
from dockyard_operator.runtimes import DEFAULT_CATALOG, Runtime, sampling_defaults
from dockyard_operator.scheduling import parse_quantity
from dockyard_operator.workloads import WORKLOAD_SELECTOR, key_of
from tests.unit.k8s_shapes import HYPER_PARAMETERS, NAMESPACE, model_deployment

# Service names must be RFC 1035 labels (a letter first, no dots); Deployments accept DNS subdomains.
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DELIVERY = Delivery("http://dockyard-facade.dockyard-system.svc:8080", "ghcr.io/dockyard-dev/dockyard:0.1.0")
HUB_ID = "meta-llama/Llama-3.1-8B-Instruct"
HUB_SERVED = ServedModel(HUB_ID)
VLLM = DEFAULT_CATALOG.runtimes["vllm"]
CT2 = DEFAULT_CATALOG.runtimes["ctranslate2"]
PROGRESS_DEADLINE = 900


# --- inputs -----------------------------------------------------------------------------------------------


def model(
    name: str,
    *,
    hub: str | None = None,
    revision: str | None = None,
    storage: str | None = None,
    phase: str | None = "ReadyToDeploy",
    adapter: bool = False,
    base: str | None = None,
    size_bytes: int | None = None,
) -> Model:
    """A Model: from the hub when ``hub`` is given, else uploaded (stored at ``storage``, if any, of
    ``size_bytes``)."""
    source: dict[str, Any] = (
        {"hub": {"id": hub, **({"revision": revision} if revision else {})}}
        if hub
        else {
            "upload": {
                "fileContext": "model",
                "fileName": name,
                "fileExtension": "tar",
                "fileSize": 1,
                "totalChunks": 1,
            }
        }
    )
    spec: dict[str, Any] = {"source": source, "isAdapter": adapter, **({"baseModel": base} if base else {})}
    status: dict[str, Any] = {"phase": phase} if phase else {}
    if storage:
        status["storage"] = {"path": storage, **({"sizeBytes": size_bytes} if size_bytes is not None else {})}
    return Model.model_validate({"metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec, "status": status})


def build(
    mdep: ModelDeployment | None = None,
    served: ServedModel = HUB_SERVED,
    runtime: tuple[str, Runtime] = ("vllm", VLLM),
) -> ModelWorkload:
    return model_workload(
        mdep or model_deployment(), served, *runtime, progress_deadline_seconds=PROGRESS_DEADLINE, delivery=DELIVERY
    )


def pod_spec(workload: ModelWorkload | ToolWorkload) -> dict[str, Any]:
    spec: dict[str, Any] = workload.deployment["spec"]["template"]["spec"]
    return spec


def container(workload: ModelWorkload | ToolWorkload) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod_spec(workload)["containers"]
    assert len(containers) == 1
    return containers[0]


def pod_labels(workload: ModelWorkload | ToolWorkload) -> dict[str, str]:
    labels: dict[str, str] = workload.deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def arg(workload: ModelWorkload, name: str) -> str | None:
    """The value of ``--name``: ``--name=value`` (vLLM, CTranslate2) or ``--name value`` (llama-server)."""
    args = container(workload)["args"]
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    values += [args[i + 1] for i, a in enumerate(args[:-1]) if a == f"--{name}"]
    assert len(values) <= 1
    return values[0] if values else None


def tool(name: str = "weather", version: str = "1.2.0", port: int | None = None, endpoint: bool = False) -> Tool:
    spec: dict[str, Any] = {"name": name, "version": version}
    if endpoint:
        spec["endpoint"] = "https://crm.example.com/tools/lookup"
    else:
        spec["container"] = {"image": f"ghcr.io/acme/{name}-tool:{version}", **({"port": port} if port else {})}
    return Tool.model_validate({"metadata": {"name": f"{name}-{version}", "namespace": NAMESPACE}, "spec": spec})


def tool_deployment(name: str = "weather", replicas: int = 1, labels: dict[str, str] | None = None) -> ToolDeployment:
    return ToolDeployment(
        metadata=ObjectMeta(name=name, namespace=NAMESPACE, labels=labels),
        spec={"toolRef": "weather-1.2.0", "replicas": replicas},
    )


def build_tool(tdep: ToolDeployment | None = None, image_tool: Tool | None = None) -> ToolWorkload:
    return tool_workload(tdep or tool_deployment(), image_tool or tool(), progress_deadline_seconds=PROGRESS_DEADLINE)


# --- child_name ---------------------------------------------------------------------------------------------


def test_child_name_of_a_short_name_is_prefix_dash_name() -> None:
    assert child_name("model", "llama") == "model-llama"


def test_child_name_of_exactly_63_characters_is_kept() -> None:
    name = "a" * (63 - len("model-"))
    assert child_name("model", name) == f"model-{name}"


@pytest.mark.parametrize(
    "name",
    [
        "a" * 58,
        "b" * 100,
        "llama-3-8b-instruct-" * 12,  # 240 characters, hyphens everywhere (also at the cut)
        "x" * 47 + "-" * 5 + "y" * 10,  # a run of hyphens where the name is cut
        "m" * 253,
    ],
    ids=["58", "100", "240-hyphens", "hyphens-at-cut", "253"],
)
@pytest.mark.parametrize("prefix", ["model", "tool"])
def test_child_name_of_a_long_name_is_a_short_dns_label(prefix: str, name: str) -> None:
    short = child_name(prefix, name)
    assert len(short) <= 63
    assert DNS_1035_LABEL.match(short), short
    assert short.startswith(f"{prefix}-")
    assert child_name(prefix, name) == short  # deterministic


def test_long_names_with_a_common_prefix_get_distinct_child_names() -> None:
    first, second = "p" * 70 + "-one", "p" * 70 + "-two"
    assert child_name("model", first) != child_name("model", second)


# BUG (builders/common.py child_name): object names are DNS-1123 *subdomains* and may hold dots (every
# Tool is named <name>-<version>, e.g. weather-1.2.0, and a ToolDeployment is named after its tool as in
# docs/examples/tooldeployment.yaml; a Model like llama-3.1-8b is just as likely). child_name keeps the
# dots, so the Service "tool-weather-1.2.0" is rejected by the API server (Service names must be RFC 1035
# labels). Fix: replace every character outside [a-z0-9-] (dots) by '-' and append the hash whenever the
# name was changed, so distinct names stay distinct.
@pytest.mark.parametrize(("prefix", "name"), [("tool", "weather-1.2.0"), ("model", "llama-3.1-8b-instruct")])
def test_child_name_of_a_dotted_name_is_a_valid_service_name(prefix: str, name: str) -> None:
    assert DNS_1035_LABEL.match(child_name(prefix, name)), child_name(prefix, name)


# --- pod_resources ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device_type", DEVICE_TYPES)
def test_pod_resources_fit_the_devices_node(device_type: str) -> None:
    device = DEVICES[device_type]
    resources = pod_resources(device)
    requests, limits = resources["requests"], resources["limits"]
    cpu, memory = parse_quantity(requests["cpu"]), parse_quantity(requests["memory"])
    # Strictly below the node's capacity, with headroom for the system reserve: >= 500m CPU, >= 2 GiB.
    assert 0 < cpu <= device.vcpu - 0.5
    assert 0 < memory <= device.memory_gib * 2**30 - 2 * 2**30
    assert requests[GPU_RESOURCE] == limits[GPU_RESOURCE] == str(device.gpus)
    assert limits["memory"] == requests["memory"]
    assert "cpu" not in limits  # no CPU throttling of the engine


@pytest.mark.parametrize(
    ("device_type", "cpu", "memory"),
    [("g4dn.xlarge", "3500m", "13926Mi"), ("g5.48xlarge", "172800m", "668467Mi"), ("g6e.xlarge", "3500m", "27852Mi")],
)
def test_pod_resources_exact_figures(device_type: str, cpu: str, memory: str) -> None:
    requests = pod_resources(DEVICES[device_type])["requests"]
    assert (requests["cpu"], requests["memory"]) == (cpu, memory)


# --- user_labels --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "kept"),
    [
        ("team", True),
        ("cost-center", True),
        ("dockyard.dev/simulate", True),
        ("example.com/owner", True),
        ("app.kubernetes.io/name", False),
        ("app.kubernetes.io/managed-by", False),
        ("dockyard.dev/model-deployment", False),
        ("dockyard.dev/tool-deployment", False),
        (DOCK_STATUS_ID_LABEL, False),
    ],
)
def test_user_labels_drop_reserved_keys(key: str, kept: bool) -> None:
    assert (key in user_labels({key: "v", "keep": "me"})) is kept
    assert user_labels({key: "v", "keep": "me"})["keep"] == "me"


def test_user_labels_of_none_is_empty() -> None:
    assert user_labels(None) == {}


# --- resolve_served_model ------------------------------------------------------------------------------------


def test_hub_model_is_served_by_id_without_volumes() -> None:
    served = resolve_served_model("llama", model("llama", hub=HUB_ID), None)
    assert served == ServedModel(HUB_ID)


def test_hub_model_revision_becomes_an_argument() -> None:
    served = resolve_served_model("llama", model("llama", hub=HUB_ID, revision="v1.1"), None)
    assert served.model_arg == HUB_ID
    assert served.extra_args == ("--revision=v1.1",)


@pytest.mark.parametrize("path", ["team-a/support-llama-ft", "/team-a/support-llama-ft/"])
def test_upload_model_is_mounted_from_the_model_store(path: str) -> None:
    served = resolve_served_model("support", model("support", storage=path), None)
    assert served.model_arg == f"{MODEL_STORE_MOUNT}/team-a/support-llama-ft"
    assert served.mounts == (
        {
            "name": "model-store",
            "mountPath": f"{MODEL_STORE_MOUNT}/team-a/support-llama-ft",
            "subPath": "team-a/support-llama-ft",
            "readOnly": True,
        },
    )
    assert served.volumes == ({"name": "model-store", "emptyDir": {}},)  # filled by the storage initializer
    assert served.adapter is None
    assert served.extra_args == ()


def test_missing_model_is_not_found() -> None:
    with pytest.raises(ModelNotDeployable) as caught:
        resolve_served_model("ghost", None, None)
    assert caught.value.reason == "ModelNotFound"
    assert "ghost" in caught.value.message
    assert str(caught.value) == caught.value.message


@pytest.mark.parametrize(("phase", "shown"), [("Importing", "Importing"), ("Failed", "Failed"), (None, "not imported")])
def test_model_not_ready_to_deploy_is_refused(phase: str | None, shown: str) -> None:
    with pytest.raises(ModelNotDeployable) as caught:
        resolve_served_model("support", model("support", storage="s", phase=phase), None)
    assert caught.value.reason == "ModelNotReady"
    assert "support" in caught.value.message
    assert shown in caught.value.message
    assert "ReadyToDeploy" in caught.value.message


def test_a_hub_model_needs_no_import_but_a_failed_one_is_refused() -> None:
    # the operator marks hub models ReadyToDeploy; a deployment racing that mark is not refused
    served = resolve_served_model("llama", model("llama", hub="meta-llama/Llama-3.1-8B", phase=None), None)
    assert served.model_arg == "meta-llama/Llama-3.1-8B"
    with pytest.raises(ModelNotDeployable) as caught:
        resolve_served_model("llama", model("llama", hub="meta-llama/Llama-3.1-8B", phase="Failed"), None)
    assert caught.value.reason == "ModelNotReady"


def test_ready_upload_model_without_stored_weights_is_not_ready() -> None:
    with pytest.raises(ModelNotDeployable) as caught:
        resolve_served_model("support", model("support"), None)
    assert caught.value.reason == "ModelNotReady"
    assert "support" in caught.value.message


def test_adapter_is_served_on_its_base_with_lora() -> None:
    adapter = model("support-lora", storage="team-a/support-lora", adapter=True, base="llama")
    served = resolve_served_model("support-lora", adapter, model("llama", hub=HUB_ID, revision="main"))
    assert served.model_arg == HUB_ID
    assert served.extra_args == ("--revision=main",)
    assert served.adapter == ("support-lora", "/adapters/team-a/support-lora")
    assert served.mounts == (
        {
            "name": "model-store",
            "mountPath": "/adapters/team-a/support-lora",
            "subPath": "team-a/support-lora",
            "readOnly": True,
        },
    )
    assert served.volumes == ({"name": "model-store", "emptyDir": {}},)
    assert [(d.role, d.model) for d in served.downloads] == [("adapter", "support-lora")]


def test_adapter_and_base_both_uploaded_share_one_volume() -> None:
    adapter = model("lora", storage="a/lora", adapter=True, base="base")
    served = resolve_served_model("lora", adapter, model("base", storage="a/base"))
    assert served.model_arg == f"{MODEL_STORE_MOUNT}/a/base"
    assert [m["mountPath"] for m in served.mounts] == [f"{MODEL_STORE_MOUNT}/a/base", "/adapters/a/lora"]
    assert len(served.volumes) == 1


def test_adapter_without_base_model_is_refused() -> None:
    with pytest.raises(ModelNotDeployable) as caught:
        resolve_served_model("lora", model("lora", storage="a/lora", adapter=True), None)
    assert caught.value.reason == "AdapterWithoutBase"
    assert "lora" in caught.value.message


def test_adapter_whose_base_is_missing_is_refused() -> None:
    with pytest.raises(ModelNotDeployable) as caught:
        resolve_served_model("lora", model("lora", storage="a/lora", adapter=True, base="llama"), None)
    assert caught.value.reason == "ModelNotFound"
    assert "base Model llama" in caught.value.message


def test_adapter_whose_base_is_not_ready_is_refused() -> None:
    adapter = model("lora", storage="a/lora", adapter=True, base="llama")
    with pytest.raises(ModelNotDeployable) as caught:
        resolve_served_model("lora", adapter, model("llama", storage="a/llama", phase="Importing"))
    assert caught.value.reason == "ModelNotReady"
    assert "llama" in caught.value.message
    assert "Importing" in caught.value.message


def test_adapter_whose_base_is_itself_an_adapter_is_refused() -> None:
    adapter = model("lora", storage="a/lora", adapter=True, base="other")
    other = model("other", storage="a/other", adapter=True, base="llama")
    with pytest.raises(ModelNotDeployable) as caught:
        resolve_served_model("lora", adapter, other)
    assert caught.value.reason == "AdapterWithoutBase"
    assert "other" in caught.value.message
    assert "itself an adapter" in caught.value.message


# --- model_workload: scheduling ---------------------------------------------------------------------------------


@pytest.mark.parametrize("device_type", DEVICE_TYPES)
def test_model_pods_target_the_device_type_and_request_all_its_gpus(device_type: str) -> None:
    workload = build(model_deployment(deviceType=device_type))
    spec = pod_spec(workload)
    assert spec["nodeSelector"] == {INSTANCE_TYPE_LABEL: device_type}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    resources = container(workload)["resources"]
    gpus = str(DEVICES[device_type].gpus)
    assert resources["requests"][GPU_RESOURCE] == resources["limits"][GPU_RESOURCE] == gpus
    assert resources == pod_resources(DEVICES[device_type])
    assert arg(workload, "tensor-parallel-size") == gpus


@pytest.mark.parametrize(
    ("scaling", "replicas", "expected"),
    [
        ({}, None, 1),
        ({"minReplicas": 2, "maxReplicas": 5}, None, 2),
        ({"minReplicas": 1, "maxReplicas": 5}, 3, 3),
        ({"minReplicas": 1, "maxReplicas": 3}, 10, 3),
        ({"minReplicas": 3, "maxReplicas": 5}, 1, 3),
        ({"minReplicas": 2}, 7, 2),
    ],
)
def test_replicas_are_spec_replicas_clamped_to_the_scaling_bounds(
    scaling: dict[str, int], replicas: int | None, expected: int
) -> None:
    fields: dict[str, Any] = {"scalingParameters": scaling, **({"replicas": replicas} if replicas else {})}
    mdep = model_deployment(**fields)
    assert mdep.spec.desired_replicas() == expected
    assert build(mdep).deployment["spec"]["replicas"] == expected


def test_deployment_rolls_out_without_surge_within_the_progress_deadline() -> None:
    spec = build().deployment["spec"]
    assert spec["progressDeadlineSeconds"] == PROGRESS_DEADLINE
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


# --- model_workload: names and labels ---------------------------------------------------------------------------


def test_children_share_name_namespace_and_labels() -> None:
    workload = build(model_deployment("llama"))
    # apply order: the Deployment last (its applied-hash annotation vouches for the whole set)
    assert [o["kind"] for o in workload.objects()] == ["Service", "Deployment"]
    for obj in workload.objects():
        assert obj["metadata"]["name"] == child_name("model", "llama")
        assert obj["metadata"]["namespace"] == NAMESPACE
        assert obj["metadata"]["labels"] == workload.deployment["metadata"]["labels"]
    labels = workload.deployment["metadata"]["labels"]
    assert labels["dockyard.dev/model-deployment"] == "llama"
    assert labels["app.kubernetes.io/instance"] == "llama"
    assert labels["app.kubernetes.io/managed-by"] == "dockyard"
    assert labels["app.kubernetes.io/component"] == "model-server"


def test_selectors_select_the_pods() -> None:
    workload = build(model_deployment("llama"))
    selector = workload.deployment["spec"]["selector"]["matchLabels"]
    assert selector == {"dockyard.dev/model-deployment": "llama"}
    assert selector.items() <= pod_labels(workload).items()
    assert workload.service["spec"]["selector"] == selector
    assert pod_labels(workload)["dockyard.dev/runtime"] == "vllm"


def test_user_labels_propagate_to_pods_but_not_reserved_ones() -> None:
    labels = {
        "dockyard.dev/simulate": "crash-loop",
        "team": "search",
        DOCK_STATUS_ID_LABEL: "job-123",
        "app.kubernetes.io/name": "spoofed",
        "dockyard.dev/model-deployment": "someone-else",
    }
    pods = pod_labels(build(model_deployment("llama", labels=labels)))
    assert pods["dockyard.dev/simulate"] == "crash-loop"
    assert pods["team"] == "search"
    assert DOCK_STATUS_ID_LABEL not in pods
    assert pods["app.kubernetes.io/name"] == "dockyard-model"
    assert pods["dockyard.dev/model-deployment"] == "llama"


# --- model_workload: template hash -------------------------------------------------------------------------------


def test_template_hash_is_stable_and_annotated() -> None:
    workload = build()
    assert workload.template_hash == build().template_hash
    assert re.fullmatch(r"[0-9a-f]{16}", workload.template_hash)
    assert workload.deployment["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] == workload.template_hash
    template_annotations = workload.deployment["spec"]["template"]["metadata"]["annotations"]
    assert template_annotations[TEMPLATE_HASH_ANNOTATION] == workload.template_hash


@pytest.mark.parametrize(
    ("change", "changes_hash"),
    [
        pytest.param({"hyperParameters": {**HYPER_PARAMETERS, "temperature": 0.2}}, True, id="temperature"),
        # vLLM has no default stop sequences (a request's own apply): nothing of its pod changes
        pytest.param({"hyperParameters": {**HYPER_PARAMETERS, "stopSequence": ["END"]}}, False, id="stop-sequence"),
        pytest.param({"hyperParameters": None}, True, id="hyper-parameters-removed"),
        pytest.param({"scalingParameters": {"maxBatchSize": 32}}, True, id="max-batch-size"),
        pytest.param({"deviceType": "g5.48xlarge"}, True, id="device-type"),
        pytest.param({"name": "support-bot"}, True, id="served-name"),
        pytest.param({"replicas": 3, "scalingParameters": {"maxReplicas": 5}}, False, id="replicas"),
        pytest.param({"scalingParameters": {"minReplicas": 2, "maxReplicas": 4}}, False, id="replica-bounds"),
        pytest.param({"scalingParameters": {"scaleUpDelay": 10, "scaleDownDelay": 100}}, False, id="delays"),
        pytest.param({"isDeployedPreviously": True}, False, id="is-deployed-previously"),
    ],
)
def test_template_hash_changes_only_with_the_pod_template(change: dict[str, Any], changes_hash: bool) -> None:
    base = build(model_deployment(hyperParameters=HYPER_PARAMETERS))
    changed = build(model_deployment(**{"hyperParameters": HYPER_PARAMETERS, **change}))
    assert (changed.template_hash != base.template_hash) is changes_hash


def test_ctranslate2_template_hash_changes_with_the_stop_sequences() -> None:
    ct2 = ("ctranslate2", DEFAULT_CATALOG.runtimes["ctranslate2"])
    base = build(model_deployment(hyperParameters=HYPER_PARAMETERS), runtime=ct2)
    stops = build(model_deployment(hyperParameters={**HYPER_PARAMETERS, "stopSequence": ["END"]}), runtime=ct2)
    assert stops.template_hash != base.template_hash


def test_template_hash_ignores_a_new_dock_status_id() -> None:
    first = build(model_deployment(labels={DOCK_STATUS_ID_LABEL: "job-1"}))
    second = build(model_deployment(labels={DOCK_STATUS_ID_LABEL: "job-2"}))
    assert first.template_hash == second.template_hash


def test_template_hash_changes_with_the_runtime() -> None:
    assert build(runtime=("ctranslate2", CT2)).template_hash != build().template_hash


def test_building_twice_gives_identical_objects() -> None:
    mdep = model_deployment(labels={"team": "a"}, hyperParameters=HYPER_PARAMETERS, replicas=2)
    served = resolve_served_model("s", model("s", storage="a/s"), None)
    first, second = build(mdep, served), build(mdep, served)
    assert first == second
    assert json.dumps(first.objects(), sort_keys=True) == json.dumps(second.objects(), sort_keys=True)
    assert first.objects() is not second.objects()


def test_building_does_not_share_mutable_state_between_calls() -> None:
    first = build()
    first.deployment["spec"]["template"]["metadata"]["labels"]["mutated"] = "yes"
    first.deployment["metadata"]["labels"]["mutated"] = "yes"
    assert build() != first
    assert "mutated" not in pod_labels(build())


# --- model_workload: configuration, engine, volumes, Service --------------------------------------------------------


def test_no_config_map_the_engine_reads_its_settings_from_its_arguments() -> None:
    """Sampling defaults and the served name are arguments (runtimes.py): no ConfigMap to write per
    rollout, no volume, and a change of them is a change of the pod template (a new rollout)."""
    workload = build(model_deployment(name="support-bot", hyperParameters=HYPER_PARAMETERS))
    assert [o["kind"] for o in workload.objects()] == ["Service", "Deployment"]
    assert not [v for v in pod_spec(workload)["volumes"] if "configMap" in v]
    assert not [m for m in container(workload)["volumeMounts"] if m["mountPath"] == "/etc/dockyard"]
    assert arg(workload, "served-model-name") == "support-bot"
    assert build().template_hash != build(model_deployment(hyperParameters=HYPER_PARAMETERS)).template_hash


def test_ctranslate2_pods_carry_the_sampling_defaults_in_an_argument() -> None:
    mdep = model_deployment(hyperParameters=HYPER_PARAMETERS, optimizationInfo={"optimizationType": "ctranslate2"})
    workload = build(mdep, runtime=("ctranslate2", DEFAULT_CATALOG.runtimes["ctranslate2"]))
    value = arg(workload, "sampling")
    assert value is not None
    assert json.loads(value) == sampling_defaults(HyperParameters.model_validate(HYPER_PARAMETERS))


def test_engine_container_runs_the_runtime() -> None:
    workload = build(model_deployment(name="support-bot", scalingParameters={"maxBatchSize": 64}))
    engine = container(workload)
    assert engine["image"] == VLLM.image
    assert arg(workload, "model") == HUB_ID
    assert arg(workload, "served-model-name") == "support-bot"
    assert arg(workload, "max-num-seqs") == "64"
    assert engine["ports"] == [{"name": "http", "containerPort": VLLM.port, "protocol": "TCP"}]
    for probe in ("readinessProbe", "startupProbe", "livenessProbe"):
        assert engine[probe]["httpGet"] == {"path": VLLM.health_path, "port": "http"}


def test_ctranslate2_runtime_workload() -> None:
    mdep = model_deployment(optimizationInfo={"optimizationType": "", "quantizationType": "int8_float16"})
    workload = build(mdep, runtime=("ctranslate2", CT2))
    assert container(workload)["image"] == CT2.image
    assert arg(workload, "compute-type") == "int8_float16"
    assert pod_labels(workload)["dockyard.dev/runtime"] == "ctranslate2"


def test_served_model_extra_args_and_volumes_reach_the_pod() -> None:
    served = resolve_served_model("s", model("s", storage="team-a/s"), None)
    workload = build(served=served)
    assert arg(workload, "model") == f"{MODEL_STORE_MOUNT}/team-a/s"
    assert served.mounts[0] in container(workload)["volumeMounts"]
    assert served.volumes[0] in pod_spec(workload)["volumes"]
    revision = build(served=ServedModel(HUB_ID, extra_args=("--revision=v2",)))
    assert arg(revision, "revision") == "v2"


def test_adapter_workload_enables_lora_on_the_base() -> None:
    adapter = model("support-lora", storage="team-a/support-lora", adapter=True, base="llama")
    served = resolve_served_model("support-lora", adapter, model("llama", hub=HUB_ID))
    workload = build(served=served)
    assert arg(workload, "model") == HUB_ID
    assert "--enable-lora" in container(workload)["args"]
    assert (arg(workload, "lora-modules") or "").endswith("=/adapters/team-a/support-lora")


def test_volume_mounts_name_existing_volumes() -> None:
    served = resolve_served_model("s", model("s", storage="a/s"), None)
    workload = build(served=served)
    volumes = {v["name"] for v in pod_spec(workload)["volumes"]}
    assert {m["name"] for m in container(workload)["volumeMounts"]} <= volumes
    assert len(volumes) == len(pod_spec(workload)["volumes"])  # no duplicate volume names


@pytest.mark.parametrize("port", [8000, 9000])
def test_service_exposes_the_engine_port(port: int) -> None:
    workload = build(runtime=("vllm", VLLM.model_copy(update={"port": port})))
    assert workload.service["spec"]["ports"] == [
        {"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}
    ]
    assert container(workload)["ports"][0]["name"] == "http"
    assert endpoint_of(workload.service) == f"http://model-llama.{NAMESPACE}.svc:{port}"


# --- tool_workload ------------------------------------------------------------------------------------------------


def test_image_tool_runs_without_gpu_or_node_selector() -> None:
    workload = build_tool()
    spec = pod_spec(workload)
    assert "nodeSelector" not in spec
    assert "tolerations" not in spec
    engine = container(workload)
    assert engine["image"] == "ghcr.io/acme/weather-tool:1.2.0"
    assert GPU_RESOURCE not in engine["resources"].get("requests", {})
    assert GPU_RESOURCE not in engine["resources"].get("limits", {})
    assert engine["securityContext"]["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize(("port", "expected"), [(None, 8080), (9000, 9000)])
def test_tool_ports(port: int | None, expected: int) -> None:
    workload = build_tool(image_tool=tool(port=port))
    assert container(workload)["ports"] == [{"name": "http", "containerPort": expected, "protocol": "TCP"}]
    assert workload.service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]
    assert endpoint_of(workload.service) == f"http://tool-weather.{NAMESPACE}.svc"  # HTTP's port 80 left out


@pytest.mark.parametrize("replicas", [1, 3])
def test_tool_replicas_and_selectors(replicas: int) -> None:
    workload = build_tool(tool_deployment(replicas=replicas, labels={"team": "a", DOCK_STATUS_ID_LABEL: "j"}))
    assert workload.deployment["spec"]["replicas"] == replicas
    assert workload.deployment["spec"]["progressDeadlineSeconds"] == PROGRESS_DEADLINE
    selector = workload.deployment["spec"]["selector"]["matchLabels"]
    assert selector == {"dockyard.dev/tool-deployment": "weather"}
    assert selector.items() <= pod_labels(workload).items()
    assert workload.service["spec"]["selector"] == selector
    labels = pod_labels(workload)
    assert (labels["dockyard.dev/tool"], labels["team"], labels["app.kubernetes.io/component"]) == (
        "weather",
        "a",
        "tool",
    )
    assert DOCK_STATUS_ID_LABEL not in labels
    for obj in workload.objects():
        assert obj["metadata"]["name"] == "tool-weather"
        assert obj["metadata"]["namespace"] == NAMESPACE


def test_tool_template_hash_is_stable_and_ignores_replicas() -> None:
    workload = build_tool()
    assert workload.template_hash == build_tool().template_hash
    assert workload.template_hash == build_tool(tool_deployment(replicas=4)).template_hash
    assert workload.deployment["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] == workload.template_hash
    assert workload.deployment["spec"]["template"]["metadata"]["annotations"] == {
        TEMPLATE_HASH_ANNOTATION: workload.template_hash
    }
    assert build_tool(image_tool=tool(version="1.3.0")).template_hash != workload.template_hash
    assert build_tool() == build_tool()


def test_endpoint_tool_has_no_workload() -> None:
    with pytest.raises(AssertionError, match="only image tools"):
        build_tool(image_tool=tool("crm-lookup", "2.0.1", endpoint=True))


# BUG (same cause as test_child_name_of_a_dotted_name_is_a_valid_service_name): the ToolDeployment of
@pytest.mark.parametrize(
    ("size_bytes", "limit"),
    [
        (16 * 2**30, "18279Mi"),  # 16 GiB * 1.1 = 18022.4 MiB, + 256 MiB, rounded up
        (75 * 2**20, "339Mi"),  # 75 MiB * 1.1 + 256 MiB = 338.5 MiB, rounded up
        (1, "257Mi"),
    ],
)
def test_the_weights_volume_is_limited_to_the_models_size_with_headroom(size_bytes: int, limit: str) -> None:
    served = resolve_served_model("s", model("s", storage="models/team-a/s", size_bytes=size_bytes), None)
    assert served.volumes == ({"name": "model-store", "emptyDir": {"sizeLimit": limit}},)
    spec = pod_spec(build(model_deployment(), served))
    assert {"name": "model-store", "emptyDir": {"sizeLimit": limit}} in spec["volumes"]
    assert parse_quantity(limit) >= size_bytes * 1.1 + 256 * 2**20


def test_an_adapter_and_its_base_share_one_limit_for_both() -> None:
    adapter = model("lora", storage="a/lora", adapter=True, base="base", size_bytes=100 * 2**20)
    served = resolve_served_model("lora", adapter, model("base", storage="a/base", size_bytes=900 * 2**20))
    assert served.volumes == ({"name": "model-store", "emptyDir": {"sizeLimit": "1356Mi"}},)  # 1000 * 1.1 + 256
    assert weights_size_limit(served.downloads) == "1356Mi"


def test_the_limit_follows_the_stored_files_not_a_compressed_upload() -> None:
    gz = model("s", storage="models/team-a/s", size_bytes=600 * 2**20)
    assert gz.spec.source.upload is not None
    gz.spec.source.upload.file_extension = "tar.gz"
    # bytes received of a compressed archive say nothing about what it unpacks to: no limit
    assert resolve_served_model("s", gz, None).volumes == ({"name": "model-store", "emptyDir": {}},)
    # the import records the stored files' bytes (status.storage.filesBytes): that is what counts
    assert gz.status.storage is not None
    gz.status.storage.files_bytes = 1000 * 2**20
    assert resolve_served_model("s", gz, None).volumes == (
        {"name": "model-store", "emptyDir": {"sizeLimit": "1356Mi"}},
    )


def test_a_model_of_unknown_size_gets_no_limit() -> None:
    # an import older than status.storage.sizeBytes (or an empty record): no limit rather than a wrong one
    served = resolve_served_model("s", model("s", storage="models/team-a/s"), None)
    assert served.volumes == ({"name": "model-store", "emptyDir": {}},)
    assert weights_size_limit(()) is None


# docs/examples/tooldeployment.yaml, named after its Tool "weather-1.2.0", gets the Service name
# "tool-weather-1.2.0", which the API server refuses (a Service name must be an RFC 1035 label).
def test_tool_service_name_for_the_example_tool_deployment_is_valid() -> None:
    workload = build_tool(tool_deployment("weather-1.2.0"))
    assert DNS_1035_LABEL.match(workload.service["metadata"]["name"]), workload.service["metadata"]["name"]


# --- weight delivery: the storage initializer ---------------------------------------------------------------------


def test_uploaded_model_pod_has_a_storage_initializer_and_no_claim() -> None:
    served = resolve_served_model("s", model("s", storage="models/team-a/s"), None)
    mdep = model_deployment()
    workload = build(mdep, served)
    spec = pod_spec(workload)
    assert not [v for v in spec["volumes"] if "persistentVolumeClaim" in v]
    assert {"name": "model-store", "emptyDir": {}} in spec["volumes"]
    (init,) = spec["initContainers"]
    assert init["name"] == "storage-initializer"
    assert init["image"] == DELIVERY.image
    assert init["command"] == ["python", "-m", "dockyard_api.storage_initializer"]
    assert init["args"] == [
        f"--url={DELIVERY.url}",
        f"--namespace={NAMESPACE}",
        "--model=s",
        "--dest=/var/lib/dockyard/model/models/team-a/s",
    ]
    token = init["env"][0]
    assert token["name"] == "DOCKYARD_DOWNLOAD_TOKEN"
    assert token["valueFrom"]["secretKeyRef"] == {
        "name": download_secret_name(mdep.metadata.name or ""),
        "key": "model",
    }
    assert init["volumeMounts"] == [{"name": "model-store", "mountPath": "/var/lib/dockyard/model"}]
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    # the engine reads what the initializer wrote: the same volume, the model's sub path, read-only
    mount = next(m for m in container(workload)["volumeMounts"] if m["name"] == "model-store")
    assert mount == {"name": "model-store", "mountPath": "/models/models/team-a/s", "subPath": "models/team-a/s",
                     "readOnly": True}  # fmt: skip
    assert arg(workload, "model") == "/models/models/team-a/s"


def test_adapter_on_uploaded_base_has_two_initializers() -> None:
    adapter = model("lora", storage="models/a/lora", adapter=True, base="base")
    served = resolve_served_model("lora", adapter, model("base", storage="models/a/base"))
    inits = pod_spec(build(served=served))["initContainers"]
    assert [c["name"] for c in inits] == ["storage-initializer", "storage-initializer-adapter"]
    assert [c["env"][0]["valueFrom"]["secretKeyRef"]["key"] for c in inits] == ["model", "adapter"]


def test_hub_model_pod_has_no_initializer() -> None:
    assert "initContainers" not in pod_spec(build())


def test_upload_model_without_a_delivery_is_not_deployable() -> None:
    served = resolve_served_model("s", model("s", storage="models/a/s"), None)
    with pytest.raises(ModelNotDeployable) as caught:
        model_workload(model_deployment(), served, "vllm", VLLM, progress_deadline_seconds=PROGRESS_DEADLINE)
    assert caught.value.reason == "NoWeightDelivery"


def test_download_secret_holds_one_token_per_model() -> None:
    adapter = model("lora", storage="models/a/lora", adapter=True, base="base")
    served = resolve_served_model("lora", adapter, model("base", storage="models/a/base"))
    mdep = model_deployment()
    secret = download_secret(mdep, served, {"model": "t1", "adapter": "t2"}, "2026-11-24T00:00:00Z")
    assert secret["kind"] == "Secret"
    assert secret["metadata"]["name"] == download_secret_name(mdep.metadata.name or "")
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == {"model": "t1", "adapter": "t2"}
    assert secret["metadata"]["annotations"]["dockyard.dev/expires"] == "2026-11-24T00:00:00Z"


# --- GGUF models (llama.cpp) and local engines -------------------------------------------------------------

LLAMA = DEFAULT_CATALOG.runtimes["llama-cpp"]


def gguf_model(name: str = "tiny") -> Model:
    stored = model(name, storage=f"models/{NAMESPACE}/{name}")
    assert stored.status.storage is not None
    stored.status.storage.format = "gguf"
    stored.status.storage.file = "tiny.gguf"
    return stored


def test_a_gguf_model_records_its_format_and_file_for_the_runtime() -> None:
    served = resolve_served_model("tiny", gguf_model(), None)
    assert (served.model_format, served.weights_file) == ("gguf", "tiny.gguf")


def test_llama_cpp_loads_the_gguf_file_of_the_model_directory() -> None:
    served = resolve_served_model("tiny", gguf_model(), None)
    workload = build(model_deployment(name="tiny"), served=served, runtime=("llama-cpp", LLAMA))
    assert arg(workload, "model") == f"{MODEL_STORE_MOUNT}/models/{NAMESPACE}/tiny/tiny.gguf"
    assert arg(workload, "alias") == "tiny"
    assert container(workload)["image"] == LLAMA.image
    assert container(workload)["readinessProbe"]["httpGet"]["path"] == "/health"
    # other engines load the directory
    assert arg(build(served=served), "model") == f"{MODEL_STORE_MOUNT}/models/{NAMESPACE}/tiny"


def test_local_engine_pods_carry_the_label_and_the_readiness_gate() -> None:
    mdep = model_deployment(labels={"dockyard.dev/local-engine": "false"})  # a user's label cannot disable it
    local = model_workload(
        mdep, HUB_SERVED, "vllm", VLLM, progress_deadline_seconds=PROGRESS_DEADLINE, local_engine=True
    )
    assert pod_labels(local)["dockyard.dev/local-engine"] == "true"
    assert pod_spec(local)["readinessGates"] == [{"conditionType": "dockyard.dev/local-engine"}]
    plain = build(mdep)
    assert "dockyard.dev/local-engine" not in pod_labels(plain)
    assert "readinessGates" not in pod_spec(plain)


def test_every_workload_object_is_one_the_operator_watches_under_its_owner() -> None:
    """dockyard_operator.workloads lists and watches only what WORKLOAD_SELECTOR selects, and queues the
    owner of each change by key_of: a workload object outside either would never be seen."""
    managed_by, component = WORKLOAD_SELECTOR.split(",")
    label, _, value = managed_by.partition("=")
    for workload, kind, owner in ((build(model_deployment("llama")), "model-server", "llama"),
                                  (build_tool(), "tool", "weather")):  # fmt: skip
        for labels in (workload.deployment["metadata"]["labels"], pod_labels(workload)):
            assert labels[label] == value
            assert labels[component] == kind
        assert key_of(workload.deployment) == (NAMESPACE, kind, owner)
        assert key_of({"metadata": {"namespace": NAMESPACE, "labels": pod_labels(workload)}}) == (
            NAMESPACE,
            kind,
            owner,
        )
