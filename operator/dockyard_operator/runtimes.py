"""The runtime catalog: which serving engine runs a model, and with which arguments.

``optimizationInfo.optimizationType`` picks a runtime (``vllm`` or ``ctranslate2``; an empty string
means the catalog's default), ``quantizationType`` becomes the engine's quantization setting, the
device's GPU count becomes the tensor-parallel size and ``maxBatchSize`` the engine's limit of
concurrent sequences. The Helm chart configures the catalog (images, ports, extra arguments); the
operator reads it from ``DOCKYARD_OPERATOR_RUNTIME_CATALOG`` (a YAML file) or uses the defaults here.

Pure: no I/O except :func:`load_catalog`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dockyard_api.devices import Device
from dockyard_api.resources.v1alpha1 import HyperParameters, ModelDeploymentSpec

Engine = Literal["vllm", "ctranslate2"]


class Runtime(BaseModel):
    """One serving runtime: an engine and the image that runs it."""

    model_config = ConfigDict(extra="forbid")

    engine: Engine
    image: str = Field(min_length=1)
    port: int = Field(default=8000, ge=1, le=65535)
    health_path: str = "/health"
    metrics_path: str = "/metrics"
    extra_args: list[str] = Field(default_factory=list)
    """Appended to the arguments Dockyard derives (e.g. ``--gpu-memory-utilization=0.92``)."""


class RuntimeCatalog(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default: str = "vllm"
    runtimes: dict[str, Runtime]

    @model_validator(mode="after")
    def _default_exists(self) -> RuntimeCatalog:
        if self.default not in self.runtimes:
            raise ValueError(f"default runtime {self.default!r} is not in the catalog")
        return self


DEFAULT_CATALOG = RuntimeCatalog(
    default="vllm",
    runtimes={
        "vllm": Runtime(engine="vllm", image="vllm/vllm-openai:v0.11.0"),
        # CTranslate2 is a library; the image must serve an OpenAI-compatible API on `port` and take the
        # arguments of ctranslate2_args() (see docs/runtimes.md).
        "ctranslate2": Runtime(engine="ctranslate2", image="ghcr.io/dockyard-dev/ctranslate2-server:4.6.0"),
    },
)


def load_catalog(path: str | None) -> RuntimeCatalog:
    if not path:
        return DEFAULT_CATALOG
    return RuntimeCatalog.model_validate(yaml.safe_load(Path(path).read_text()))


class InvalidRuntimeChoice(ValueError):
    """The spec asks for a combination no runtime can serve; the message says why."""


def select_runtime(spec: ModelDeploymentSpec, catalog: RuntimeCatalog) -> tuple[str, Runtime]:
    """The runtime for this spec. int8_float16 is a CTranslate2 compute type: with no explicit
    optimizationType it selects CTranslate2; with ``vllm`` it is refused."""
    info = spec.optimization_info
    wanted: str = info.optimization_type if info else ""
    quantization = info.quantization_type if info else ""
    if not wanted:
        wanted = "ctranslate2" if quantization == "int8_float16" else catalog.default
    if wanted not in catalog.runtimes:
        raise InvalidRuntimeChoice(f"optimizationType {wanted!r} has no runtime in the runtime catalog")
    runtime = catalog.runtimes[wanted]
    if quantization == "int8_float16" and runtime.engine != "ctranslate2":
        raise InvalidRuntimeChoice(
            "quantizationType int8_float16 is a CTranslate2 compute type; use optimizationType ctranslate2 "
            "(or leave it empty), or quantizationType no_quantization"
        )
    return wanted, runtime


def sampling_defaults(hp: HyperParameters | None) -> dict[str, object]:
    """hyperParameters as the served model's default sampling settings (OpenAI-style names).

    maxTokens 0 means "no default limit" (the engine's own), so it is left out.
    """
    if hp is None:
        return {}
    out: dict[str, object] = {"temperature": hp.temperature, "top_p": hp.top_p, "top_k": hp.top_k}
    if hp.max_tokens:
        out["max_tokens"] = hp.max_tokens
    if hp.stop_sequence:
        out["stop"] = list(hp.stop_sequence)
    return out


def vllm_args(
    spec: ModelDeploymentSpec, runtime: Runtime, device: Device, model: str, adapter: tuple[str, str] | None
) -> list[str]:
    # Clients call the model by spec.name: for an adapter that is the LoRA module, not the base model.
    served_name = f"{spec.name}-base" if adapter is not None else spec.name
    args = [
        f"--model={model}",
        f"--served-model-name={served_name}",
        f"--tensor-parallel-size={device.gpus}",
        f"--max-num-seqs={spec.scaling_parameters.max_batch_size}",
        "--host=0.0.0.0",
        f"--port={runtime.port}",
    ]
    sampling = sampling_defaults(spec.hyper_parameters)
    # vLLM takes the generation-config defaults it knows; stop sequences travel in the mounted
    # sampling.json (and the OpenAI-compatible request's `stop`).
    override = {("max_new_tokens" if k == "max_tokens" else k): v for k, v in sampling.items() if k != "stop"}
    if override:
        args.append(f"--override-generation-config={json.dumps(override, sort_keys=True)}")
    if adapter is not None:
        _, path = adapter
        args += ["--enable-lora", f"--lora-modules={spec.name}={path}"]
    return [*args, *runtime.extra_args]


def ctranslate2_args(
    spec: ModelDeploymentSpec, runtime: Runtime, device: Device, model: str, adapter: tuple[str, str] | None
) -> list[str]:
    info = spec.optimization_info
    quantization = info.quantization_type if info else ""
    compute_type = "int8_float16" if quantization == "int8_float16" else "default"
    args = [
        f"--model={model}",
        f"--served-model-name={spec.name}",
        "--device=cuda",
        f"--tensor-parallel={device.gpus}",
        f"--compute-type={compute_type}",
        f"--max-batch-size={spec.scaling_parameters.max_batch_size}",
        f"--port={runtime.port}",
        "--sampling-config=/etc/dockyard/sampling.json",
    ]
    if adapter is not None:
        raise InvalidRuntimeChoice("CTranslate2 cannot serve LoRA adapters; use optimizationType vllm")
    return [*args, *runtime.extra_args]


def engine_args(
    spec: ModelDeploymentSpec, runtime: Runtime, device: Device, model: str, adapter: tuple[str, str] | None = None
) -> list[str]:
    """The engine's command-line arguments. ``adapter`` is (served adapter name, adapter path)."""
    build = vllm_args if runtime.engine == "vllm" else ctranslate2_args
    return build(spec, runtime, device, model, adapter)
