"""The runtime catalog: which serving engine runs a model, and with which arguments.

``optimizationInfo.optimizationType`` picks a runtime (``vllm`` or ``ctranslate2``; an empty string
means the catalog's default, or for a GGUF model llama.cpp and for a CTranslate2 model CTranslate2:
the Model's format decides, see :mod:`dockyard_core.modelformats` and docs/runtimes.md),
``quantizationType`` becomes the engine's quantization setting, the
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

from dockyard_core.devices import Device
from dockyard_core.modelformats import Refusal, adapter_refusal, engine_for
from dockyard_core.resources.v1alpha1 import HyperParameters, ModelDeploymentSpec

EngineKind = Literal["vllm", "ctranslate2", "llama-cpp"]


class Runtime(BaseModel):
    """One serving runtime: an engine and the image that runs it."""

    model_config = ConfigDict(extra="forbid")

    engine: EngineKind
    image: str = Field(min_length=1)
    port: int = Field(default=8000, ge=1, le=65535)
    health_path: str = "/health"
    metrics_path: str = "/metrics"
    extra_args: list[str] = Field(default_factory=list)
    """Appended to the arguments Dockyard derives (e.g. ``--gpu-memory-utilization=0.92``)."""
    context_length: int = Field(default=4096, ge=256, le=1_048_576)
    """llama.cpp: context tokens per sequence (the server's --ctx-size is this times --parallel)."""
    max_parallel: int = Field(default=16, ge=1, le=256)
    """llama.cpp: most parallel sequences (slots), whatever maxBatchSize asks: each slot holds its own
    KV cache of context_length tokens."""


class RuntimeCatalog(BaseModel):
    model_config = ConfigDict(extra="forbid")

    default: str = "vllm"
    runtimes: dict[str, Runtime]

    @model_validator(mode="after")
    def _default_exists(self) -> RuntimeCatalog:
        if self.default not in self.runtimes:
            raise ValueError(f"default runtime {self.default!r} is not in the catalog")
        return self


CT2_SERVER_IMAGE = "ghcr.io/dockyard-dev/dockyard-ct2-server:0.1.0"
"""``docker build --target ct2-server -t <this> .`` (the tag is the project version)."""

DEFAULT_CATALOG = RuntimeCatalog(
    default="vllm",
    runtimes={
        "vllm": Runtime(engine="vllm", image="vllm/vllm-openai:v0.11.0"),
        # Dockyard's own CTranslate2 server (api/dockyard_ct2), built by the Dockerfile's ct2-server target;
        # it takes the arguments of ctranslate2_args() (docs/runtimes.md).
        "ctranslate2": Runtime(engine="ctranslate2", image=CT2_SERVER_IMAGE),
        # llama.cpp's own OpenAI-compatible server (llama-server) with CUDA, for GGUF models; on the local
        # control plane the engine runner starts llama-cpp-python's server instead (docs/runtimes.md).
        "llama-cpp": Runtime(engine="llama-cpp", image="ghcr.io/ggml-org/llama.cpp:server-cuda", port=8080),
    },
)


def load_catalog(path: str | None) -> RuntimeCatalog:
    if not path:
        return DEFAULT_CATALOG
    return RuntimeCatalog.model_validate(yaml.safe_load(Path(path).read_text()))


class InvalidRuntimeChoice(ValueError):
    """The spec asks for a combination no runtime can serve; the message says why."""


def select_runtime(
    spec: ModelDeploymentSpec,
    catalog: RuntimeCatalog,
    model_format: str | None = None,
    *,
    adapter: bool = False,
    adapter_format: str | None = None,
) -> tuple[str, Runtime]:
    """The runtime for this spec and the Model's format (``status.storage.format``; None: unknown).

    For an adapter (``adapter``), ``model_format`` is its base model's and ``adapter_format`` its own: a
    pair no engine serves is refused (:func:`dockyard_core.modelformats.adapter_refusal`, e.g. a PEFT
    safetensors adapter on a GGUF base, which needs converting to a GGUF LoRA first).

    A GGUF model is served by llama.cpp and a CTranslate2 model by CTranslate2 whatever the catalog's
    default; impossible pairs are refused (:func:`dockyard_core.modelformats.engine_for`).
    int8_float16 is a CTranslate2 compute type: with no explicit optimizationType it selects
    CTranslate2; with ``vllm`` it is refused."""
    info = spec.optimization_info
    quantization = info.quantization_type if info else ""
    if adapter and (why := adapter_refusal(model_format, adapter_format)):
        raise InvalidRuntimeChoice(f"baseModel: {why}")
    try:
        wanted: str = engine_for(model_format, info.optimization_type if info else "", quantization) or ""
    except Refusal as exc:
        raise InvalidRuntimeChoice(f"{exc.field}: {exc.message}") from exc
    if not wanted:
        wanted = "ctranslate2" if quantization == "int8_float16" else catalog.default
    if wanted not in catalog.runtimes:
        raise InvalidRuntimeChoice(f"optimizationType {wanted!r} has no runtime in the runtime catalog")
    runtime = catalog.runtimes[wanted]
    if runtime.engine == "llama-cpp" and model_format not in ("gguf", None):
        raise InvalidRuntimeChoice(f"runtime {wanted!r} (llama.cpp) serves GGUF models; this model is {model_format}")
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
    # vLLM takes the generation-config defaults it knows; it has no default stop sequences (a request's
    # own `stop` applies).
    override = {("max_new_tokens" if k == "max_tokens" else k): v for k, v in sampling.items() if k != "stop"}
    if override:
        args.append(f"--override-generation-config={json.dumps(override, sort_keys=True)}")
    if adapter is not None:
        _, path = adapter
        # vLLM reads NAME=PATH unless the item has a ',' or a second '=': then JSON (spec.name is any text)
        plain = "=" not in spec.name and "," not in spec.name and "," not in path and "=" not in path
        module = f"{spec.name}={path}" if plain else json.dumps({"name": spec.name, "path": path})
        args += ["--enable-lora", f"--lora-modules={module}"]
    return [*args, *runtime.extra_args]


def ctranslate2_args(
    spec: ModelDeploymentSpec, runtime: Runtime, device: Device, model: str, adapter: tuple[str, str] | None
) -> list[str]:
    """Flags of ``dockyard-ct2-server`` (api/dockyard_ct2/config.py). CTranslate2 has no tensor parallelism
    without MPI, so a device's GPUs each hold a replica of the model (``--device-count``) and batches are
    spread over them: the model must fit on one GPU."""
    info = spec.optimization_info
    quantization = info.quantization_type if info else ""
    compute_type = "int8_float16" if quantization == "int8_float16" else "default"
    args = [
        f"--model-dir={model}",
        f"--served-model-name={spec.name}",
        "--device=cuda",
        f"--device-count={device.gpus}",
        f"--compute-type={compute_type}",
        f"--max-batch-size={spec.scaling_parameters.max_batch_size}",
        "--host=0.0.0.0",
        f"--port={runtime.port}",
    ]
    if sampling := sampling_defaults(spec.hyper_parameters):  # the server's defaults, stop sequences included
        args.append(f"--sampling={json.dumps(sampling, sort_keys=True, separators=(',', ':'))}")
    if adapter is not None:
        raise InvalidRuntimeChoice("CTranslate2 cannot serve LoRA adapters; use optimizationType vllm")
    return [*args, *runtime.extra_args]


def llama_cpp_args(
    spec: ModelDeploymentSpec, runtime: Runtime, device: Device, model: str, adapter: tuple[str, str] | None
) -> list[str]:
    """llama-server's arguments: the model directory's GGUF file, maxBatchSize parallel slots (at most
    ``runtime.max_parallel``) of ``runtime.context_length`` tokens each, every layer on the GPUs (split
    across them), tool calls through the model's chat template (``--jinja``), and hyperParameters as
    the default sampling settings. An adapter (a GGUF LoRA file) is loaded with ``--lora`` and applied to
    every request (scale 1); the server's one model answers under the deployment's name."""
    parallel = min(spec.scaling_parameters.max_batch_size, runtime.max_parallel)
    # Each value is its own argument: llama-server's parser refuses the --flag=value form.
    args = [
        "--model", model,
        "--alias", spec.name,
        "--ctx-size", str(runtime.context_length * parallel),
        "--parallel", str(parallel),
        "--n-gpu-layers", "999",
        "--jinja",
        "--metrics",
        "--host", "0.0.0.0",
        "--port", str(runtime.port),
    ]  # fmt: skip
    if adapter is not None:
        args += ["--lora", adapter[1]]
    if device.gpus > 1:
        args += ["--split-mode", "layer"]
    hp = spec.hyper_parameters
    if hp is not None:
        args += ["--temp", str(hp.temperature), "--top-p", str(hp.top_p), "--top-k", str(hp.top_k)]
        if hp.max_tokens:
            args += ["--n-predict", str(hp.max_tokens)]
    return [*args, *runtime.extra_args]


def engine_args(
    spec: ModelDeploymentSpec, runtime: Runtime, device: Device, model: str, adapter: tuple[str, str] | None = None
) -> list[str]:
    """The engine's command-line arguments. ``adapter`` is (served adapter name, adapter path)."""
    builders = {"vllm": vllm_args, "ctranslate2": ctranslate2_args, "llama-cpp": llama_cpp_args}
    return builders[runtime.engine](spec, runtime, device, model, adapter)
