"""Test support for real model engines: the tiny random-weight GGUF model and llama.cpp's server.

:func:`tiny_gguf` writes the model (``dockyard_localcluster.tinymodel``: a llama-architecture GGUF with
its own small vocabulary, made with the ``gguf`` package, no download). :func:`llama_server` serves
it with llama-cpp-python's OpenAI-compatible server, started with the same command line the local
engine runner uses, on a free loopback port.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from dockyard_localcluster.engines import llama_cpp_command
from dockyard_localcluster.tinymodel import write_tiny_gguf
from tests.support.runners import free_port

CLOCK_TOOL = {
    "type": "function",
    "function": {
        "name": "clock",
        "description": "The current date and time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "enum": ["UTC", "Europe/Paris", "Asia/Tokyo"]}},
            "required": ["timezone"],
        },
    },
}


def tiny_gguf(directory: Path, name: str = "tiny.gguf") -> Path:
    return write_tiny_gguf(directory / name)


@contextmanager
def llama_server(model: Path, alias: str = "tiny", log: Path | None = None) -> Iterator[str]:
    """llama.cpp's server for ``model``; yields its base URL (``http://127.0.0.1:<port>``)."""
    port = free_port()
    command = llama_cpp_command([f"--alias={alias}", "--ctx-size=2048", "--parallel=1"], model, port, threads=1)
    log = log or model.with_suffix(".log")
    with log.open("ab") as out:
        proc = subprocess.Popen(command.argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"llama.cpp's server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(url + command.health_path, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"llama.cpp's server did not answer within 60 s: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
