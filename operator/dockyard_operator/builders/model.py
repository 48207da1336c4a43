"""The builders of a ModelDeployment's workload: the model it serves (its own weights, or an adapter on
its base), the storage initializers that fetch imported weights with the tokens of the download Secret,
and the engine's Deployment and Service."""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dockyard_core.devices import BUILT_IN, GPU_RESOURCE, GPU_TAINT_EFFECT, GPU_TAINT_KEY, INSTANCE_TYPE_LABEL, Device
from dockyard_core.resources.v1alpha1 import Model, ModelDeployment
from dockyard_operator.builders.common import (
    LOCAL_ENGINE_LABEL,
    MODEL_DEPLOYMENT_LABEL,
    child_name,
    common_labels,
    served_by,
    user_labels,
)
from dockyard_operator.runtimes import Runtime, engine_args

MODEL_STORE_MOUNT = "/models"
DOWNLOAD_MOUNT = "/var/lib/dockyard/model"
"""Where the storage initializer sees the pod's model volume (the engine mounts parts of it read-only)."""
DOWNLOAD_TOKEN_ENV = "DOCKYARD_DOWNLOAD_TOKEN"


class ModelNotDeployable(Exception):
    """The referenced Model cannot be served (yet); ``reason`` is CamelCase, the message explains."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def pod_resources(device: Device) -> dict[str, dict[str, str]]:
    """All GPUs of the device, and CPU/memory that fit its node with headroom for the system reserve
    (kubelet, daemonsets): 10% of the vCPUs (at least 500m) and 15% of the memory (at least 2 GiB)."""
    cpu_m = device.vcpu * 1000 - max(500, device.vcpu * 100)
    mem_mi = device.memory_gib * 1024 - max(2048, math.ceil(device.memory_gib * 1024 * 0.15))
    requests = {"cpu": f"{cpu_m}m", "memory": f"{mem_mi}Mi", GPU_RESOURCE: str(device.gpus)}
    limits = {"memory": f"{mem_mi}Mi", GPU_RESOURCE: str(device.gpus)}
    return {"requests": requests, "limits": limits}


@dataclass(frozen=True)
class Download:
    """One model the storage initializer fetches into the pod's model volume."""

    role: str
    """``model`` or ``adapter``: names the init container and the key of the download Secret."""
    namespace: str
    model: str
    sub_path: str
    """Directory in the model volume (the model's path in the store, e.g. models/<ns>/<id>)."""
    size_bytes: int


@dataclass(frozen=True)
class Delivery:
    """How model pods get imported weights: the facade URL the storage initializer downloads from, and
    the image that runs it (Dockyard's own)."""

    url: str
    image: str


@dataclass(frozen=True)
class ServedModel:
    """How the engine finds the weights: its ``--model`` argument, volumes, and an optional adapter."""

    model_arg: str
    extra_args: tuple[str, ...] = ()
    volumes: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()
    adapter: tuple[str, str] | None = None
    downloads: tuple[Download, ...] = ()
    model_format: str | None = None
    """The Model's ``status.storage.format`` (None for a hub model, or an import that predates it)."""
    weights_file: str | None = None
    """For GGUF: the file in the model's directory that llama.cpp loads."""
    adapter_format: str | None = None
    """For an adapter: its own ``status.storage.format`` (gguf for a llama.cpp LoRA)."""
    adapter_file: str | None = None
    """For a GGUF adapter: the file in the adapter's directory that llama.cpp loads with ``--lora``."""


UNCOMPRESSED_UPLOADS = frozenset({"tar", "gguf", "safetensors", "bin", "pt", "pth"})
"""Uploads whose stored files are no larger than the upload (tar, single weight files)."""


def _stored_bytes(model: Model) -> int:
    """Bytes of the model's stored files (0: unknown): ``status.storage.filesBytes``; for an import that
    predates it, ``sizeBytes`` (bytes received) when the upload was not compressed, since then the
    stored files are no larger than the upload."""
    storage = model.status.storage
    if storage is None:
        return 0
    if storage.files_bytes is not None:
        return storage.files_bytes
    upload = model.spec.source.upload
    extension = (upload.file_extension if upload is not None else "").lower()
    return storage.size_bytes or 0 if extension in UNCOMPRESSED_UPLOADS else 0


def _weights(model: Model, mount_at: str, role: str) -> tuple[str, list[str], list[dict[str, Any]], list[Download]]:
    name = model.metadata.name or ""
    source = model.spec.source
    if source.hub is not None:
        extra = [f"--revision={source.hub.revision}"] if source.hub.revision else []
        return source.hub.id, extra, [], []
    storage = model.status.storage
    if storage is None:
        raise ModelNotDeployable("ModelNotReady", f"Model {name} has no stored weights")
    sub_path = storage.path.strip("/")
    path = f"{mount_at}/{sub_path}"
    mount = {"name": "model-store", "mountPath": path, "subPath": sub_path, "readOnly": True}
    download = Download(role, model.metadata.namespace or "", name, sub_path, _stored_bytes(model))
    return path, [], [mount], [download]


def _ensure_ready(model: Model | None, name: str, role: str) -> Model:
    if model is None:
        raise ModelNotDeployable("ModelNotFound", f"{role} {name} does not exist in this namespace")
    hub_model = model.spec.source.hub is not None and model.status.phase != "Failed"
    if model.status.phase != "ReadyToDeploy" and not hub_model:  # a hub model needs no import
        phase = model.status.phase or "not imported yet"
        raise ModelNotDeployable(
            "ModelNotReady", f"{role} {name} is {phase}; only a ReadyToDeploy model can be deployed"
        )
    return model


WEIGHTS_HEADROOM_PERCENT = 10
WEIGHTS_HEADROOM_BYTES = 256 * 2**20


def weights_size_limit(downloads: Sequence[Download]) -> str | None:
    """The ``sizeLimit`` of the pod's weights emptyDir: the models' stored size plus 10 % and 256 MiB,
    rounded up to a whole MiB (``"1383Mi"``). The storage initializer writes each file once (into
    ``<file>.part``, renamed in place when its SHA-256 matches), so the files themselves never need more
    than their size; the headroom covers file-system blocks and metadata of many small files. A pod that
    writes beyond it is evicted by the kubelet instead of filling the node's disk. None (no limit) when a
    model's size is unknown (an import older than ``status.storage.sizeBytes``)."""
    if not downloads or any(d.size_bytes <= 0 for d in downloads):
        return None
    total = sum(d.size_bytes for d in downloads)
    limit = total + -(-total * WEIGHTS_HEADROOM_PERCENT // 100) + WEIGHTS_HEADROOM_BYTES  # integers: exact
    return f"{-(-limit // 2**20)}Mi"


def _weights_volume(downloads: Sequence[Download]) -> dict[str, Any]:
    limit = weights_size_limit(downloads)
    return {"name": "model-store", "emptyDir": {"sizeLimit": limit} if limit else {}}


def resolve_served_model(
    ref: str, model: Model | None, base: Model | None, *, base_error: str | None = None
) -> ServedModel:
    """What to serve for Model ``ref``: its own weights, or for an adapter its base model with LoRA.

    ``base``: the adapter's base Model (spec.baseModel's, or the one status.adapter.baseModelNameOrPath
    resolves to); ``base_error``: why none was resolved (:class:`dockyard_core.adapters.BaseNotResolved`).

    Imported weights reach the pod through an emptyDir that the storage initializer (an init container,
    see :func:`model_workload`) fills from the model store: no claim has to exist in the namespace, and
    any node can run the pod."""
    model = _ensure_ready(model, ref, "Model")
    storage = model.status.storage
    model_format, weights_file = (storage.format, storage.file) if storage is not None else (None, None)
    if not model.spec.is_adapter:
        arg, extra, mounts, downloads = _weights(model, MODEL_STORE_MOUNT, "model")
        return ServedModel(
            arg,
            tuple(extra),
            (_weights_volume(downloads),) if mounts else (),
            tuple(mounts),
            None,
            tuple(downloads),
            model_format=model_format,
            weights_file=weights_file,
        )
    base_name = model.spec.base_model or (base.metadata.name if base is not None else None)
    if not base_name:
        raise ModelNotDeployable("AdapterWithoutBase", adapter_without_base(ref, model, base_error))
    base = _ensure_ready(base, base_name, "base Model")
    if base.spec.is_adapter:
        raise ModelNotDeployable("AdapterWithoutBase", f"base Model {base_name} is itself an adapter")
    base_arg, extra, base_mounts, base_downloads = _weights(base, MODEL_STORE_MOUNT, "model")
    adapter_arg, _, adapter_mounts, adapter_downloads = _weights(model, "/adapters", "adapter")
    both = (*base_mounts, *adapter_mounts)
    base_storage = base.status.storage
    return ServedModel(
        base_arg,
        tuple(extra),
        (_weights_volume((*base_downloads, *adapter_downloads)),) if both else (),
        both,
        adapter=(ref, adapter_arg),
        downloads=(*base_downloads, *adapter_downloads),
        model_format=base_storage.format if base_storage is not None else None,
        weights_file=base_storage.file if base_storage is not None else None,
        adapter_format=model_format,
        adapter_file=weights_file,
    )


def adapter_without_base(ref: str, model: Model, base_error: str | None) -> str:
    """The message of AdapterWithoutBase: what adapter_config.json named, and what to do."""
    fix = (
        f"deploy with baseModel (public API body, dockyard deploy model --base-model, the console), or set it "
        f'once: kubectl patch models.dockyard.dev {ref} --type=merge -p \'{{"spec":{{"baseModel":"<Model>"}}}}\''
    )
    named = model.status.adapter.base_model_name_or_path if model.status.adapter is not None else None
    if not named:
        return f"adapter Model {ref} names no spec.baseModel and its adapter_config.json names no base model: {fix}"
    why = base_error or f"adapter_config.json names base model {named!r}, which matches no Model of this namespace"
    return f"adapter Model {ref} names no spec.baseModel; {why}. {fix}"


def download_secret_name(mdep_name: str) -> str:
    return child_name("model-download", mdep_name)


def storage_initializers(served: ServedModel, delivery: Delivery, secret_name: str) -> list[dict[str, Any]]:
    """One init container per model to fetch (the KServe storage-initializer pattern), running Dockyard's
    own image: it downloads the model's files from the facade with the token of the download Secret,
    resuming with Range requests and verifying each file's SHA-256 against the store's manifest."""
    containers = []
    for download in served.downloads:
        suffix = "" if download.role == "model" else f"-{download.role}"
        containers.append(
            {
                "name": f"storage-initializer{suffix}",
                "image": delivery.image,
                "command": ["python", "-m", "dockyard_api.storage_initializer"],
                "args": [
                    f"--url={delivery.url}",
                    f"--namespace={download.namespace}",
                    f"--model={download.model}",
                    f"--dest={DOWNLOAD_MOUNT}/{download.sub_path}",
                ],
                "env": [
                    {
                        "name": DOWNLOAD_TOKEN_ENV,
                        "valueFrom": {"secretKeyRef": {"name": secret_name, "key": download.role}},
                    }
                ],
                "resources": {"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
                # its last log line (the reason of a failure) becomes the termination message the job shows
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "model-store", "mountPath": DOWNLOAD_MOUNT}],
            }
        )
    return containers


def download_secret(mdep: ModelDeployment, served: ServedModel, tokens: dict[str, str], expires: str) -> dict[str, Any]:
    """The Secret holding the download tokens of a ModelDeployment's models (key = download role)."""
    name = mdep.metadata.name or ""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": download_secret_name(name),
            "namespace": mdep.metadata.namespace,
            "labels": {**common_labels(name, "model-server"), **selector_labels(name)},
            "annotations": {"dockyard.dev/expires": expires},
        },
        "type": "Opaque",
        # data, not stringData: stringData is write-only, which server-side apply cannot compare
        "data": {d.role: base64.b64encode(tokens[d.role].encode()).decode() for d in served.downloads},
    }


@dataclass(frozen=True)
class ModelWorkload:
    """Everything that serves one ModelDeployment."""

    deployment: dict[str, Any]
    service: dict[str, Any]
    template_hash: str
    served: ServedModel | None = None

    def objects(self) -> list[dict[str, Any]]:
        """In apply order: the Deployment last, so its applied-hash annotation vouches for the set.

        No ConfigMap: every setting the engine reads (served name, sampling defaults) is one of its
        arguments, so a rollout is two objects to write, and a settings change is a template change."""
        return [self.service, self.deployment]


def selector_labels(mdep_name: str) -> dict[str, str]:
    return {MODEL_DEPLOYMENT_LABEL: mdep_name}


def model_workload(
    mdep: ModelDeployment,
    served: ServedModel,
    runtime_name: str,
    runtime: Runtime,
    *,
    progress_deadline_seconds: int,
    delivery: Delivery | None = None,
    local_engine: bool = False,
    devices: Mapping[str, Device] = BUILT_IN,
) -> ModelWorkload:
    """``local_engine``: the local control plane's engine runner serves the pods (label and readiness
    gate ``dockyard.dev/local-engine``: a pod is Ready only once its engine answers on the host).
    ``devices``: the device catalog (the operator's, from its settings; unit tests use the built-in one)."""
    name = mdep.metadata.name or ""
    namespace = mdep.metadata.namespace
    spec = mdep.spec
    device = devices[spec.device_type]
    resource_name = child_name("model", name)
    labels = {**common_labels(name, "model-server"), **selector_labels(name)}
    pod_labels = {**user_labels(mdep.metadata.labels), **labels, "dockyard.dev/runtime": runtime_name}
    if local_engine:
        pod_labels[LOCAL_ENGINE_LABEL] = "true"
    model_arg, adapter = served.model_arg, served.adapter
    if runtime.engine == "llama-cpp":  # llama.cpp loads files, not directories
        if served.weights_file:
            model_arg = f"{model_arg}/{served.weights_file}"
        if adapter is not None and served.adapter_file:
            adapter = (adapter[0], f"{adapter[1]}/{served.adapter_file}")
    args = [*engine_args(spec, runtime, device, model_arg, adapter), *served.extra_args]
    container = {
        "name": "engine",
        "image": runtime.image,
        "args": args,
        "ports": [{"name": "http", "containerPort": runtime.port, "protocol": "TCP"}],
        "env": [{"name": "HF_HOME", "value": "/cache/huggingface"}],
        "resources": pod_resources(device),
        "readinessProbe": {
            "httpGet": {"path": runtime.health_path, "port": "http"},
            "periodSeconds": 5,
            "failureThreshold": 3,
        },
        "startupProbe": {
            "httpGet": {"path": runtime.health_path, "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 90,  # large models take minutes to load
        },
        "livenessProbe": {"httpGet": {"path": runtime.health_path, "port": "http"}, "periodSeconds": 15},
        "volumeMounts": [
            {"name": "shm", "mountPath": "/dev/shm"},
            {"name": "cache", "mountPath": "/cache"},
            *served.mounts,
        ],
    }
    template: dict[str, Any] = {
        "metadata": {"labels": pod_labels, "annotations": {}},
        "spec": {
            "nodeSelector": {INSTANCE_TYPE_LABEL: spec.device_type},
            "tolerations": [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": GPU_TAINT_EFFECT}],
            "containers": [container],
            "volumes": [
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
                {"name": "cache", "emptyDir": {}},
                *served.volumes,
            ],
            "terminationGracePeriodSeconds": 60,
        },
    }
    if served.downloads:
        if delivery is None:
            raise ModelNotDeployable("NoWeightDelivery", "the operator has no download URL for imported weights")
        template["spec"]["initContainers"] = storage_initializers(served, delivery, download_secret_name(name))
    if local_engine:
        template["spec"]["readinessGates"] = [{"conditionType": LOCAL_ENGINE_LABEL}]
    deployment, service, template_hash = served_by(
        resource_name,
        namespace,
        labels,
        selector_labels(name),
        template,
        replicas=spec.desired_replicas(),
        service_port=runtime.port,
        progress_deadline_seconds=progress_deadline_seconds,
        # No surge: a GPU node rarely has room for an extra replica; one replica at a time is replaced.
        strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
    )
    return ModelWorkload(deployment, service, template_hash=template_hash, served=served)
