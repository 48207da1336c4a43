"""Dockyard's CTranslate2 server as a real process on loopback, serving a tiny random-weight model built
here with ``ctranslate2.specs`` and a tokenizer trained here (tests/support/ct2_model.py): no torch, no hub.

Expected outputs come from calling ``ctranslate2.Generator.generate_batch`` directly on the same model
(greedy decoding is deterministic), so the server is checked against the library, not against itself.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ctranslate2
import httpx
import pytest

from tests.support.ct2_model import TinyModel, build

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RunningServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def metric(self, name: str) -> float:
        text = httpx.get(f"{self.url}/metrics").text
        match = re.search(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", text, re.M)
        assert match, f"{name} not in /metrics:\n{text}"
        return float(match.group(1))


def start_server(model_dir: Path, log: Path, *args: str) -> RunningServer:
    port = free_port()
    cmd = [sys.executable, "-m", "dockyard_ct2", "--model-dir", str(model_dir), "--port", str(port), *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return RunningServer(url, proc, log)
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"/health did not answer within 60 s:\n{log.read_text()}")


def stop_server(server: RunningServer) -> None:
    server.process.terminate()
    rc = server.process.wait(timeout=30)
    # uvicorn shuts down gracefully, then re-raises the signal it caught (so -SIGTERM, not a crash)
    assert rc in (0, -15), f"the server exited with {rc}:\n{server.log.read_text()}"
    assert "Application shutdown complete" in server.log.read_text()
    assert "Traceback" not in server.log.read_text(), server.log.read_text()


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    return build(tmp_path_factory.mktemp("ct2") / "tiny-chat", chat_template=CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def chatml_model(tmp_path_factory: pytest.TempPathFactory) -> TinyModel:
    return build(tmp_path_factory.mktemp("ct2") / "tiny-chatml", seed=1)


@pytest.fixture(scope="module")
def server(model: TinyModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log = tmp_path_factory.mktemp("logs") / "server.log"
    running = start_server(
        model.path, log, "--served-model-name", "tiny", "--compute-type", "int8_float16", "--max-batch-size", "4"
    )
    yield running
    stop_server(running)


@pytest.fixture(scope="module")
def batching_server(chatml_model: TinyModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """Batches of at most 4 that wait up to 2 s to fill: concurrent requests batch deterministically."""
    tmp = tmp_path_factory.mktemp("batching")
    sampling = tmp / "sampling.json"
    sampling.write_text(json.dumps({"temperature": 0, "top_p": 1.0, "top_k": 0, "max_tokens": 6}))
    running = start_server(
        chatml_model.path,
        tmp / "server.log",
        "--max-batch-size=4",
        "--batch-wait-ms=2000",
        f"--sampling-config={sampling}",
    )
    yield running
    stop_server(running)


@pytest.fixture(scope="module")
def generator(model: TinyModel) -> Iterator[Any]:
    gen = ctranslate2.Generator(str(model.path), device="cpu", compute_type="int8_float32")
    yield gen
    del gen  # before interpreter shutdown: CTranslate2 aborts when torn down during finalisation


def direct(generator: Any, model: TinyModel, ids: list[int], max_tokens: int) -> list[int]:
    """Greedy continuation of ``ids`` straight from ctranslate2 (no server), ending at </s>."""
    vocab = [model.tokenizer.id_to_token(i) for i in range(model.vocab_size)]
    (result,) = generator.generate_batch(
        [[vocab[i] for i in ids]],
        max_length=max_tokens,
        sampling_topk=1,
        include_prompt_in_result=False,
        end_token=[model.tokenizer.token_to_id("</s>")],
    )
    return list(result.sequences_ids[0])


def post(server: RunningServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


def sse_events(resp: httpx.Response) -> list[Any]:
    assert resp.headers["content-type"].startswith("text/event-stream")
    events: list[Any] = []
    for block in resp.text.split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            payload = block[len("data: ") :]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def assert_error(resp: httpx.Response, status: int, code: str, param: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = resp.json()["error"]
    assert set(error) >= {"code", "message", "details"}
    assert error["code"] == code
    assert error["message"]
    if param is not None:
        assert error["param"] == param
    return error


# --- health, models, metrics -------------------------------------------------------------------------


def test_health_reports_the_cpu_fallback_of_int8_float16(server: RunningServer) -> None:
    body = httpx.get(f"{server.url}/health").json()
    assert body == {
        "status": "ok",
        "model": "tiny",
        "device": "cpu",
        "compute_type": "int8_float32",  # int8_float16 needs a GPU: the closest CPU type
        "max_batch_size": 4,
    }


def test_models_lists_the_served_name(server: RunningServer) -> None:
    body = httpx.get(f"{server.url}/v1/models").json()
    assert body["object"] == "list"
    (entry,) = body["data"]
    assert entry["id"] == "tiny"
    assert entry["object"] == "model"
    assert entry["max_model_len"] == 4096


def test_metrics_carry_the_load_gauges_the_autoscaler_reads(server: RunningServer) -> None:
    text = httpx.get(f"{server.url}/metrics").text
    assert 'vllm:num_requests_running{model_name="tiny"} 0' in text
    assert 'vllm:num_requests_waiting{model_name="tiny"} 0' in text
    assert "dockyard_ct2_generate_calls_total" in text


# --- completions --------------------------------------------------------------------------------------


def test_completion_equals_ctranslate2_greedy_output(server: RunningServer, model: TinyModel, generator: Any) -> None:
    prompt = "the quick brown fox"
    ids = model.tokenizer.encode(prompt).ids
    expected = direct(generator, model, ids, 12)
    resp = post(server, "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": 12, "temperature": 0})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["object"] == "text_completion"
    assert body["model"] == "tiny"
    assert body["id"].startswith("cmpl-")
    (choice,) = body["choices"]
    assert choice["text"] == model.tokenizer.decode(expected)
    assert choice["finish_reason"] == ("length" if len(expected) == 12 else "stop")
    assert body["usage"] == {
        "prompt_tokens": len(ids),
        "completion_tokens": len(expected),
        "total_tokens": len(ids) + len(expected),
    }


@pytest.mark.parametrize("max_tokens", [1, 5, 17])
def test_max_tokens_bounds_the_completion(server: RunningServer, max_tokens: int) -> None:
    body = {"prompt": "hello world", "max_tokens": max_tokens, "min_tokens": max_tokens, "temperature": 0}
    resp = post(server, "/v1/completions", body).json()
    assert resp["usage"]["completion_tokens"] == max_tokens  # min_tokens keeps </s> away
    assert resp["choices"][0]["finish_reason"] == "length"


def test_completion_default_max_tokens_is_16(server: RunningServer) -> None:
    resp = post(server, "/v1/completions", {"prompt": "hello", "min_tokens": 16, "temperature": 0}).json()
    assert resp["usage"]["completion_tokens"] == 16


def test_stop_sequence_cuts_the_text(server: RunningServer) -> None:
    base = {"prompt": "hello world", "max_tokens": 20, "min_tokens": 20, "temperature": 0}
    full = post(server, "/v1/completions", base).json()["choices"][0]["text"]
    stop = full[len(full) // 2 : len(full) // 2 + 2]
    assert len(stop) == 2
    resp = post(server, "/v1/completions", {**base, "stop": [stop, "\x00never"]}).json()
    (choice,) = resp["choices"]
    assert choice["text"] == full[: full.index(stop)]
    assert choice["finish_reason"] == "stop"
    assert resp["usage"]["completion_tokens"] < 20  # generation stopped early, not cut afterwards


def test_streamed_completion_with_stop_equals_the_plain_one(server: RunningServer) -> None:
    base = {"prompt": "Dockyard deploys", "max_tokens": 20, "min_tokens": 20, "temperature": 0}
    full = post(server, "/v1/completions", base).json()["choices"][0]["text"]
    stop = full[len(full) // 3 : len(full) // 3 + 3]
    plain = post(server, "/v1/completions", {**base, "stop": stop}).json()
    assert plain["choices"][0]["text"] == full[: full.index(stop)]
    with httpx.Client(timeout=60) as client:
        resp = client.post(f"{server.url}/v1/completions", json={**base, "stop": stop, "stream": True})
    events = sse_events(resp)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == plain["choices"][0]["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert not any(stop in c["choices"][0]["text"] for c in chunks)


def test_prompt_list_and_n_give_one_choice_each(server: RunningServer, model: TinyModel) -> None:
    prompts = ["hello world", "the lazy dog"]
    resp = post(server, "/v1/completions", {"prompt": prompts, "n": 2, "max_tokens": 4, "temperature": 0}).json()
    assert [c["index"] for c in resp["choices"]] == [0, 1, 2, 3]
    assert resp["choices"][0]["text"] == resp["choices"][1]["text"]  # greedy: the same prompt, the same text
    prompt_tokens = sum(len(model.tokenizer.encode(p).ids) for p in prompts)
    assert resp["usage"]["prompt_tokens"] == prompt_tokens


def test_token_id_prompt(server: RunningServer, model: TinyModel) -> None:
    ids = model.tokenizer.encode("hello world").ids
    by_ids = post(server, "/v1/completions", {"prompt": ids, "max_tokens": 6, "temperature": 0}).json()
    by_text = post(server, "/v1/completions", {"prompt": "hello world", "max_tokens": 6, "temperature": 0}).json()
    assert by_ids["choices"][0]["text"] == by_text["choices"][0]["text"]


def test_sampling_parameters_are_accepted(server: RunningServer) -> None:
    body = {"prompt": "hello", "max_tokens": 8, "temperature": 1.3, "top_p": 0.8, "top_k": 20, "seed": 3}
    resp = post(server, "/v1/completions", body)
    assert resp.status_code == 200, resp.text
    assert 1 <= resp.json()["usage"]["completion_tokens"] <= 8


def test_top_k_one_is_greedy(server: RunningServer) -> None:
    greedy = post(server, "/v1/completions", {"prompt": "hello", "max_tokens": 8, "temperature": 0}).json()
    top1 = post(server, "/v1/completions", {"prompt": "hello", "max_tokens": 8, "temperature": 1.5, "top_k": 1}).json()
    assert top1["choices"][0]["text"] == greedy["choices"][0]["text"]


# --- chat ---------------------------------------------------------------------------------------------


def test_chat_uses_the_models_template(server: RunningServer, model: TinyModel, generator: Any) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}]
    rendered = "<s>[system] be brief\n[user] hello world\n[assistant] "
    ids = model.tokenizer.encode(rendered, add_special_tokens=False).ids
    expected = direct(generator, model, ids, 10)
    body = {"model": "tiny", "messages": messages, "max_tokens": 10, "temperature": 0}
    resp = post(server, "/v1/chat/completions", body)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    (choice,) = body["choices"]
    assert choice["message"] == {"role": "assistant", "content": model.tokenizer.decode(expected)}
    assert body["usage"]["prompt_tokens"] == len(ids)
    assert body["usage"]["completion_tokens"] == len(expected)


def test_chat_content_parts_and_max_completion_tokens(server: RunningServer) -> None:
    plain = {"messages": [{"role": "user", "content": "hello world"}], "max_tokens": 5, "temperature": 0}
    parts = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": t} for t in ("hello ", "world")]}],
        "max_completion_tokens": 5,
        "temperature": 0,
    }
    a = post(server, "/v1/chat/completions", plain).json()
    b = post(server, "/v1/chat/completions", parts).json()
    assert a["choices"][0]["message"] == b["choices"][0]["message"]
    assert a["usage"] == b["usage"]


def test_chat_stream_equals_the_plain_answer(server: RunningServer) -> None:
    body = {"messages": [{"role": "user", "content": "how are you"}], "max_tokens": 12, "temperature": 0}
    plain = post(server, "/v1/chat/completions", body).json()
    with httpx.Client(timeout=60) as client:
        resp = client.post(
            f"{server.url}/v1/chat/completions",
            json={**body, "stream": True, "stream_options": {"include_usage": True}},
        )
    assert resp.headers["x-accel-buffering"] == "no"
    events = sse_events(resp)
    assert events[-1] == "[DONE]"
    first, *middle, last_choice, usage = events[:-1]
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in middle)
    assert text == plain["choices"][0]["message"]["content"]
    assert last_choice["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    assert usage["choices"] == []
    assert usage["usage"] == plain["usage"]
    assert len({e["id"] for e in events[:-1]}) == 1


def test_chatml_is_the_default_template(batching_server: RunningServer, chatml_model: TinyModel) -> None:
    messages = [{"role": "user", "content": "hi"}]
    rendered = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    resp = post(batching_server, "/v1/chat/completions", {"messages": messages}).json()
    assert resp["usage"]["prompt_tokens"] == len(chatml_model.tokenizer.encode(rendered, add_special_tokens=False).ids)
    assert resp["usage"]["completion_tokens"] <= 6  # max_tokens from --sampling-config


def test_sampling_config_gives_the_defaults(batching_server: RunningServer) -> None:
    """temperature 0 and max_tokens 6 come from --sampling-config: two runs agree, at most 6 tokens."""
    body = {"prompt": "hello world", "min_tokens": 6}
    a = post(batching_server, "/v1/completions", body).json()
    b = post(batching_server, "/v1/completions", body).json()
    assert a["usage"]["completion_tokens"] == 6
    assert a["choices"][0]["finish_reason"] == "length"
    assert a["choices"][0]["text"] == b["choices"][0]["text"]


# --- batching -----------------------------------------------------------------------------------------


def concurrently(server: RunningServer, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(lambda b: post(server, "/v1/completions", b), bodies))


def warm(server: RunningServer, clients: int) -> None:
    """``clients`` concurrent requests long enough (1,000 tokens) to be in the server together."""
    bodies = [{"prompt": f"hi {i}", "max_tokens": 1000, "min_tokens": 1000} for i in range(clients)]
    assert all(r.status_code == 200 for r in concurrently(server, bodies))


def test_a_lone_request_does_not_wait_for_the_window(batching_server: RunningServer) -> None:
    """The batching server's window is 2 s; a single client's requests start at once all the same."""
    body = {"prompt": "hello", "max_tokens": 2}
    for _ in range(2):  # after these, the recent load is one sequence (whatever ran before)
        post(batching_server, "/v1/completions", body)
    started = time.perf_counter()
    for _ in range(3):
        assert post(batching_server, "/v1/completions", body).status_code == 200
    assert time.perf_counter() - started < 1.5  # one 2 s window would exceed it


def test_concurrent_requests_share_one_generate_call(batching_server: RunningServer) -> None:
    bodies = [{"prompt": p, "max_tokens": 5} for p in ("hello", "the quick brown fox", "how are you", "Dockyard")]
    single = [post(batching_server, "/v1/completions", b).json()["choices"][0]["text"] for b in bodies[:1]]
    # the first round after a lone request may start its first request alone (the server cannot know
    # that three more follow); long answers keep it running while the others arrive, and the load the
    # server saw makes the next round wait for all four
    warm(batching_server, 4)
    calls = batching_server.metric("dockyard_ct2_generate_calls_total")
    responses = concurrently(batching_server, bodies)
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    assert batching_server.metric("dockyard_ct2_generate_calls_total") == calls + 1
    assert batching_server.metric("dockyard_ct2_largest_batch") == 4
    # batched with others (padding, other lengths), a prompt still gets its own answer
    assert responses[0].json()["choices"][0]["text"] == single[0]


def test_more_requests_than_the_batch_size_take_more_calls(batching_server: RunningServer) -> None:
    warm(batching_server, 4)
    calls = batching_server.metric("dockyard_ct2_generate_calls_total")
    responses = concurrently(batching_server, [{"prompt": f"hello {i}", "max_tokens": 3} for i in range(8)])
    assert all(r.status_code == 200 for r in responses)
    assert batching_server.metric("dockyard_ct2_generate_calls_total") == calls + 2


def test_different_sampling_settings_are_not_batched_together(batching_server: RunningServer) -> None:
    calls = batching_server.metric("dockyard_ct2_generate_calls_total")
    bodies = [{"prompt": "hello", "max_tokens": 3, "temperature": t} for t in (0, 0, 0, 0.7)]
    responses = concurrently(batching_server, bodies)
    assert all(r.status_code == 200 for r in responses)
    assert batching_server.metric("dockyard_ct2_generate_calls_total") == calls + 2


def test_a_short_request_in_a_long_batch_stops_at_its_own_limit(batching_server: RunningServer) -> None:
    bodies = [{"prompt": "hello", "max_tokens": m, "min_tokens": 0} for m in (2, 40, 40, 40)]
    responses = concurrently(batching_server, bodies)
    assert responses[0].json()["usage"]["completion_tokens"] <= 2
    assert all(r.json()["usage"]["completion_tokens"] <= 40 for r in responses)


# --- bad input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        pytest.param("/v1/completions", {"max_tokens": 3}, "prompt", id="no-prompt"),
        pytest.param("/v1/completions", {"prompt": "x", "temperature": 3}, "temperature", id="temperature"),
        pytest.param("/v1/completions", {"prompt": "x", "top_p": 0}, "top_p", id="top-p"),
        pytest.param("/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens", id="max-tokens-0"),
        pytest.param("/v1/completions", {"prompt": "x", "max_tokens": "many"}, "max_tokens", id="max-tokens-str"),
        pytest.param("/v1/completions", {"prompt": "x", "stop": ["a"] * 17}, "stop", id="too-many-stops"),
        pytest.param("/v1/completions", {"prompt": ""}, "prompt", id="empty-prompt"),
        pytest.param("/v1/completions", {"prompt": [10**9]}, "prompt", id="token-out-of-vocab"),
        pytest.param("/v1/completions", {"prompt": "x", "n": 5}, "n", id="n-over-batch"),
        pytest.param("/v1/completions", {"prompt": "x", "logprobs": 2}, "logprobs", id="logprobs"),
        pytest.param("/v1/completions", {"prompt": "x", "echo": True}, "echo", id="echo"),
        pytest.param("/v1/chat/completions", {"messages": []}, "messages", id="no-messages"),
        pytest.param("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, None, id="role"),
        pytest.param(
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "messages[0].content",
            id="image-part",
        ),
    ],
)
def test_bad_input_is_a_400_json_error(server: RunningServer, path: str, body: dict[str, Any], param: str) -> None:
    error = assert_error(post(server, path, body), 400, "invalid_request")
    if param is not None:
        assert error["param"] == param


def test_context_length_is_enforced(server: RunningServer) -> None:
    error = assert_error(
        post(server, "/v1/completions", {"prompt": "hello", "max_tokens": 5000}),
        400,
        "context_length_exceeded",
        "max_tokens",
    )
    assert "4096" in error["message"]


def test_invalid_json_is_a_400(server: RunningServer) -> None:
    headers = {"content-type": "application/json"}
    resp = httpx.post(f"{server.url}/v1/completions", content=b"{not json", headers=headers)
    assert assert_error(resp, 400, "invalid_request")["message"] == "the body is not valid JSON"


def test_unknown_model_is_a_404(server: RunningServer) -> None:
    error = assert_error(post(server, "/v1/completions", {"model": "gpt-4", "prompt": "x"}), 404, "model_not_found")
    assert "'tiny'" in error["message"]


def test_unknown_path_and_method_are_json(server: RunningServer) -> None:
    assert_error(httpx.get(f"{server.url}/v1/nothing"), 404, "not_found")
    assert_error(httpx.get(f"{server.url}/v1/completions"), 405, "method_not_allowed")


def test_template_error_is_a_400_and_tools_reach_the_template(tmp_path: Path) -> None:
    template = (
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first message must be user') }}{% endif %}"
        "{% for t in tools or [] %}{{ t['function']['name'] }} {% endfor %}{{ messages[0]['content'] }}"
    )
    model = build(tmp_path / "strict", chat_template=template)
    running = start_server(model.path, tmp_path / "server.log")
    try:
        resp = post(running, "/v1/chat/completions", {"messages": [{"role": "assistant", "content": "x"}]})
        assert assert_error(resp, 400, "invalid_request", "messages")["message"] == "first message must be user"
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
        body = {"messages": [{"role": "user", "content": "hello"}], "tools": tools, "max_tokens": 2}
        usage = post(running, "/v1/chat/completions", body).json()["usage"]
        expected = model.tokenizer.encode("get_weather hello", add_special_tokens=False).ids
        assert usage["prompt_tokens"] == len(expected)
    finally:
        stop_server(running)


# --- the command line ---------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dockyard_ct2", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_missing_model_dir_fails_with_a_message(tmp_path: Path) -> None:
    proc = run_cli("--model-dir", str(tmp_path / "absent"))
    assert proc.returncode != 0
    assert "not a directory" in proc.stderr


def test_a_directory_without_a_model_fails_before_listening(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    proc = run_cli("--model-dir", str(tmp_path), "--port", str(free_port()))
    assert proc.returncode != 0
    assert "tokenizer.json cannot be loaded" in proc.stderr or "vocabulary" in proc.stderr


@pytest.mark.skipif(ctranslate2.get_cuda_device_count() > 0, reason="this machine has a GPU")
def test_cuda_without_a_gpu_fails_with_a_message(model: TinyModel) -> None:
    proc = run_cli("--model-dir", str(model.path), "--device", "cuda", "--port", str(free_port()))
    assert proc.returncode != 0
    assert "CTranslate2 sees no CUDA device" in proc.stderr


def test_help_lists_the_stable_flags() -> None:
    out = run_cli("--help").stdout
    flags = "--model-dir --served-model-name --host --port --device --device-count --compute-type --max-batch-size"
    for flag in [*flags.split(), "--batch-wait-ms", "--max-model-len", "--sampling-config", "--chat-template"]:
        assert flag in out, flag


def test_the_package_imports_neither_the_facade_nor_the_operator() -> None:
    code = (
        "import sys, dockyard_ct2.__main__, dockyard_ct2.server; "
        "print(sorted(m for m in sys.modules if m.startswith(('dockyard_api', 'dockyard_operator', 'kopf'))))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert proc.stdout.strip() == "[]"


# --- load: a full queue, a client that goes away ---------------------------------------------------------


def wait_metric(server: RunningServer, name: str, value: float, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while server.metric(name) != value:
        assert time.monotonic() < deadline, f"{name} did not reach {value}"
        time.sleep(0.05)


def test_a_full_queue_is_a_503_and_a_gone_client_stops_its_sequence(model: TinyModel, tmp_path: Path) -> None:
    args = ("--max-batch-size=1", "--max-queue=1", "--max-model-len=200000")
    running = start_server(model.path, tmp_path / "server.log", *args)
    long = {"prompt": "hello", "max_tokens": 150_000, "min_tokens": 150_000, "temperature": 0}  # minutes of work
    try:
        with httpx.Client(timeout=60) as client, ThreadPoolExecutor(max_workers=1) as pool:
            with client.stream("POST", f"{running.url}/v1/completions", json={**long, "stream": True}) as first:
                assert first.status_code == 200
                lines = first.iter_lines()  # kept: a dropped iterator closes the response
                next(lines)  # generating
                wait_metric(running, "vllm:num_requests_running", 1)
                waiting = pool.submit(post, running, "/v1/completions", {"prompt": "hi", "max_tokens": 2})
                wait_metric(running, "vllm:num_requests_waiting", 1)
                for stream in (False, True):
                    resp = post(running, "/v1/completions", {"prompt": "hi", "max_tokens": 2, "stream": stream})
                    assert_error(resp, 503, "server_busy")
                    assert resp.headers["retry-after"] == "1"
            # the streaming client went away: its sequence stops long before 150,000 tokens
            assert waiting.result().status_code == 200
            wait_metric(running, "vllm:num_requests_running", 0)
            assert running.metric("dockyard_ct2_generation_tokens_total") < 150_000
            # stopping the server ends a long generation: in-flight requests get uvicorn's 10 s grace
            # period, then a 503 (and the generation stops)
            busy = pool.submit(post, running, "/v1/completions", long)
            wait_metric(running, "vllm:num_requests_running", 1)
            started = time.monotonic()
            stop_server(running)
            assert time.monotonic() - started < 20
            assert_error(busy.result(), 503, "shutting_down")
    finally:
        if running.process.poll() is None:
            stop_server(running)
