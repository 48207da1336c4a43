"""Run Dockyard's two processes inside the test process: the operator and the facade."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import uvicorn
from kopf.testing import KopfRunner

from dockyard_api import server as facade_server
from dockyard_api.app import create_app
from dockyard_api.settings import ApiSettings
from dockyard_operator.settings import operator_settings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_http_ok(url: str, timeout: float = 30.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    last: Exception | httpx.Response | None = None
    while time.monotonic() < deadline:
        try:
            resp = httpx.get(url, timeout=2.0)
            if resp.status_code == 200:
                return resp
            last = resp
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer 200 within {timeout}s (last: {last!r})")


@dataclass
class RunningOperator:
    runner: KopfRunner
    health_url: str


@contextmanager
def run_operator(namespaces: Sequence[str] = (), env: Mapping[str, str] | None = None) -> Iterator[RunningOperator]:
    """The operator in-process with ``kopf.testing.KopfRunner`` (standalone, no peering).

    ``env``: ``DOCKYARD_OPERATOR_*`` settings for this run (e.g. short failure deadlines).
    """
    port = free_port()
    settings = {"DOCKYARD_OPERATOR_HEALTH_PORT": str(port), **(env or {})}
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    args = ["run", "--standalone", "--verbose"]
    args += [f"--namespace={ns}" for ns in namespaces] or ["--all-namespaces"]
    args += ["-m", "dockyard_operator.handlers"]
    operator_settings.cache_clear()  # the settings are read once per process: this run reads its own
    runner = KopfRunner(args, timeout=STOP_SECONDS)
    try:
        with _explained_if_it_does_not_stop(runner), runner:
            wait_http_ok(f"http://127.0.0.1:{port}/readyz")
            yield RunningOperator(runner, f"http://127.0.0.1:{port}")
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    assert runner.exception is None, runner.exception
    assert runner.exit_code == 0, runner.output


STOP_SECONDS = 60
"""How long a stopping operator may take (KopfRunner's own check); the operator's own deadlines are far shorter."""


@contextmanager
def _explained_if_it_does_not_stop(runner: KopfRunner) -> Iterator[None]:
    """KopfRunner's "The operator didn't stop, still running." with what the operator's event loop was still
    waiting for: every task's name and innermost frames, and the thread's stack."""
    try:
        yield
    except Exception as exc:
        if "didn't stop" not in str(exc):
            raise
        raise AssertionError(f"the operator did not stop within {STOP_SECONDS}s:\n{_operator_stacks(runner)}") from exc


def _operator_stacks(runner: KopfRunner) -> str:
    lines: list[str] = []
    for ident, inner in sys._current_frames().items():
        frame: FrameType | None = inner
        loop = None
        while frame is not None:  # the runner's thread runs KopfRunner._target, whose local `loop` is the operator's
            if frame.f_code.co_name == "_target" and frame.f_locals.get("self") is runner:
                loop = frame.f_locals.get("loop")
                break
            frame = frame.f_back
        if loop is None:
            continue
        lines.append(f"thread {ident}:\n" + "".join(traceback.format_stack(inner, limit=8)))
        for task in sorted(asyncio.all_tasks(loop), key=lambda task: task.get_name())[:300]:
            lines.append(f"task {task.get_name()!r}: {' -> '.join(_awaiting(task.get_coro())[-6:]) or repr(task)}")
    return "\n".join(lines) or "(the operator's thread was not found)"


def _awaiting(coro: Any) -> list[str]:
    """Where a suspended coroutine and each one it awaits stand (a task's own stack shows only the first)."""
    where: list[str] = []
    while coro is not None and len(where) < 40:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        path = "/".join(frame.f_code.co_filename.rsplit("/", 2)[-2:])
        where.append(f"{path}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None) or getattr(coro, "gi_yieldfrom", None)
    return where


@dataclass
class RunningFacade:
    url: str
    client: httpx.Client


@contextmanager
def run_facade(settings: ApiSettings | None = None, port: int | None = None) -> Iterator[RunningFacade]:
    """The facade in a uvicorn server on a loopback port (``port``, e.g. one the operator's generated URLs
    already name, or a free one), in a thread."""
    port = port or free_port()
    settings = (settings or ApiSettings()).model_copy(update={"host": "127.0.0.1", "port": port})
    server = uvicorn.Server(facade_server.config(create_app(settings), settings, log_level="warning"))
    thread = threading.Thread(target=server.run, name="facade", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http_ok(f"{url}/healthz")
        with httpx.Client(base_url=url, timeout=30.0) as client:
            yield RunningFacade(url, client)
    finally:
        server.should_exit = True
        thread.join(timeout=15)


@contextmanager
def run_local_runtime(
    state: Path, operator_env: Mapping[str, str] | None = None, **overrides: Any
) -> Iterator[tuple[str, RunningFacade]]:
    """The operator (its generated URLs name this facade, environments re-checked every second; further
    variables in ``operator_env``) and a facade in local endpoint mode with no caches and a SQLite
    conversation store under ``state``, as the app-runtime and browser tests use them; ``overrides`` are
    further ApiSettings fields. Yields the facade's URL and the running facade."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {"DOCKYARD_OPERATOR_ENVIRONMENT_INTERVAL_SECONDS": "1", "DOCKYARD_OPERATOR_PUBLIC_URL": url}
    env.update(operator_env or {})
    settings = ApiSettings(
        host="127.0.0.1",
        port=port,
        api_key_cache_seconds=0,
        last_used_interval_seconds=0,
        sweep_interval_seconds=0,
        usage_summary_seconds=0,
        model_store=state / "model-store",
        database_url=f"sqlite+aiosqlite:///{state}/conversations.db",
        endpoint_mode="local",
        **overrides,
    )
    with run_operator(env=env), run_facade(settings, port) as running:
        yield url, running
