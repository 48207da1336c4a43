"""The command line of a local engine: llama-cpp-python's server for a GGUF model (the arguments the
operator gave llama-server, translated) or Dockyard's CTranslate2 server for a CTranslate2 model (the
pod's arguments rewritten for this machine's CPU and a loopback port); :class:`NoLocalEngine` when the
engine is not installed; a free loopback port and the health probe the runner polls."""

from __future__ import annotations

import importlib.util
import socket
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

CHAT_FORMAT = "chatml-function-calling"
"""llama-cpp-python's chat format with grammar-constrained tool calls (valid JSON arguments)."""


class NoLocalEngine(Exception):
    """This pod's model cannot run on the host; the message says why (it stays simulated)."""


@dataclass(frozen=True)
class EngineCommand:
    argv: list[str]
    health_path: str
    files: dict[str, str] = field(default_factory=dict)
    """Files to write before starting (path → content), e.g. the sampling settings."""


def _arg_values(args: list[str]) -> dict[str, str]:
    """The pod container's arguments as a dict: ``--key=value``, ``--key value`` (llama-server's form)
    or a bare ``--flag`` (an empty value)."""
    values: dict[str, str] = {}
    key: str | None = None
    for arg in args:
        if arg.startswith("--"):
            key, sep, value = arg[2:].partition("=")
            values[key] = value
            if sep:
                key = None
        elif key is not None:
            values[key] = arg
            key = None
    return values


def store_path(store: Path, pod_path: str) -> Path:
    """The local model store's file for a path of the pod (``/models/<store path>`` of the model,
    ``/adapters/<store path>`` of an adapter: builders/model.py mounts the model's store path under one
    of them)."""
    parts = PurePosixPath(pod_path).parts
    if len(parts) < 3 or parts[0] != "/" or ".." in parts:
        raise NoLocalEngine(f"the pod's path {pod_path!r} is not a model store path")
    return store.joinpath(*parts[2:])


def llama_cpp_files(args: list[str], store: Path) -> tuple[Path, Path | None]:
    """The model file and the LoRA adapter file (``--lora``; None: none) that the operator gave
    llama-server, in the local model store."""
    values = _arg_values(args)
    if not values.get("model"):
        raise NoLocalEngine("the pod's arguments name no --model")
    lora = values.get("lora")
    return store_path(store, values["model"]), store_path(store, lora) if lora else None


def llama_cpp_command(
    args: list[str], model_file: Path, port: int, threads: int, lora: Path | None = None
) -> EngineCommand:
    """llama-cpp-python's server for the arguments the operator gave llama-server (runtimes.py):
    the same served name and context per sequence; one sequence at a time (that server has no
    parallel slots); tool calls with grammar-constrained JSON (chat format chatml-function-calling);
    ``lora``: the GGUF LoRA adapter applied to every request (llama-server's ``--lora``)."""
    if importlib.util.find_spec("llama_cpp") is None:
        raise NoLocalEngine("llama-cpp-python is not installed (make venv builds and installs it)")
    values = _arg_values(args)
    parallel = max(1, int(values.get("parallel") or 1))
    n_ctx = max(256, int(values.get("ctx-size") or 4096) // parallel)
    argv = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model_file),
        "--model_alias",
        values.get("alias") or model_file.stem,
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--chat_format",
        CHAT_FORMAT,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    if lora is not None:
        argv += ["--lora_path", str(lora)]
    return EngineCommand(argv, "/v1/models")


def ctranslate2_command(args: list[str], model_dir: Path, port: int, threads: int = 1) -> EngineCommand:
    """Dockyard's CTranslate2 server with the operator's arguments (runtimes.ctranslate2_args, its sampling
    defaults among them), on the CPU of this machine: the model directory from the local store, a loopback
    port, one replica, ``threads`` CPU threads. The requested compute type stays (``int8_float16`` falls
    back to ``int8_float32`` on the CPU, as in a pod without a GPU)."""
    if importlib.util.find_spec("dockyard_ct2") is None:
        raise NoLocalEngine("Dockyard's CTranslate2 server (package dockyard_ct2) is not installed")
    rewritten: list[str] = []
    for arg in args:
        key = arg[2:].partition("=")[0] if arg.startswith("--") else ""
        if key == "model-dir":
            rewritten.append(f"--model-dir={model_dir}")
        elif key == "port":
            rewritten.append(f"--port={port}")
        elif key == "device":
            rewritten.append("--device=cpu")
        elif key == "device-count":
            rewritten.append("--device-count=1")
        elif key in ("host", "intra-threads", "tensor-parallel"):
            continue
        else:
            rewritten.append(arg)
    argv = [sys.executable, "-m", "dockyard_ct2", *rewritten, f"--intra-threads={threads}", "--host=127.0.0.1"]
    return EngineCommand(argv, "/health")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (OSError, urllib.error.URLError):
        return False
