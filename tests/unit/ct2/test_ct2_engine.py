"""Pieces of the CTranslate2 server without a process: stop sequences over token boundaries, incremental
decoding of multi-byte characters, the compute-type fallback, the chat template and the config file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from dockyard_ct2.config import SamplingDefaults, parse_args
from dockyard_ct2.engine import resolve_compute_type
from dockyard_ct2.sequence import Sampling, Sequence
from dockyard_ct2.tokenizer import CHATML_TEMPLATE, IncrementalDecoder, ModelDirError, ModelTokenizer
from tests.support.ct2_model import build, train_tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return train_tokenizer()


def run_sequence(
    tok: Tokenizer, ids: list[int], *, stop: list[str], max_tokens: int = 100, stream: bool = False
) -> tuple[Sequence, list[str]]:
    """Feed ``ids`` to a Sequence as the generator's callback would; the deltas it streamed."""
    loop = asyncio.new_event_loop()
    deltas: list[str] = []
    try:
        seq = Sequence(
            prompt_ids=[1],
            max_tokens=max_tokens,
            sampling=Sampling.of(0, 1, 0),
            stop=stop,
            decoder=IncrementalDecoder(lambda i: str(tok.decode(i))),
            end_ids=frozenset({tok.token_to_id("</s>")}),
            loop=loop,
            on_delta=deltas.append if stream else None,
        )
        for n, token in enumerate(ids):
            if seq.on_token(token, is_last=n == len(ids) - 1):
                break
        seq.end_after_generation()
        loop.run_until_complete(asyncio.sleep(0))  # the call_soon_threadsafe callbacks
        return seq, deltas
    finally:
        loop.close()


TEXT = "hello world, how are you today my friend?"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ([], TEXT),
        (["how"], "hello world, "),
        (["o w", "zzz"], "hell"),  # a stop sequence across token boundaries
        (["?"], "hello world, how are you today my friend"),
        (["friend?"], "hello world, how are you today my "),
        (["absent"], TEXT),
    ],
)
def test_stop_sequences(tokenizer: Tokenizer, stop: list[str], expected: str, stream: bool) -> None:
    ids = tokenizer.encode(TEXT).ids
    seq, deltas = run_sequence(tokenizer, ids, stop=stop, stream=stream)
    assert seq.text == expected
    assert seq.finish_reason == ("stop" if expected != TEXT else "length")
    if stream:
        assert "".join(deltas) == expected
        assert not any(s in "".join(deltas) for s in stop)


def test_max_tokens_and_end_token(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode(TEXT).ids
    seq, _ = run_sequence(tokenizer, ids, stop=[], max_tokens=3)
    assert seq.completion_tokens == 3
    assert seq.finish_reason == "length"
    assert seq.text == tokenizer.decode(ids[:3])
    eos = tokenizer.token_to_id("</s>")
    seq, _ = run_sequence(tokenizer, [*ids[:2], eos, *ids[2:]], stop=[])
    assert (seq.finish_reason, seq.completion_tokens, seq.text) == ("stop", 2, tokenizer.decode(ids[:2]))


def test_incremental_decoding_keeps_multibyte_characters_whole(tokenizer: Tokenizer) -> None:
    text = "caf\u00e9 \u65e5\u672c\u8a9e \U0001f600 na\u00efve"
    ids = tokenizer.encode(text).ids
    decoder = IncrementalDecoder(lambda i: str(tokenizer.decode(i)))
    pieces = [decoder.push(i) for i in ids]
    pieces.append(decoder.flush())
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)


def test_cancelled_sequence_stops(tokenizer: Tokenizer) -> None:
    loop = asyncio.new_event_loop()
    try:
        seq = Sequence(
            prompt_ids=[1],
            max_tokens=10,
            sampling=Sampling.of(1, 1, 0),
            stop=[],
            decoder=IncrementalDecoder(lambda i: str(tokenizer.decode(i))),
            end_ids=frozenset(),
            loop=loop,
        )
        assert seq.on_token(100, False) is False
        seq.cancelled = True
        assert seq.on_token(101, False) is True
        assert seq.finish_reason == "cancelled"
    finally:
        loop.close()


def test_sampling_key() -> None:
    assert Sampling.of(0, 0.5, 40) == Sampling(topk=1, topp=1.0, temperature=1.0)  # greedy
    assert Sampling.of(0.7, 0.9, -1) == Sampling(topk=0, topp=0.9, temperature=0.7)  # -1: no top-k
    assert Sampling.of(0.7, 0.9, 40, 5) == Sampling(topk=40, topp=0.9, temperature=0.7, min_tokens=5)


@pytest.mark.parametrize(
    ("requested", "cpu"),
    [
        ("int8_float16", "int8_float32"),
        ("int8_bfloat16", "int8_float32"),
        ("float16", "float32"),
        ("int8", "int8"),
        ("float32", "float32"),
        ("default", "default"),
    ],
)
def test_compute_type_falls_back_on_the_cpu(requested: str, cpu: str) -> None:
    assert resolve_compute_type(requested, "cpu") == cpu


def test_model_tokenizer_reads_the_model_directory(tmp_path: Path) -> None:
    model = build(tmp_path / "m")
    tok = ModelTokenizer(model.path)
    assert tok.chat_template_source == "default ChatML"
    assert tok.end_ids == {model.tokenizer.token_to_id("</s>"), model.tokenizer.token_to_id("<|im_end|>")}
    chatml = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.render_chat([{"role": "user", "content": "hi"}]) == chatml
    (model.path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 8]}))
    named = [{"name": "default", "template": "{{ messages[0]['content'] }}!"}, {"name": "tool_use", "template": "x"}]
    (model.path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>", "chat_template": named}))
    tok = ModelTokenizer(model.path)
    assert tok.chat_template_source == "tokenizer_config.json"
    assert tok.render_chat([{"role": "user", "content": "hi"}]) == "hi!"
    assert tok.end_ids == {model.tokenizer.token_to_id("</s>"), 7, 8}
    assert ModelTokenizer(model.path, CHATML_TEMPLATE).chat_template_source == "--chat-template"


def test_model_directory_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelDirError, match=r"no tokenizer\.json"):
        ModelTokenizer(tmp_path)
    model = build(tmp_path / "m")
    (model.path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% if %}"}))
    with pytest.raises(ModelDirError, match="chat template does not compile"):
        ModelTokenizer(model.path)


def test_sampling_config_file(tmp_path: Path) -> None:
    path = tmp_path / "sampling.json"
    path.write_text(json.dumps({"temperature": 0.2, "top_p": 0.5, "top_k": 3, "max_tokens": 0, "stop": "###"}))
    assert SamplingDefaults.from_file(path) == SamplingDefaults(temperature=0.2, top_p=0.5, top_k=3, stop=("###",))
    path.write_text(json.dumps({"temperature": 0.2, "beam": 4}))
    with pytest.raises(SystemExit, match="unknown keys"):
        SamplingDefaults.from_file(path)
    (tmp_path / "model").mkdir()
    with pytest.raises(SystemExit, match="--sampling-config"):
        parse_args(["--model-dir", str(tmp_path / "model"), "--sampling-config", str(path.with_name("absent"))])


def test_parse_args_defaults(tmp_path: Path) -> None:
    config = parse_args(["--model-dir", str(tmp_path)])
    assert config.served_model_name == tmp_path.name
    assert (config.host, config.port, config.device, config.compute_type) == ("127.0.0.1", 8000, "auto", "default")
    assert (config.max_batch_size, config.batch_wait_ms, config.max_model_len) == (8, 50.0, 4096)


def test_tools_reach_the_chat_template(tmp_path: Path) -> None:
    template = "{% for t in tools or [] %}<{{ t['function']['name'] }}>{% endfor %}{{ messages[-1]['content'] }}"
    model = build(tmp_path / "m", chat_template=template)
    tok = ModelTokenizer(model.path)
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    assert tok.render_chat([{"role": "user", "content": "hi"}], {"tools": tools}) == "<get_weather>hi"
