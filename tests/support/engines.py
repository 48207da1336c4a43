"""Test support for real model engines: the tiny random-weight GGUF model and llama.cpp's server.

:func:`tiny_gguf` writes the model (``dockyard_localcluster.tinymodel``: a llama-architecture GGUF with
its own small vocabulary, made with the ``gguf`` package, no download). :func:`llama_server` serves
it with llama-cpp-python's OpenAI-compatible server, started with the same command line the local
engine runner uses, on a free loopback port; :func:`embedding_server` with llama.cpp's ``llama-server``
and embeddings on; :func:`serving` runs any engine command until its health endpoint answers.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from kubernetes import client

from dockyard_localcluster.engines import EngineRunner, EngineSettings, llama_cpp_command
from dockyard_localcluster.images.inputs import llama_server_context
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
def serving(argv: list[str], port: int, log: Path, *, health: str = "/health") -> Iterator[str]:
    """Runs the engine ``argv`` (listening on 127.0.0.1:``port``), its output appended to ``log``; yields its
    base URL once ``health`` answers 200 (an AssertionError with the log's tail when it exits first or takes
    over 60 s); stops it on leaving (terminate, kill after 10 s)."""
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"{Path(argv[0]).name} exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(url + health, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{Path(argv[0]).name} did not answer within 60 s: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def llama_server(model: Path, alias: str = "tiny", log: Path | None = None) -> Iterator[str]:
    """llama.cpp's server for ``model``; yields its base URL (``http://127.0.0.1:<port>``)."""
    port = free_port()
    command = llama_cpp_command([f"--alias={alias}", "--ctx-size=2048", "--parallel=1"], model, port, threads=1)
    with serving(command.argv, port, log or model.with_suffix(".log"), health=command.health_path) as url:
        yield url


@contextmanager
def embedding_server(model: Path, log: Path, *, ctx_size: int = 1024, batch_size: int | None = None) -> Iterator[str]:
    """llama.cpp's own ``llama-server`` (the binary build-llama-server.sh compiles, cached) with embeddings on
    (mean pooling: one vector per text) for ``model`` as ``tiny-embed``, one thread; yields its base URL."""
    port = free_port()
    batch = ["--batch-size", str(batch_size), "--ubatch-size", str(batch_size)] if batch_size else []
    argv = [str(llama_server_context() / "llama-server"), "--model", str(model), "--alias", "tiny-embed",
            "--embedding", "--pooling", "mean", "--ctx-size", str(ctx_size), *batch, "--threads", "1",
            "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    with serving(argv, port, log) as url:
        yield url


@contextmanager
def engine_runner(
    api: client.ApiClient, store: Path, log_dir: Path, *, max_engines: int = 2, llama_server: Path | None = None
) -> Iterator[EngineRunner]:
    """The local engine runner in a thread of the test process (``make run`` runs it as a process): real
    engines for the Dockyard model pods of the cluster, llama-cpp-python's server for GGUF pods or, with
    ``llama_server``, llama.cpp's own binary."""
    settings = EngineSettings(
        model_store=store,
        log_dir=log_dir,
        max_engines=max_engines,
        health_timeout_seconds=90,
        llama_server=llama_server,
    )
    engines = EngineRunner(api, settings)
    thread = threading.Thread(target=engines.run, name="engine-runner", daemon=True)
    thread.start()
    try:
        yield engines
    finally:
        engines.stop_event.set()
        engines.stop_all()
