"""llama.cpp's own server, ``llama-server``, as the local engine of a GGUF model pod: the engine a
cluster runs (runtimes.llama_cpp_args), with its Prometheus ``/metrics`` (``--metrics``:
``llamacpp:requests_processing``, ``llamacpp:requests_deferred``, the load signal Dockyard's
autoscaler reads) and its ``--parallel`` slots. llama-cpp-python's server, the runner's default GGUF
engine, has neither.

The runner uses it when ``DOCKYARD_LOCAL_ENGINES_LLAMA_SERVER`` names the binary, e.g. the one
build-llama-server.sh compiles into ``~/.cache/dockyard/llama-server/<version>/bin/llama-server``
(:func:`dockyard_localcluster.images.inputs.llama_server_context` builds it on first use).
"""

from __future__ import annotations

from pathlib import Path

from dockyard_localcluster.engines.commands import EngineCommand, NoLocalEngine

REPLACED = frozenset({"model", "lora", "host", "port", "threads", "threads-batch", "n-gpu-layers", "split-mode"})
"""Arguments of the pod that name pod paths, the pod's address or its GPUs: replaced for this machine."""


def _groups(args: list[str]) -> list[list[str]]:
    """The arguments as llama-server reads them: each ``--flag`` with the value that follows it, if
    any (llama_cpp_args writes ``--flag value``; ``--flag=value`` stays one item)."""
    groups: list[list[str]] = []
    for arg in args:
        if arg.startswith("--") or not groups:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


def llama_server_command(
    binary: Path, args: list[str], model_file: Path, port: int, threads: int, lora: Path | None = None
) -> EngineCommand:
    """llama-server with the arguments the operator gave the pod (served name, context, ``--parallel``
    slots, ``--jinja``, ``--metrics``, sampling defaults), on this machine's CPU: the model (and LoRA)
    file from the local model store, a loopback port, ``threads`` CPU threads."""
    if not binary.is_file():
        raise NoLocalEngine(f"llama-server is not at {binary} (operator/dockyard_localcluster/build-llama-server.sh)")
    kept = [item for group in _groups(args) if group[0][2:].partition("=")[0] not in REPLACED for item in group]
    argv = [
        str(binary),
        *kept,
        "--model", str(model_file),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--threads", str(threads),
        "--threads-batch", str(threads),
    ]  # fmt: skip
    if lora is not None:
        argv += ["--lora", str(lora)]
    return EngineCommand(argv, "/health")
