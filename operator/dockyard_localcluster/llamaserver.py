"""llama-server's command line for llama-cpp-python's server: the entry point of the llama-cpp image.

The operator gives the runtime catalog's ``llama-cpp`` image llama.cpp's ``llama-server`` arguments
(``dockyard_operator.runtimes.llama_cpp_args``: ``--model=… --alias=… --ctx-size=… --parallel=…
--n-gpu-layers=… --jinja --metrics --host=… --port=…``). The test bed's image (Dockerfile target
``llama-cpp``) runs llama-cpp-python's OpenAI-compatible server instead, whose flags differ; this
translates them the way the local engine runner does (:func:`dockyard_localcluster.engines.llama_cpp_command`):
one sequence at a time with the context of one slot, and grammar-constrained tool calls.

Standard library only: the image holds llama-cpp-python, not Dockyard. Arguments it does not know
(llama-cpp-python's own ``--n_ctx`` style flags, ``--help``) pass through unchanged.

Run: ``python llamaserver.py --model=/models/m.gguf --port=8080`` (``--dry-run`` prints the command).
"""

from __future__ import annotations

import os
import sys

CHAT_FORMAT = "chatml-function-calling"
"""llama-cpp-python's chat format with grammar-constrained tool calls (valid JSON arguments)."""
RENAMED = {"model": "--model", "alias": "--model_alias", "host": "--host", "port": "--port"}
DROPPED = {"metrics", "split-mode", "temp", "top-p", "top-k", "n-predict", "cont-batching", "flash-attn"}
"""llama-server flags with no llama-cpp-python server equivalent (metrics, sampling defaults, GPU split)."""


def translate(args: list[str]) -> tuple[list[str], list[str]]:
    """llama_cpp.server's arguments for llama-server's, and the llama-server flags that were dropped."""
    out: list[str] = []
    dropped: list[str] = []
    values: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg.startswith("--") or "_" in arg.partition("=")[0]:
            out.append(arg)  # llama_cpp.server's own flags (and their values) pass through
            continue
        name, eq, value = arg[2:].partition("=")
        takes_value = (
            name in RENAMED
            or name in ("ctx-size", "parallel", "n-gpu-layers", "threads")
            or (name in DROPPED and name not in ("metrics", "cont-batching", "flash-attn"))
        )
        if takes_value and not eq and i < len(args):
            value = args[i]
            i += 1
        if name in RENAMED:
            out += [RENAMED[name], value]
        elif name in ("ctx-size", "parallel"):
            values[name] = value
        elif name == "n-gpu-layers":
            out += ["--n_gpu_layers", value]
        elif name == "threads":
            out += ["--n_threads", value, "--n_threads_batch", value]
        elif name == "jinja":
            values["jinja"] = "1"
        elif name in DROPPED:
            dropped.append(arg if eq or not takes_value else f"{arg}={value}")
        else:
            out.append(arg)
    if "ctx-size" in values:
        parallel = max(1, int(values.get("parallel") or 1))
        out += ["--n_ctx", str(max(256, int(values["ctx-size"]) // parallel))]
    if "jinja" in values and "--chat_format" not in out:
        out += ["--chat_format", CHAT_FORMAT]
    return out, dropped


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    dry_run = "--dry-run" in args
    if dry_run:
        args.remove("--dry-run")
    translated, dropped = translate(args)
    command = [sys.executable, "-m", "llama_cpp.server", *translated]
    if dropped:
        print(f"llamaserver: not supported by llama-cpp-python's server, ignored: {' '.join(dropped)}", file=sys.stderr)
    if dry_run:
        print(" ".join(command))
        return
    sys.stderr.flush()
    os.execv(sys.executable, command)


if __name__ == "__main__":
    main()
