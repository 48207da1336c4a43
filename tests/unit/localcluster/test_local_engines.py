"""Unit tests of the local engine runner's command lines (dockyard_localcluster.engines.commands)."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
import urllib3
from kubernetes import client

import dockyard_ct2.config as ct2_config
from dockyard_core.devices import BUILT_IN as DEVICES
from dockyard_localcluster.engines import (
    EngineRunner,
    EngineSettings,
    NoLocalEngine,
    commands,
    ctranslate2_command,
    llama_cpp_command,
)
from dockyard_operator.runtimes import DEFAULT_CATALOG, engine_args
from tests.unit.k8s_shapes import mdep_spec


@pytest.mark.parametrize(
    "args",
    [
        # llama-server's own form (runtimes.llama_cpp_args), and the --flag=value form
        ["--model", "/models/m/tiny.gguf", "--alias", "tiny", "--ctx-size", "16384", "--parallel", "4", "--jinja"],
        ["--model=/models/m/tiny.gguf", "--alias=tiny", "--ctx-size=16384", "--parallel=4", "--jinja"],
    ],
)
def test_llama_cpp_keeps_the_served_name_and_the_context_per_sequence(tmp_path: Path, args: list[str]) -> None:
    command = llama_cpp_command(args, tmp_path / "tiny.gguf", 41234, threads=2)
    argv = command.argv
    assert argv[:3] == [sys.executable, "-m", "llama_cpp.server"]
    pairs = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert pairs == {
        "--model": str(tmp_path / "tiny.gguf"),
        "--model_alias": "tiny",
        "--n_ctx": "4096",
        "--n_threads": "2",
        "--n_threads_batch": "2",
        "--chat_format": "chatml-function-calling",
        "--host": "127.0.0.1",
        "--port": "41234",
    }
    assert command.health_path == "/v1/models"


@pytest.mark.parametrize("device_type", ["g5.xlarge", "g5.48xlarge"])
def test_ctranslate2_runs_the_pods_arguments_on_this_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device_type: str
) -> None:
    """The arguments the operator gives the pod (runtimes.ctranslate2_args), rewritten for this machine,
    are what dockyard-ct2-server's own parser accepts: the local model directory, the CPU, one replica."""
    monkeypatch.setattr(commands.importlib.util, "find_spec", lambda name: object())
    spec = mdep_spec(
        name="chat",
        deviceType=device_type,
        scalingParameters={"maxBatchSize": 8},
        optimizationInfo={"optimizationType": "ctranslate2", "quantizationType": "int8_float16"},
        hyperParameters={"temperature": 0.2, "maxTokens": 64, "topP": 0.9, "topK": 40},
    )
    runtime = DEFAULT_CATALOG.runtimes["ctranslate2"]
    args = engine_args(spec, runtime, DEVICES[device_type], "/models/models/ns/m")
    command = ctranslate2_command(args, tmp_path, 40000, threads=2)
    assert command.argv[:3] == [sys.executable, "-m", "dockyard_ct2"]
    parsed = ct2_config.build_parser().parse_args(command.argv[3:])
    assert parsed.model_dir == tmp_path
    assert parsed.served_model_name == "chat"
    assert (parsed.device, parsed.device_count) == ("cpu", 1)
    assert parsed.compute_type == "int8_float16"
    assert parsed.max_batch_size == 8
    assert (parsed.host, parsed.port) == ("127.0.0.1", 40000)
    assert parsed.intra_threads == 2
    assert json.loads(parsed.sampling)["temperature"] == 0.2  # the pod's sampling defaults, as an argument
    assert command.health_path == "/health"
    assert command.files == {}


def test_an_engine_that_is_not_installed_leaves_the_pod_simulated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(NoLocalEngine, match="dockyard_ct2"):
        ctranslate2_command([], tmp_path, 1)
    with pytest.raises(NoLocalEngine, match="llama-cpp-python"):
        llama_cpp_command([], tmp_path / "x.gguf", 1, threads=1)


def test_an_adapter_pod_runs_the_base_file_with_the_lora_file_of_the_local_store(tmp_path: Path) -> None:
    """The operator's llama-server arguments of a GGUF LoRA on a GGUF base (runtimes.llama_cpp_args): the
    runner finds both files in the local model store under the paths the pod mounts them at."""
    spec = mdep_spec(name="support", deviceType="g5.xlarge")
    runtime = DEFAULT_CATALOG.runtimes["llama-cpp"]
    lora = ("support", "/adapters/models/a/lora/tiny-lora.gguf")
    args = engine_args(spec, runtime, DEVICES["g5.xlarge"], "/models/models/a/tiny/tiny.gguf", lora)
    model_file, lora_file = commands.llama_cpp_files(args, tmp_path)
    assert model_file == tmp_path / "models/a/tiny/tiny.gguf"
    assert lora_file == tmp_path / "models/a/lora/tiny-lora.gguf"
    argv = llama_cpp_command(args, model_file, 41234, threads=1, lora=lora_file).argv
    assert argv[argv.index("--lora_path") + 1] == str(lora_file)
    assert argv[argv.index("--model_alias") + 1] == "support"
    assert "--lora_path" not in llama_cpp_command(args, model_file, 41234, threads=1).argv
    for bad in ("relative/x.gguf", "/models/../etc/passwd", "/x"):
        with pytest.raises(NoLocalEngine):
            commands.store_path(tmp_path, bad)


def test_the_runner_lists_again_when_the_pod_watch_breaks(tmp_path: Path) -> None:
    """An API server that restarts (or a connection cut) under a running runner ends its list or watch with
    a urllib3 error: the runner lists again instead of dying, and ends when asked to stop."""
    runner = EngineRunner(client.ApiClient(), EngineSettings(model_store=tmp_path, log_dir=tmp_path))
    calls: list[dict[str, object]] = []

    class BrokenCore:
        def list_pod_for_all_namespaces(self, **kwargs: object) -> None:
            calls.append(kwargs)
            if len(calls) == 2:
                runner.stop_event.set()
            raise urllib3.exceptions.ProtocolError("Response ended prematurely")

    runner.core = BrokenCore()  # type: ignore[assignment]
    done = threading.Thread(target=runner.run, daemon=True)
    done.start()
    done.join(timeout=10)
    assert not done.is_alive()
    assert [c["label_selector"] for c in calls] == ["dockyard.dev/local-engine=true"] * 2
