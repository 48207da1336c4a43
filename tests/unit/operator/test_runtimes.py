"""Unit tests of the runtime catalog (operator/dockyard_operator/runtimes.py): no cluster, pure functions."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import dockyard_ct2.config as ct2_config
from dockyard_core.devices import BUILT_IN as DEVICES
from dockyard_core.devices import DEVICE_TYPES
from dockyard_core.resources.v1alpha1 import HyperParameters
from dockyard_operator.runtimes import (
    DEFAULT_CATALOG,
    InvalidRuntimeChoice,
    Runtime,
    RuntimeCatalog,
    engine_args,
    load_catalog,
    sampling_defaults,
    select_runtime,
)
from tests.unit.k8s_shapes import HYPER_PARAMETERS, mdep_spec

ROOT = Path(__file__).resolve().parents[3]
VLLM = DEFAULT_CATALOG.runtimes["vllm"]
CT2 = DEFAULT_CATALOG.runtimes["ctranslate2"]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"

# The GPU count of each device type (DESIGN.md "GPU scheduling"), retyped so a catalog change shows here.
GPUS = {
    "g4dn.xlarge": 1,
    "g5.xlarge": 1,
    "g5.2xlarge": 1,
    "g6e.xlarge": 1,
    "g4dn.12xlarge": 4,
    "g5.12xlarge": 4,
    "g5.48xlarge": 8,
    "g4dn.metal": 8,
}


def optimization(kind: str, quantization: str = "") -> dict[str, Any]:
    return {"optimizationInfo": {"optimizationType": kind, "quantizationType": quantization}}


def flag(args: list[str], name: str) -> str | None:
    """The value of ``--name=value`` in ``args``, or None when absent (it must not repeat)."""
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")]
    assert len(values) <= 1, f"--{name} given {len(values)} times: {args}"
    return values[0] if values else None


def args_for(
    runtime: Runtime, device_type: str = "g5.xlarge", adapter: tuple[str, str] | None = None, **spec: Any
) -> list[str]:
    return engine_args(mdep_spec(deviceType=device_type, **spec), runtime, DEVICES[device_type], MODEL, adapter)


# --- select_runtime -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        pytest.param({}, "vllm", id="no-optimizationInfo"),
        pytest.param(optimization(""), "vllm", id="empty-type"),
        pytest.param(optimization("", "no_quantization"), "vllm", id="empty-type-no-quantization"),
        pytest.param(optimization("vllm"), "vllm", id="explicit-vllm"),
        pytest.param(optimization("vllm", "no_quantization"), "vllm", id="vllm-no-quantization"),
        pytest.param(optimization("ctranslate2"), "ctranslate2", id="explicit-ctranslate2"),
        pytest.param(optimization("", "int8_float16"), "ctranslate2", id="int8-auto-selects-ctranslate2"),
        pytest.param(optimization("ctranslate2", "int8_float16"), "ctranslate2", id="ctranslate2-int8"),
    ],
)
def test_select_runtime(fields: dict[str, Any], expected: str) -> None:
    name, runtime = select_runtime(mdep_spec(**fields), DEFAULT_CATALOG)
    assert name == expected
    assert runtime == DEFAULT_CATALOG.runtimes[expected]
    assert runtime.engine == expected


def test_empty_optimization_type_uses_the_catalogs_default() -> None:
    catalog = DEFAULT_CATALOG.model_copy(update={"default": "ctranslate2"})
    assert select_runtime(mdep_spec(**optimization("")), catalog)[0] == "ctranslate2"
    assert select_runtime(mdep_spec(), catalog)[0] == "ctranslate2"
    assert select_runtime(mdep_spec(**optimization("vllm")), catalog)[0] == "vllm"


def test_vllm_with_int8_float16_is_refused_with_a_clear_message() -> None:
    with pytest.raises(InvalidRuntimeChoice) as caught:
        select_runtime(mdep_spec(**optimization("vllm", "int8_float16")), DEFAULT_CATALOG)
    message = str(caught.value)
    assert "int8_float16" in message
    assert "CTranslate2" in message
    assert "optimizationType ctranslate2" in message
    assert "no_quantization" in message


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param(optimization("ctranslate2"), id="explicit"),
        pytest.param(optimization("", "int8_float16"), id="implied-by-int8"),
    ],
)
def test_runtime_missing_from_the_catalog_is_refused(fields: dict[str, Any]) -> None:
    catalog = RuntimeCatalog(default="vllm", runtimes={"vllm": VLLM})
    with pytest.raises(InvalidRuntimeChoice, match=r"optimizationType 'ctranslate2' has no runtime in the runtime"):
        select_runtime(mdep_spec(**fields), catalog)


def test_unknown_optimization_type_is_rejected_by_the_schema() -> None:
    with pytest.raises(ValidationError, match="optimizationType"):
        mdep_spec(**optimization("tensorrt"))


# --- engine_args: shared by both engines --------------------------------------------------------------


def test_device_gpu_table_matches_the_catalog() -> None:
    assert {name: d.gpus for name, d in DEVICES.items()} == GPUS
    assert set(DEVICE_TYPES) == set(GPUS)


@pytest.mark.parametrize("device_type", DEVICE_TYPES)
def test_vllm_tensor_parallel_size_is_the_devices_gpu_count(device_type: str) -> None:
    assert flag(args_for(VLLM, device_type), "tensor-parallel-size") == str(GPUS[device_type])


@pytest.mark.parametrize("device_type", DEVICE_TYPES)
def test_ctranslate2_device_count_is_the_devices_gpu_count(device_type: str) -> None:
    assert flag(args_for(CT2, device_type), "device-count") == str(GPUS[device_type])


@pytest.mark.parametrize(("runtime", "model_flag"), [(VLLM, "model"), (CT2, "model-dir")], ids=["vllm", "ctranslate2"])
def test_model_served_name_and_port(runtime: Runtime, model_flag: str) -> None:
    custom = runtime.model_copy(update={"port": 9000})
    args = args_for(custom, name="support-bot")
    assert flag(args, model_flag) == MODEL
    assert flag(args, "served-model-name") == "support-bot"
    assert flag(args, "port") == "9000"
    assert flag(args, "host") == "0.0.0.0"


def test_default_ctranslate2_image_is_the_one_the_project_builds() -> None:
    """The Dockerfile's ct2-server target, tagged with the project version (as the chart's own image)."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert CT2.image == f"ghcr.io/dockyard-dev/dockyard-ct2-server:{version}"
    assert "AS ct2-server" in (ROOT / "Dockerfile").read_text()


@pytest.mark.parametrize("device_type", ["g5.xlarge", "g5.48xlarge"])
@pytest.mark.parametrize("quantization", ["int8_float16", "no_quantization", ""])
def test_ctranslate2_args_are_what_the_server_accepts(device_type: str, quantization: str) -> None:
    """The operator's arguments parse with dockyard-ct2-server's own parser (api/dockyard_ct2/config.py)."""
    args = args_for(
        CT2, device_type, hyperParameters=HYPER_PARAMETERS, scalingParameters={"maxBatchSize": 32},
        **optimization("ctranslate2", quantization),
    )  # fmt: skip
    parsed = ct2_config.build_parser().parse_args(args)
    assert str(parsed.model_dir) == MODEL
    assert parsed.device == "cuda"
    assert parsed.device_count == GPUS[device_type]
    assert parsed.compute_type == ("int8_float16" if quantization == "int8_float16" else "default")
    assert parsed.max_batch_size == 32
    assert (parsed.host, parsed.port) == ("0.0.0.0", CT2.port)
    assert parsed.sampling_config is None
    assert ct2_config.SamplingDefaults.from_json(parsed.sampling) == ct2_config.SamplingDefaults(
        temperature=0.7, top_p=0.9, top_k=50, max_tokens=512, stop=("</s>", "###")
    )


def test_sampling_file_reads_like_the_argument(tmp_path: Path) -> None:
    """--sampling-config FILE (run by hand) holds the same JSON as the operator's --sampling."""
    text = json.dumps(sampling_defaults(HyperParameters.model_validate(HYPER_PARAMETERS)))
    path = tmp_path / "sampling.json"
    path.write_text(text)
    assert ct2_config.SamplingDefaults.from_file(path) == ct2_config.SamplingDefaults.from_json(text)


def test_ctranslate2_without_hyper_parameters_has_no_sampling_argument() -> None:
    assert flag(args_for(CT2), "sampling") is None


@pytest.mark.parametrize("batch", [1, 64, 256])
def test_vllm_max_num_seqs_is_max_batch_size(batch: int) -> None:
    args = args_for(VLLM, scalingParameters={"maxBatchSize": batch})
    assert flag(args, "max-num-seqs") == str(batch)


def test_vllm_max_num_seqs_defaults_to_256() -> None:
    assert flag(args_for(VLLM), "max-num-seqs") == "256"


@pytest.mark.parametrize("batch", [1, 32, 256])
def test_ctranslate2_max_batch_size_is_max_batch_size(batch: int) -> None:
    assert flag(args_for(CT2, scalingParameters={"maxBatchSize": batch}), "max-batch-size") == str(batch)


@pytest.mark.parametrize(
    ("quantization", "compute_type"),
    [("int8_float16", "int8_float16"), ("no_quantization", "default"), ("", "default")],
)
def test_ctranslate2_compute_type(quantization: str, compute_type: str) -> None:
    args = args_for(CT2, **optimization("ctranslate2", quantization))
    assert flag(args, "compute-type") == compute_type
    assert flag(args, "device") == "cuda"


def test_ctranslate2_compute_type_default_without_optimization_info() -> None:
    assert flag(args_for(CT2), "compute-type") == "default"


# --- hyperParameters ------------------------------------------------------------------------------------


def test_hyper_parameters_become_vllm_generation_config_override() -> None:
    override = flag(args_for(VLLM, hyperParameters=HYPER_PARAMETERS), "override-generation-config")
    assert override is not None
    # max_tokens is called max_new_tokens in a generation config; stop sequences are not part of it.
    assert json.loads(override) == {"temperature": 0.7, "top_p": 0.9, "top_k": 50, "max_new_tokens": 512}


def test_generation_config_override_is_deterministic_json() -> None:
    override = flag(args_for(VLLM, hyperParameters=HYPER_PARAMETERS), "override-generation-config")
    assert override == json.dumps(json.loads(override or "null"), sort_keys=True)


def test_max_tokens_zero_is_left_out() -> None:
    hp = {**HYPER_PARAMETERS, "maxTokens": 0}
    override = json.loads(flag(args_for(VLLM, hyperParameters=hp), "override-generation-config") or "null")
    assert "max_new_tokens" not in override
    assert "max_tokens" not in override
    assert "max_tokens" not in sampling_defaults(HyperParameters.model_validate(hp))


def test_no_hyper_parameters_no_override() -> None:
    assert flag(args_for(VLLM), "override-generation-config") is None
    assert sampling_defaults(None) == {}


def test_sampling_defaults_keep_stop_sequences() -> None:
    assert sampling_defaults(HyperParameters.model_validate(HYPER_PARAMETERS)) == {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 50,
        "max_tokens": 512,
        "stop": ["</s>", "###"],
    }


@pytest.mark.parametrize("stop", [None, []], ids=["absent", "empty"])
def test_sampling_defaults_without_stop_sequences(stop: list[str] | None) -> None:
    hp = HyperParameters.model_validate({**HYPER_PARAMETERS, "stopSequence": stop})
    assert "stop" not in sampling_defaults(hp)


def test_ctranslate2_reads_sampling_from_its_own_argument() -> None:
    args = args_for(CT2, hyperParameters=HYPER_PARAMETERS)
    assert flag(args, "override-generation-config") is None
    assert [a for a in args if "temperature" in a] == [f"--sampling={flag(args, 'sampling')}"]


# --- adapters -------------------------------------------------------------------------------------------


def test_vllm_adapter_enables_lora_under_the_name_clients_call() -> None:
    args = args_for(VLLM, adapter=("support-lora", "/adapters/team-a/support-lora"), name="support")
    assert "--enable-lora" in args
    assert flag(args, "lora-modules") == "support=/adapters/team-a/support-lora"
    assert flag(args, "served-model-name") == "support-base"
    assert flag(args, "model") == MODEL


def test_vllm_without_adapter_has_no_lora() -> None:
    args = args_for(VLLM)
    assert "--enable-lora" not in args
    assert flag(args, "lora-modules") is None


def test_ctranslate2_refuses_an_adapter() -> None:
    with pytest.raises(InvalidRuntimeChoice, match="CTranslate2 cannot serve LoRA adapters"):
        args_for(CT2, adapter=("support-lora", "/adapters/support-lora"))


# --- extra_args -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", [VLLM, CT2], ids=["vllm", "ctranslate2"])
def test_extra_args_are_appended_last_in_order(runtime: Runtime) -> None:
    extra = ["--gpu-memory-utilization=0.92", "--disable-log-requests"]
    plain = args_for(runtime, hyperParameters=HYPER_PARAMETERS)
    args = args_for(runtime.model_copy(update={"extra_args": extra}), hyperParameters=HYPER_PARAMETERS)
    assert args == [*plain, *extra]


def test_vllm_extra_args_come_after_lora() -> None:
    runtime = VLLM.model_copy(update={"extra_args": ["--max-lora-rank=64"]})
    args = args_for(runtime, adapter=("a", "/adapters/a"))
    assert args[-1] == "--max-lora-rank=64"
    assert args.index("--enable-lora") < len(args) - 1


def test_engine_args_are_deterministic() -> None:
    first = args_for(VLLM, "g5.48xlarge", hyperParameters=HYPER_PARAMETERS)
    assert first == args_for(VLLM, "g5.48xlarge", hyperParameters=HYPER_PARAMETERS)


# --- load_catalog ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [None, ""])
def test_no_catalog_file_means_the_default_catalog(path: str | None) -> None:
    assert load_catalog(path) is DEFAULT_CATALOG


def test_default_catalog_has_the_three_engines() -> None:
    assert DEFAULT_CATALOG.default == "vllm"
    assert {n: r.engine for n, r in DEFAULT_CATALOG.runtimes.items()} == {
        "vllm": "vllm",
        "ctranslate2": "ctranslate2",
        "llama-cpp": "llama-cpp",
    }


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "runtimes.yaml"
    path.write_text(text)
    return str(path)


def test_load_catalog_from_yaml(tmp_path: Path) -> None:
    catalog = load_catalog(
        write(
            tmp_path,
            """
default: ctranslate2
runtimes:
  vllm:
    engine: vllm
    image: registry.example.com/vllm-openai:v0.11.0
    port: 8080
    extra_args: ["--gpu-memory-utilization=0.92"]
  ctranslate2:
    engine: ctranslate2
    image: registry.example.com/ct2:4.6.0
    health_path: /healthz
""",
        )
    )
    assert catalog.default == "ctranslate2"
    vllm = catalog.runtimes["vllm"]
    assert (vllm.image, vllm.port, vllm.extra_args) == (
        "registry.example.com/vllm-openai:v0.11.0",
        8080,
        ["--gpu-memory-utilization=0.92"],
    )
    ct2 = catalog.runtimes["ctranslate2"]
    assert (ct2.port, ct2.health_path, ct2.metrics_path, ct2.extra_args) == (8000, "/healthz", "/metrics", [])
    assert select_runtime(mdep_spec(), catalog)[0] == "ctranslate2"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param(
            "default: tgi\nruntimes:\n  vllm: {engine: vllm, image: vllm/vllm-openai:v0.11.0}\n",
            "default runtime 'tgi' is not in the catalog",
            id="default-missing",
        ),
        pytest.param(
            "runtimes:\n  ct2: {engine: ctranslate2, image: ct2:1}\n",
            "default runtime 'vllm' is not in the catalog",
            id="implicit-default-missing",
        ),
        pytest.param("runtimes:\n  tgi: {engine: tgi, image: tgi:1}\n", "engine", id="unknown-engine"),
        pytest.param("runtimes:\n  vllm: {engine: vllm, image: ''}\n", "image", id="empty-image"),
        pytest.param("runtimes:\n  vllm: {engine: vllm, image: v, gpus: 2}\n", "gpus", id="unknown-field"),
        pytest.param("runtimes:\n  vllm: {engine: vllm, image: v, port: 0}\n", "port", id="bad-port"),
    ],
)
def test_invalid_catalog_is_rejected(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        load_catalog(write(tmp_path, text))


# --- GGUF and llama.cpp (the model's format picks the engine) ---------------------------------------------

LLAMA = DEFAULT_CATALOG.runtimes["llama-cpp"]


@pytest.mark.parametrize("quantization", ["", "no_quantization"])
def test_a_gguf_model_with_no_optimization_type_is_served_by_llama_cpp(quantization: str) -> None:
    spec = mdep_spec(optimizationInfo={"optimizationType": "", "quantizationType": quantization})
    assert select_runtime(spec, DEFAULT_CATALOG, "gguf") == ("llama-cpp", LLAMA)
    assert select_runtime(mdep_spec(), DEFAULT_CATALOG, "gguf")[0] == "llama-cpp"


@pytest.mark.parametrize(
    ("optimization", "quantization", "field"),
    [
        ("ctranslate2", "", "optimizationInfo.optimizationType"),
        ("vllm", "", "optimizationInfo.optimizationType"),
        ("", "int8_float16", "optimizationInfo.quantizationType"),
    ],
)
def test_impossible_pairs_with_gguf_are_refused_naming_the_field(
    optimization: str, quantization: str, field: str
) -> None:
    spec = mdep_spec(optimizationInfo={"optimizationType": optimization, "quantizationType": quantization})
    with pytest.raises(InvalidRuntimeChoice, match=field.replace(".", r"\.")):
        select_runtime(spec, DEFAULT_CATALOG, "gguf")


def test_a_ctranslate2_model_is_served_by_ctranslate2_and_refused_for_vllm() -> None:
    assert select_runtime(mdep_spec(), DEFAULT_CATALOG, "ctranslate2")[0] == "ctranslate2"
    spec = mdep_spec(optimizationInfo={"optimizationType": "vllm", "quantizationType": ""})
    with pytest.raises(InvalidRuntimeChoice, match="optimizationType"):
        select_runtime(spec, DEFAULT_CATALOG, "ctranslate2")


@pytest.mark.parametrize("model_format", [None, "safetensors", "pytorch"])
def test_other_formats_keep_the_catalogs_choice(model_format: str | None) -> None:
    assert select_runtime(mdep_spec(), DEFAULT_CATALOG, model_format)[0] == "vllm"


def pair(args: list[str], flag: str) -> str:
    """The value after ``flag`` in llama-server's arguments."""
    return args[args.index(flag) + 1]


def test_llama_cpp_args_come_from_the_spec() -> None:
    spec = mdep_spec(name="tiny", scalingParameters={"maxBatchSize": 4}, hyperParameters=HYPER_PARAMETERS)
    args = engine_args(spec, LLAMA, DEVICES["g5.xlarge"], "/models/m/tiny.gguf")
    # llama-server takes each value as its own argument (it refuses --model=...)
    assert args[:8] == ["--model", "/models/m/tiny.gguf", "--alias", "tiny", "--ctx-size", "16384", "--parallel", "4"]
    assert not [a for a in args if a.startswith("--") and "=" in a], args
    assert "--jinja" in args
    assert pair(args, "--n-gpu-layers") == "999"
    assert pair(args, "--port") == str(LLAMA.port)
    assert "--split-mode" not in args
    assert pair(args, "--temp") == str(HYPER_PARAMETERS["temperature"])


def test_llama_cpp_caps_parallel_slots_and_splits_across_gpus() -> None:
    spec = mdep_spec(scalingParameters={"maxBatchSize": 256})
    args = engine_args(spec, LLAMA, DEVICES["g5.12xlarge"], "/models/m/x.gguf")
    assert pair(args, "--parallel") == str(LLAMA.max_parallel)
    assert pair(args, "--ctx-size") == str(LLAMA.max_parallel * LLAMA.context_length)
    assert pair(args, "--split-mode") == "layer"


def test_llama_cpp_loads_a_gguf_lora_adapter_on_its_base() -> None:
    lora = "/adapters/models/a/lora/tiny-lora.gguf"
    args = engine_args(
        mdep_spec(name="support"), LLAMA, DEVICES["g5.xlarge"], "/models/models/a/base/x.gguf", ("l", lora)
    )
    assert pair(args, "--lora") == lora
    assert pair(args, "--model") == "/models/models/a/base/x.gguf"
    assert pair(args, "--alias") == "support"  # clients call the deployment's name: the adapted model


@pytest.mark.parametrize(
    ("base", "adapter", "says"),
    [
        ("gguf", "safetensors", "convert_lora_to_gguf.py"),
        ("gguf", None, "convert_lora_to_gguf.py"),
        ("safetensors", "gguf", "GGUF base model"),
        ("ctranslate2", "safetensors", "CTranslate2 cannot serve LoRA adapters"),
    ],
)
def test_adapter_and_base_formats_no_engine_serves_are_refused(base: str, adapter: str | None, says: str) -> None:
    with pytest.raises(InvalidRuntimeChoice, match=says) as caught:
        select_runtime(mdep_spec(), DEFAULT_CATALOG, base, adapter=True, adapter_format=adapter)
    assert str(caught.value).startswith("baseModel: ")


def test_a_gguf_lora_on_a_gguf_base_selects_llama_cpp() -> None:
    assert select_runtime(mdep_spec(), DEFAULT_CATALOG, "gguf", adapter=True, adapter_format="gguf")[0] == "llama-cpp"
    assert select_runtime(mdep_spec(), DEFAULT_CATALOG, "safetensors", adapter=True, adapter_format="safetensors")[
        0
    ] == ("vllm")


@pytest.mark.parametrize("name", ["Llama 3, 8B", "tuned=v2", "support (v2)"])
def test_vllm_adapter_of_any_name_is_one_lora_module_vllm_parses(name: str) -> None:
    """vLLM reads ``--lora-modules`` as NAME=PATH unless the item holds a ',' or more than one '=': then as JSON."""
    path = "/adapters/team-a/support-lora"
    module = flag(args_for(VLLM, adapter=("support-lora", path), name=name), "lora-modules") or ""
    if "=" in module and "," not in module:  # what vLLM does with the item
        assert module.split("=") == [name, path]
    else:
        assert json.loads(module) == {"name": name, "path": path}
