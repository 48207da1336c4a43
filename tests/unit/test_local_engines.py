"""Unit tests of the local engine runner's command lines (operator/dockyard_localcluster/engines.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dockyard_localcluster import engines
from dockyard_localcluster.engines import NoLocalEngine, ctranslate2_command, llama_cpp_command


def test_llama_cpp_keeps_the_served_name_and_the_context_per_sequence(tmp_path: Path) -> None:
    args = ["--model=/models/m/tiny.gguf", "--alias=tiny", "--ctx-size=16384", "--parallel=4", "--jinja"]
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


def test_ctranslate2_runs_the_pods_arguments_on_this_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines.importlib.util, "find_spec", lambda name: object())
    args = [
        "--model=/models/models/ns/m",
        "--served-model-name=chat",
        "--device=cuda",
        "--tensor-parallel=1",
        "--compute-type=int8_float16",
        "--max-batch-size=8",
        "--port=8000",
        '--sampling={"temperature":0.2}',
    ]
    command = ctranslate2_command(args, tmp_path, 40000)
    assert command.argv[:3] == [sys.executable, "-m", "dockyard_ct2"]
    assert command.argv[3:] == [
        f"--model={tmp_path}",
        "--served-model-name=chat",
        "--device=cpu",
        "--compute-type=int8_float16",
        "--max-batch-size=8",
        "--port=40000",
        '--sampling={"temperature":0.2}',
        "--host=127.0.0.1",
    ]
    assert command.health_path == "/health"
    assert command.files == {}


def test_an_engine_that_is_not_installed_leaves_the_pod_simulated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(NoLocalEngine, match="dockyard_ct2"):
        ctranslate2_command([], tmp_path, 1)
    with pytest.raises(NoLocalEngine, match="llama-cpp-python"):
        llama_cpp_command([], tmp_path / "x.gguf", 1, threads=1)
