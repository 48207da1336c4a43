"""The local engine runner's llama.cpp server command (engines/llama_server.py): the operator's own
llama-server arguments (runtimes.llama_cpp_args), rewritten for this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from dockyard_core.devices import BUILT_IN as DEVICES
from dockyard_localcluster.engines import NoLocalEngine
from dockyard_localcluster.engines.llama_server import llama_server_command
from dockyard_operator.runtimes import DEFAULT_CATALOG, engine_args
from tests.unit.k8s_shapes import mdep_spec


def pod_args(device_type: str = "g5.12xlarge") -> list[str]:
    spec = mdep_spec(
        name="tiny chat",
        deviceType=device_type,
        scalingParameters={"maxBatchSize": 3, "minReplicas": 1, "maxReplicas": 2},
        hyperParameters={"temperature": 0.5, "topP": 0.9, "topK": 20, "maxTokens": 64},
    )
    runtime = DEFAULT_CATALOG.runtimes["llama-cpp"]
    return engine_args(spec, runtime, DEVICES[device_type], "/models/ns/tiny/tiny.gguf")


def test_the_pods_arguments_run_on_this_cpu_with_metrics_and_slots(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("")
    command = llama_server_command(binary, pod_args(), tmp_path / "tiny.gguf", 41234, threads=2)
    argv = command.argv
    assert argv[0] == str(binary)
    # the pod's own choices stay: served name (one argument, spaces and all), slots, context, metrics
    assert argv[argv.index("--alias") + 1] == "tiny chat"
    assert argv[argv.index("--parallel") + 1] == "3"
    assert argv[argv.index("--ctx-size") + 1] == str(4096 * 3)
    assert {"--jinja", "--metrics"} <= set(argv)
    assert (argv[argv.index("--temp") + 1], argv[argv.index("--n-predict") + 1]) == ("0.5", "64")
    # the pod's paths, address and GPUs are replaced, each once
    for flag, value in (("--model", str(tmp_path / "tiny.gguf")), ("--host", "127.0.0.1"), ("--port", "41234"),
                        ("--threads", "2"), ("--threads-batch", "2")):  # fmt: skip
        assert argv.count(flag) == 1
        assert argv[argv.index(flag) + 1] == value
    assert "--n-gpu-layers" not in argv
    assert "--split-mode" not in argv  # g5.12xlarge has 4 GPUs: the pod splits layers across them
    assert "/models/ns/tiny/tiny.gguf" not in argv
    assert "--lora" not in argv
    assert command.health_path == "/health"


def test_an_adapter_is_loaded_from_the_local_store(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("")
    args = [*pod_args("g5.xlarge"), "--lora", "/adapters/ns/lora/lora.gguf"]
    argv = llama_server_command(binary, args, tmp_path / "base.gguf", 1, 1, lora=tmp_path / "lora.gguf").argv
    assert argv.count("--lora") == 1
    assert argv[argv.index("--lora") + 1] == str(tmp_path / "lora.gguf")


def test_a_missing_binary_leaves_the_pod_simulated(tmp_path: Path) -> None:
    with pytest.raises(NoLocalEngine, match="llama-server is not at"):
        llama_server_command(tmp_path / "nowhere", pod_args(), tmp_path / "tiny.gguf", 1, 1)
