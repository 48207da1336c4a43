"""The Python client and the dockyard command without a cluster: typed errors, both spellings of the job
id, configuration, the SSE parser, streamed deployed-app calls against a real local HTTP server that
speaks Contract 2, the CLI's help and docs/cli.md."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from dockyard_client import AsyncDockyardClient, DockyardClient
from dockyard_client._base import split_url
from dockyard_client.cli.app import app
from dockyard_client.cli.docs import render
from dockyard_client.cli.exits import EXIT_CODES
from dockyard_client.config import kubeconfig_token, management_token, resolve
from dockyard_client.errors import (
    ApiError,
    ConfigurationError,
    Conflict,
    Forbidden,
    Gone,
    InvalidRequest,
    NotFound,
    RateLimited,
    ServerError,
    StreamError,
    Unauthenticated,
    error_for,
)
from dockyard_client.models import JobRecord, SessionState
from dockyard_client.sse import SSEParser
from dockyard_client.upload import RateLimit, detect_extension
from tests.support.sse_server import KEY, sse_server

ROOT = Path(__file__).resolve().parents[3]


# --- errors and answers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [(401, Unauthenticated), (403, Forbidden), (404, NotFound), (409, Conflict), (410, Gone), (422, InvalidRequest),
     (429, RateLimited), (500, ServerError), (502, ServerError), (503, ServerError), (418, ApiError)],
)  # fmt: skip
def test_errors_are_typed_and_carry_the_json_body(status: int, kind: type[ApiError]) -> None:
    body = {"error": {"code": "some_code", "message": "what went wrong", "details": [{"field": "body.name"}]}}
    error = error_for(status, body, httpx.Headers({"Retry-After": "3"}))
    assert type(error) is kind
    assert (error.status_code, error.code, error.message, error.details, error.body) == (
        status, "some_code", "what went wrong", [{"field": "body.name"}], body,
    )  # fmt: skip
    if isinstance(error, RateLimited):
        assert error.retry_after == 3.0


def test_an_error_without_the_json_shape_still_raises() -> None:
    error = error_for(502, "<html>Bad Gateway</html>")
    assert isinstance(error, ServerError)
    assert error.code == "http_502"
    assert "Bad Gateway" in error.message


@pytest.mark.parametrize("key", ["dockStatusId", "dock-statusId"])
def test_job_records_read_both_spellings_of_the_id(key: str) -> None:
    job = JobRecord.model_validate(
        {key: "j-1", "modelId": "m", "jobType": "MODELS", "action": "DEPLOY", "status": "IN_PROGRESS", "extra": 1}
    )
    assert job.dock_status_id == "j-1"
    assert not job.done
    assert job.model_extra == {"extra": 1}
    assert job.as_dict()["dockStatusId"] == job.as_dict()["dock-statusId"] == "j-1"


def test_session_state_lists_every_missing_chunk() -> None:
    state = SessionState.model_validate(
        {"sessionId": "s", "modelId": "m", "state": "open", "fileSize": 10, "totalChunks": 5,
         "receivedChunks": [{"chunkNumber": 0, "size": 2}, {"chunkNumber": 3, "size": 2}], "missingChunks": [1]}
    )  # fmt: skip
    assert state.missing() == [1, 2, 4]


def test_urls_name_the_environment() -> None:
    assert split_url("http://h:8080/") == ("http://h:8080", None, None)
    assert split_url("http://h:8080/e/team/bot-prod") == ("http://h:8080", "team", "bot-prod")
    assert split_url("https://h/prefix/e/team/bot-prod/") == ("https://h/prefix", "team", "bot-prod")
    client = DockyardClient("http://h/e/team/bot-prod", api_key="k")
    assert (client.url, client.namespace, client.environment) == ("http://h", "team", "bot-prod")
    assert client.calls.dock_status("x").path == "/e/team/bot-prod/api/public/dock-status/x"
    client.close()


def test_calls_that_need_missing_configuration_say_so() -> None:
    with DockyardClient("http://127.0.0.1:9") as client:
        with pytest.raises(ConfigurationError, match="namespace and environment"):
            client.dock_status("x")
        with pytest.raises(ConfigurationError, match="namespace"):
            client.list_apps()


def test_file_types_come_from_the_name() -> None:
    assert detect_extension("llama.tar.gz") == "tar.gz"
    assert detect_extension("m.GGUF") == "gguf"
    with pytest.raises(ConfigurationError, match="--extension"):
        detect_extension("weights.dat")


def test_the_rate_limit_spaces_chunks() -> None:
    import threading
    import time

    limit, stop = RateLimit(1_000_000), threading.Event()
    started = time.monotonic()
    for _ in range(5):
        limit.take(100_000, stop)
    assert time.monotonic() - started >= 0.35  # 5 x 100 kB at 1 MB/s: the 5th starts 0.4 s after the 1st


# --- configuration ----------------------------------------------------------------------------------------


def test_flags_beat_variables_beat_the_profile(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text("key-from-file\n")
    config = tmp_path / "config.toml"
    config.write_text(
        'default = "local"\n[profiles.local]\nurl = "http://profile"\nnamespace = "p-ns"\n'
        f'environment = "p-env"\napi_key_file = "{key_file}"\n[profiles.other]\nurl = "http://other"\n'
    )
    env = {"DOCKYARD_CONFIG": str(config), "DOCKYARD_NAMESPACE": "v-ns"}
    s = resolve(env=env)
    assert (s.url, s.namespace, s.environment, s.api_key, s.profile) == (
        "http://profile", "v-ns", "p-env", "key-from-file", "local",
    )  # fmt: skip
    s = resolve(url="http://flag", namespace="f-ns", env=env)
    assert (s.url, s.namespace) == ("http://flag", "f-ns")
    assert resolve(profile="other", env=env).url == "http://other"
    with pytest.raises(ConfigurationError, match="no profile 'nope'"):
        resolve(profile="nope", env=env)
    assert resolve(env={"DOCKYARD_CONFIG": str(tmp_path / "absent.toml")}).url == "http://127.0.0.1:8080"


def _kubeconfig(path: Path, user: dict[str, object]) -> Path:
    config = {
        "apiVersion": "v1",
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": "team-a"}}],
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user}],
    }
    path.write_text(json.dumps(config))
    return path


def test_a_token_comes_from_the_kubeconfig(tmp_path: Path) -> None:
    assert kubeconfig_token(str(_kubeconfig(tmp_path / "a", {"token": "t-inline"}))) == ("t-inline", "team-a")
    (tmp_path / "tok").write_text("t-file\n")
    assert kubeconfig_token(str(_kubeconfig(tmp_path / "b", {"tokenFile": str(tmp_path / "tok")})))[0] == "t-file"
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(
        '#!/bin/sh\necho \'{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
        '"status": {"token": "t-exec-\'"$WHO"\'"}}\'\n'
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IEXEC)
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                          "env": [{"name": "WHO", "value": "alice"}]}}  # fmt: skip
    assert kubeconfig_token(str(_kubeconfig(tmp_path / "c", exec_user)))[0] == "t-exec-alice"
    certs = _kubeconfig(tmp_path / "d", {"client-certificate-data": "x", "client-key-data": "y"})
    assert kubeconfig_token(str(certs)) == (None, "team-a")
    settings = resolve(kubeconfig=str(tmp_path / "a"), env={"DOCKYARD_CONFIG": str(tmp_path / "none")})
    assert management_token(settings) == "t-inline"
    assert management_token(resolve(token="t-flag", kubeconfig=str(tmp_path / "a"), env={})) == "t-flag"


# --- server-sent events ----------------------------------------------------------------------------------


def test_the_sse_parser_follows_the_standard() -> None:
    parser = SSEParser()
    lines = [": ping", "", "event: delta", 'data: {"text": "a"}', "", "data: line one", "data: line two", "",
             "id: 7", "event: done", "data:{\"x\": 1}", "retry: 100", "", "data: no blank line at the end"]  # fmt: skip
    events = [e for e in map(parser.feed, lines) if e is not None]
    assert [(e.event, e.data) for e in events] == [
        ("delta", {"text": "a"}),
        ("message", "line one\nline two"),
        ("done", {"x": 1}),
    ]
    assert events[2].id == "7"
    assert parser.comments == 1
    assert parser.close() is None


def test_a_streamed_call_yields_contract_2_events() -> None:
    with sse_server() as (url, recorded), DockyardClient(f"{url}/e/team/demo-draft", api_key=KEY) as client:
        events = list(client.execute_stream("demo", "weather in Oslo?", session_id="session-1", user_id="u1"))
        names = [e.event for e in events]
        assert names[:3] == ["agent", "tool_call", "tool_result"]
        assert names[-1] == "done"
        text = "".join(e.data["text"] for e in events if e.event == "delta")
        done = events[-1].data
        assert text == done["response"] == "echo weather in Oslo? (turn 1)"
        assert done["session_id"] == "session-1"
        assert recorded.bodies[0] == {"message": "weather in Oslo?", "session_id": "session-1", "stream": True,
                                      "metadata": {"user_id": "u1"}}  # fmt: skip
        answer = client.execute("demo", "again", session_id="session-1")
        assert answer.response == "echo again (turn 2)"
        assert (answer.agent, answer.tools_used, answer.tokens.input, answer.tokens.output) == ("triage", ["weather"],
                                                                                             12, 7)  # fmt: skip
        with pytest.raises(StreamError) as failed:
            list(client.execute_stream("broken", "hi"))
        assert failed.value.code == "upstream_error"
        with pytest.raises(NotFound) as missing:
            list(client.execute_stream("missing", "hi"))
        assert missing.value.body["error"]["message"] == "app 'missing' is not deployed in this environment"
        with pytest.raises(RateLimited) as limited:
            client.execute("busy", "hi")
        assert limited.value.retry_after == 7.0
    with (
        sse_server() as (url, _),
        DockyardClient(f"{url}/e/team/demo-draft", api_key="dky_wrong_key") as client,
        pytest.raises(Unauthenticated),
    ):
        client.execute("demo", "hi")


def test_the_async_client_streams_too() -> None:
    async def run(url: str) -> list[str]:
        async with AsyncDockyardClient(url, namespace="team", environment="demo-draft", api_key=KEY) as client:
            names = [e.event async for e in client.execute_stream("demo", "hello")]
            answer = await client.execute("demo", "hello again")
            assert answer.response.startswith("echo hello again")
            with pytest.raises(StreamError):
                _ = [e async for e in client.execute_stream("broken", "hi")]
            return names

    with sse_server() as (url, _):
        names = asyncio.run(run(url))
    assert names[0] == "agent"
    assert names[-1] == "done"


def test_dockyard_chat_streams_an_answer_and_keeps_the_session() -> None:
    with sse_server() as (url, recorded):
        env = {"DOCKYARD_URL": f"{url}/e/team/demo-draft", "DOCKYARD_API_KEY": KEY, "DOCKYARD_CONFIG": "/nonexistent"}
        runner = CliRunner()
        result = runner.invoke(app, ["chat", "demo", "-m", "weather in Oslo?"], env=env)
        assert result.exit_code == 0, result.output
        assert "echo weather in Oslo? (turn 1)" in result.stdout
        assert "weather" in result.stderr  # the tool call is shown
        # interactive: two turns in one session, then /exit
        result = runner.invoke(app, ["chat", "demo"], input="first\nsecond\n/exit\n", env=env)
        assert result.exit_code == 0, result.output
        assert "echo first (turn 1)" in result.stdout
        assert "echo second (turn 2)" in result.stdout
        assert recorded.bodies[-2]["session_id"] is None  # the server made the session ...
        assert recorded.bodies[-1]["session_id"] in recorded.sessions  # ... and the second turn continued it
        result = runner.invoke(app, ["chat", "demo", "-m", "hi", "--json", "--no-stream"], env=env)
        assert json.loads(result.stdout)["response"] == "echo hi (turn 1)"
        result = runner.invoke(app, ["chat", "missing", "-m", "hi"], env=env)
        assert result.exit_code == 4
        assert "not deployed" in result.stderr
        result = runner.invoke(app, ["chat", "busy", "-m", "hi"], env=env)
        assert result.exit_code == 6


def test_unreachable_facade_exits_6_and_missing_configuration_2() -> None:
    runner = CliRunner()
    env = {"DOCKYARD_URL": "http://127.0.0.1:9/e/a/b", "DOCKYARD_API_KEY": "k", "DOCKYARD_CONFIG": "/nonexistent"}
    assert runner.invoke(app, ["status", "job-1"], env=env).exit_code == 6
    env = {"DOCKYARD_URL": "http://127.0.0.1:9", "DOCKYARD_CONFIG": "/nonexistent"}
    result = runner.invoke(app, ["status", "job-1"], env=env)
    assert result.exit_code == 2
    assert "namespace and environment" in result.stderr


# --- help and docs/cli.md ---------------------------------------------------------------------------------


def test_docs_cli_md_is_the_help_of_every_command() -> None:
    """docs/cli.md is generated from --help: regenerate with `python -m dockyard_client.cli.docs docs/cli.md`."""
    assert (ROOT / "docs/cli.md").read_text() == render()


def test_every_command_has_examples_in_its_help() -> None:
    page = render()
    sections = page.split("\n## ")[1:]
    assert len(sections) >= 25
    for section in sections:
        assert "Examples:" in section or "Exit codes:" in section, section.splitlines()[0]
    for code in EXIT_CODES:
        assert f"| {code} |" in page


def test_the_console_script_runs(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "dockyard"
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "dockyard 0.1.0"


def test_the_client_imports_neither_the_facade_nor_the_operator() -> None:
    code = (
        "import sys, dockyard_client, dockyard_client.cli, dockyard_client.upload\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dockyard_api', 'dockyard_operator', 'kopf', "
        "'fastapi', 'kubernetes'))\n"
        "print(bad)\nsys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ})
    assert done.returncode == 0, done.stdout + done.stderr
