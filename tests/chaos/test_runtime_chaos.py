"""Chaos for the deployed-app runtime (issue #19): the facade SIGKILLed in the middle of a streamed
execute call, and the conversation database (a real PostgreSQL server) stopped under load.

Each scenario is a bounded loop of real calls on loopback against the real local control plane, the
operator, the facade as its own process (``python -m dockyard_api``, so it can be killed) and the
scripted model server, and it counts what was tried, what recovered and what was lost (must be 0): every
stored message is checked against the calls that were answered, and no half turn is ever stored.

The fixtures live here (tests/chaos/conftest.py belongs to the other chaos scenarios).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from tests.support.cluster import E2ECluster
from tests.support.postgres import Postgres, postgres_server
from tests.support.runners import free_port, run_operator, wait_http_ok
from tests.support.runtime_app import answered, deploy_bot
from tests.support.scripted_model import Reply, ScriptedModel, scripted_model
from tests.support.waiting import wait_for

KILL_ROUNDS = 3
OUTAGE_CALLS = 5

pytestmark = pytest.mark.k8s


# --- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def facade_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def operator(crds: None, facade_port: int) -> Iterator[None]:
    """The operator; the environments' generated URLs name the facade's (fixed) port."""
    env = {
        "DOCKYARD_OPERATOR_ENVIRONMENT_INTERVAL_SECONDS": "1",
        "DOCKYARD_OPERATOR_PUBLIC_URL": f"http://127.0.0.1:{facade_port}",
    }
    with run_operator(env=env):
        yield


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    with scripted_model() as server:
        yield server


@pytest.fixture
def namespace(api: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    name = f"chaos-rt-{request.node.name[5:20].replace('_', '-').strip('-')}-{os.getpid() % 10000}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


class FacadeProcess:
    """``python -m dockyard_api`` on a fixed port: started, SIGKILLed and started again like a pod."""

    def __init__(self, port: int, state: Path, kubeconfig: Path, **settings: str) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = state / "facade.log"
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "DOCKYARD_API_HOST": "127.0.0.1",
            "DOCKYARD_API_PORT": str(port),
            "DOCKYARD_API_MODEL_STORE": str(state / "model-store"),
            "DOCKYARD_API_ENDPOINT_MODE": "local",
            "DOCKYARD_API_API_KEY_CACHE_SECONDS": "0",
            "DOCKYARD_API_SWEEP_INTERVAL_SECONDS": "0",
            "DOCKYARD_API_USAGE_SUMMARY_SECONDS": "0",
            "DOCKYARD_API_EXECUTE_TURN_TIMEOUT_SECONDS": "60",
            **{f"DOCKYARD_API_{k.upper()}": v for k, v in settings.items()},
        }
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "dockyard_api"], env=self.env, stdout=log,
                                         stderr=subprocess.STDOUT)  # fmt: skip
        self.starts += 1
        wait_http_ok(f"{self.url}/healthz", timeout=60)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def facade_process(port: int, state: Path, kubeconfig: Path, **settings: str) -> Iterator[FacadeProcess]:
    facade = FacadeProcess(port, state, kubeconfig, **settings)
    facade.start()
    try:
        yield facade
    finally:
        facade.stop()


def stored(db: Path, session_id: str) -> list[tuple[str, str]]:
    """(role, content) of a session's stored messages, read from the SQLite file directly."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT m.role, m.content FROM dockyard_messages m JOIN dockyard_sessions s ON m.session_pk = s.pk "
            "WHERE s.session_id = ? ORDER BY m.seq",
            (session_id,),
        ).fetchall()
    return [(str(r), str(c)) for r, c in rows]


def report(line: str) -> None:
    """The figures, on the real stderr (the operator's runner swaps sys.stdout while it runs)."""
    print(f"\n[chaos] {line}", file=sys.__stderr__, flush=True)


# --- (a) the facade SIGKILLed during a streamed execute ------------------------------------------------


def test_facade_killed_during_a_streamed_execute_keeps_no_half_turn(
    api: client.ApiClient, cluster: E2ECluster, operator: None, model: ScriptedModel, namespace: str,
    facade_port: int, tmp_path: Path,
) -> None:  # fmt: skip
    model.reset()
    bot = deploy_bot(api, namespace, model)
    session = "chaos-session"
    expected: list[tuple[str, str]] = []
    tried = recovered = 0
    with (
        facade_process(facade_port, tmp_path, cluster.kubeconfig) as facade,
        httpx.Client(base_url=facade.url, timeout=60) as http,
    ):
        model.script(Reply(text="first answer"))
        answered(http, bot, {"message": "first", "session_id": session, "metadata": {"user_id": "u1"}})
        expected += [("user", "first"), ("assistant", "first answer")]
        for i in range(KILL_ROUNDS):
            tried += 1
            model.script(Reply(text=f"never delivered {i}", delay=120))  # the turn is in flight when killed
            started = threading.Event()
            outcome: dict[str, Any] = {}

            def stream(i: int = i, started: threading.Event = started, outcome: dict[str, Any] = outcome) -> None:
                body = {"message": f"killed {i}", "session_id": session, "metadata": {"user_id": "u1"}, "stream": True}
                try:
                    with http.stream("POST", bot.execute, headers=bot.headers, json=body) as resp:
                        outcome["status"] = resp.status_code
                        for line in resp.iter_lines():
                            if line.startswith("event: "):
                                outcome.setdefault("events", []).append(line[7:])
                                started.set()
                except httpx.HTTPError as exc:
                    outcome["error"] = type(exc).__name__
                finally:
                    started.set()

            asked = len(model.requests)
            reader = threading.Thread(target=stream, daemon=True)
            reader.start()
            assert started.wait(60), "the streamed call never started"
            assert outcome.get("status") == 200, outcome
            assert outcome.get("events", [])[:1] == ["agent"], outcome  # the turn holds the session now
            # the kill lands while the model holds the call (the "agent" event comes before the model call is sent:
            # killed earlier, the 120 s reply would stay scripted and answer the next turn)
            wait_for(lambda asked=asked: len(model.requests) > asked, timeout=30, what="the streamed turn's model call")
            facade.kill()
            reader.join(30)
            assert "error" in outcome or "done" not in outcome.get("events", []), outcome  # cut, not answered
            assert stored(tmp_path / "model-store" / "conversations" / "dockyard.db", session) == expected

            facade.start()  # a new facade process on the same database file
            model.script(Reply(text=f"answer {i}"))
            reply = answered(http, bot, {"message": f"after {i}", "session_id": session, "metadata": {"user_id": "u1"}})
            assert reply["response"] == f"answer {i}"
            assert reply["session_id"] == session
            # the model saw the conversation without the killed turn
            sent = [(m["role"], m["content"]) for m in model.bodies()[-1]["messages"] if m["role"] != "system"]
            assert sent == [*expected, ("user", f"after {i}")]
            expected += [("user", f"after {i}"), ("assistant", f"answer {i}")]
            recovered += 1
        facade.stop()
    messages = stored(tmp_path / "model-store" / "conversations" / "dockyard.db", session)
    lost = len(expected) - len([m for m in messages if m in expected])
    report(f"facade SIGKILL during a streamed execute: tried {tried}, recovered {recovered}, lost {lost}, "
          f"half turns stored {sum(1 for _, c in messages if c.startswith('killed'))}")  # fmt: skip
    assert messages == expected  # every answered turn, in order, once; nothing of a killed one
    assert (tried, recovered, lost) == (KILL_ROUNDS, KILL_ROUNDS, 0)


# --- (b) PostgreSQL stopped --------------------------------------------------------------------------


@pytest.fixture
def pg() -> Iterator[Postgres]:
    with postgres_server() as server:
        yield server


def test_postgres_stopped_execute_answers_503_public_api_works_and_it_recovers_without_restart(
    api: client.ApiClient, cluster: E2ECluster, operator: None, model: ScriptedModel, namespace: str,
    facade_port: int, tmp_path: Path, pg: Postgres,
) -> None:  # fmt: skip
    import asyncio

    database = asyncio.run(pg.create_database("chaos"))
    model.reset()
    bot = deploy_bot(api, namespace, model)
    session = {"session_id": "pg-session", "metadata": {"user_id": "u1"}}
    answered_turns: list[str] = []
    with facade_process(facade_port, tmp_path, cluster.kubeconfig, database_url=pg.url(database)) as facade, \
            httpx.Client(base_url=facade.url, timeout=60) as http:  # fmt: skip
        model.script(Reply(text="before the outage"))
        answered(http, bot, {"message": "m0", **session})
        answered_turns.append("m0")

        pg.stop()
        outage_503 = deploys_ok = 0
        deploy = f"/e/{bot.namespace}/{bot.environment}/api/public/tools/weather-1.0.0/deploy"
        for i in range(OUTAGE_CALLS):
            started = time.monotonic()
            resp = http.post(bot.execute, headers=bot.headers, json={"message": f"outage {i}", **session})
            took = time.monotonic() - started
            assert resp.status_code == 503, resp.text
            error = resp.json()["error"]
            assert error["code"] == "database_unavailable", error
            assert "the conversation database is unavailable: " in error["message"], error
            assert resp.headers.get("Retry-After"), resp.headers
            assert took < 15, f"an answer within its deadline, not a hang ({took:.1f}s)"
            outage_503 += 1
            # the public deploy API does not need the conversation database
            job = http.post(deploy, headers={"x-api-key": bot.key}, json={"isAsync": True})
            assert job.status_code in (200, 201, 202), job.text
            status_id = job.json().get("dockStatusId") or job.json().get("dock-statusId")
            lookup = http.get(f"/e/{bot.namespace}/{bot.environment}/api/public/dock-status/{status_id}",
                              headers={"x-api-key": bot.key})  # fmt: skip
            assert lookup.status_code == 200, lookup.text
            deploys_ok += 1

        pg.start()  # the same facade process: its pool reconnects
        restarts_before = facade.starts
        recovered = 0
        for i in range(OUTAGE_CALLS):
            model.script(Reply(text=f"after the outage {i}"))
            reply = answered(http, bot, {"message": f"after {i}", **session})
            assert reply["response"] == f"after the outage {i}"
            answered_turns.append(f"after {i}")
            recovered += 1
        assert facade.starts == restarts_before  # recovery without a restart

        sent = [m["content"] for m in model.bodies()[-1]["messages"] if m["role"] == "user"]
        assert sent == answered_turns  # the history: every answered turn once, nothing of the outage
        report(f"PostgreSQL stopped: execute calls during the outage {OUTAGE_CALLS} (503: {outage_503}), "
              f"public deploy calls {OUTAGE_CALLS} (ok: {deploys_ok}), recovered {recovered}, lost 0")  # fmt: skip
        assert (outage_503, deploys_ok, recovered) == (OUTAGE_CALLS, OUTAGE_CALLS, OUTAGE_CALLS)
