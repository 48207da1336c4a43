"""The tiny real model on llama.cpp's server (no cluster): it loads fast, answers chat completions
with ``usage``, and its forced or automatic tool calls are valid JSON (grammar-constrained sampling)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dockyard_localcluster.tinymodel import LORA_BASE, SENTENCES, sha256_of, tiny_lora_tar, write_tiny_gguf
from tests.support.engines import CLOCK_TOOL, llama_server, tiny_gguf


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_gguf(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def server(model: Path) -> Iterator[str]:
    with llama_server(model) as url:
        yield url


def test_the_model_is_small_deterministic_and_a_gguf(tmp_path: Path, model: Path) -> None:
    assert model.read_bytes()[:4] == b"GGUF"
    assert model.stat().st_size < 1024 * 1024
    again = write_tiny_gguf(tmp_path / "again.gguf")
    assert sha256_of(again) == sha256_of(model)


def test_the_server_loads_it_in_well_under_a_second(model: Path) -> None:
    start = time.monotonic()
    with llama_server(model, log=model.with_name("timing.log")):
        elapsed = time.monotonic() - start
    # the whole server process (Python start-up included) is up within a few seconds; the model load
    # itself is reported by llama.cpp in its log
    assert elapsed < 30, elapsed


def test_a_chat_completion_answers_with_usage(server: str) -> None:
    resp = httpx.post(
        f"{server}/v1/chat/completions",
        json={
            "model": "tiny",
            "messages": [{"role": "user", "content": "Hello, who are you?"}],
            "max_tokens": 24,
            "temperature": 0,
        },
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    text = body["choices"][0]["message"]["content"]
    assert text.strip()
    assert any(sentence.split()[0] in text for sentence in SENTENCES), text
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0
    assert 0 < usage["completion_tokens"] <= 24
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


@pytest.mark.parametrize("choice", [{"type": "function", "function": {"name": "clock"}}, "auto"])
def test_tool_calls_come_back_as_valid_json(server: str, choice: object) -> None:
    messages = [
        {"role": "system", "content": "You tell the time."},
        {"role": "user", "content": "What time is it in Paris?"},
    ]
    resp = httpx.post(
        f"{server}/v1/chat/completions",
        json={"model": "tiny", "messages": messages, "tools": [CLOCK_TOOL], "tool_choice": choice, "max_tokens": 64},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    message = resp.json()["choices"][0]["message"]
    [call] = message["tool_calls"]
    assert call["function"]["name"] == "clock"
    arguments = json.loads(call["function"]["arguments"])
    assert arguments["timezone"] in CLOCK_TOOL["function"]["parameters"]["properties"]["timezone"]["enum"]  # type: ignore[index]


def test_a_tool_result_turn_is_accepted_with_empty_assistant_content(server: str) -> None:
    """llama-cpp-python refuses an assistant tool-call message whose content is null: send ""."""
    call = {"id": "call_1", "type": "function", "function": {"name": "clock", "arguments": '{"timezone": "UTC"}'}}
    messages = [
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"time": "2026-11-23T10:00:00+00:00"}'},
    ]
    resp = httpx.post(
        f"{server}/v1/chat/completions",
        json={"model": "tiny", "messages": messages, "max_tokens": 16, "temperature": 0},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["completion_tokens"] > 0


def test_the_tiny_lora_is_a_tar_of_adapter_config_and_a_gguf_lora(tmp_path: Path) -> None:
    """``python -m dockyard_localcluster tinylora``: what the README's adapter example imports."""
    out = tmp_path / "tiny-lora.tar"
    done = subprocess.run(
        [sys.executable, "-m", "dockyard_localcluster", "tinylora", "--output", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with tarfile.open(out) as tar:
        assert tar.getnames() == ["adapter_config.json", "tiny-lora.gguf"]
        config = json.loads(tar.extractfile("adapter_config.json").read())  # type: ignore[union-attr]
        lora = tar.extractfile("tiny-lora.gguf").read()  # type: ignore[union-attr]
    assert config["base_model_name_or_path"] == LORA_BASE
    assert lora[:4] == b"GGUF"
    with tarfile.open(fileobj=io.BytesIO(tiny_lora_tar(tmp_path / "again"))) as again:
        assert again.extractfile("tiny-lora.gguf").read() == lora  # type: ignore[union-attr]  # seeded
