"""A tiny real model made locally: a llama-architecture GGUF with random weights and its own vocabulary.

No download, no torch: :func:`write_tiny_gguf` writes the file with the ``gguf`` package from numpy
arrays (seeded, so the same call writes the same bytes). llama.cpp loads it in milliseconds and serves
it like any other GGUF model; what it says is noise, but every byte of the serving path is real:
tokenizer, chat template, sampling, grammar-constrained tool calls, ``usage`` counts.

The weights are random except for one deliberate bias, so that the model is useful in tests and in
the ``make run`` demo: dimension 0 of every token embedding is a large constant, which after the final
RMS norm makes ``output.weight[:, 0]`` a per-token preference ("logit level") on top of the random
part. The levels rank, from most to least likely:

1. whole sentences ending in a newline (free text is a few readable sentences),
2. the end-of-turn tokens (the answer ends after a few sentences, depending on the context),
3. ``"`` (inside a JSON string, where a newline is not allowed, the string ends at once),
4. ``f`` before ``m`` (in ``chatml-function-calling``'s automatic mode the model calls a tool),
5. the other printable characters, then whitespace, then raw bytes.

So a grammar-constrained tool call always completes as valid JSON well within a few dozen tokens.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np

ARCH = "llama"
N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 4
N_LAYER = 2
N_FF = 128
N_CTX_TRAIN = 2048
HIDDEN_CONSTANT = 10.0
"""Dimension 0 of every token embedding: it dominates the residual stream (see the docstring)."""

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SENTENCES = (
    "Hello from llama.cpp.",
    "I am a tiny random model.",
    "Dockyard deployed me.",
    "My weights are random.",
    "The engine is real.",
    "Tools get valid JSON.",
    "Nothing was downloaded.",
    "Ask me for the time.",
)
"""Whole-sentence tokens (at most 32 bytes as text: llama-cpp-python detokenizes into 32-byte pieces)."""
CONTROL = ("<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>")
UNK, BOS, EOS, IM_START, IM_END = range(len(CONTROL))

# logit levels (see the module docstring)
LEVEL_SENTENCE = 12.0
LEVEL_END = 11.1
LEVEL_QUOTE = 8.0
LEVEL_F = 7.0
LEVEL_M = 6.0
LEVEL_CHAR = 2.0
LEVEL_SPACE = 0.0
LEVEL_BYTE = -5.0
LEVEL_NEVER = -20.0


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens (sentencepiece style: ``▁`` is a space), scores and token types of the model."""
    from gguf import TokenType

    tokens: list[str] = list(CONTROL)
    types = [int(TokenType.UNKNOWN)] + [int(TokenType.CONTROL)] * (len(CONTROL) - 1)
    tokens += [f"<0x{b:02X}>" for b in range(256)]  # byte fallback: every text can be tokenized
    types += [int(TokenType.BYTE)] * 256
    tokens.append("▁")
    types.append(int(TokenType.NORMAL))
    tokens += [chr(c) for c in range(0x21, 0x7F)]
    types += [int(TokenType.NORMAL)] * (0x7F - 0x21)
    tokens += ["▁" + s.replace(" ", "▁") + "\n" for s in SENTENCES]
    types += [int(TokenType.NORMAL)] * len(SENTENCES)
    scores = [0.0 if t == int(TokenType.NORMAL) else -1000.0 for t in types]
    return tokens, scores, types


def _levels(tokens: list[str], types: list[int]) -> np.ndarray:
    from gguf import TokenType

    levels = np.full(len(tokens), LEVEL_CHAR, dtype=np.float32)
    for i, (tok, kind) in enumerate(zip(tokens, types, strict=True)):
        if kind == int(TokenType.BYTE):
            levels[i] = LEVEL_BYTE
        elif kind in (int(TokenType.UNKNOWN), int(TokenType.CONTROL)):
            levels[i] = LEVEL_END if i in (EOS, IM_END) else LEVEL_NEVER
        elif tok.endswith("\n") and len(tok) > 2:
            levels[i] = LEVEL_SENTENCE
        elif tok == '"':
            levels[i] = LEVEL_QUOTE
        elif tok == "f":
            levels[i] = LEVEL_F
        elif tok == "m":
            levels[i] = LEVEL_M
        elif tok == "▁":
            levels[i] = LEVEL_SPACE
    return levels


def write_tiny_gguf(path: Path, *, seed: int = 20261123, name: str = "dockyard-tiny-llama") -> Path:
    """Write the model to ``path`` (a ``.gguf`` file, about 0.6 MB) and return the path."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)
    head_dim = N_EMBD // N_HEAD

    def normal(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    embd = normal(n_vocab, N_EMBD, std=0.3)
    embd[:, 0] = HIDDEN_CONSTANT
    # after the final RMS norm, dimension 0 is about HIDDEN_CONSTANT / rms(embedding)
    rms = float(np.sqrt((HIDDEN_CONSTANT**2 + (N_EMBD - 1) * 0.09) / N_EMBD))
    output = normal(n_vocab, N_EMBD, std=0.5)
    output[:, 0] = _levels(tokens, types) / (HIDDEN_CONSTANT / rms)

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), ARCH)
    writer.add_name(name)
    writer.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n_vocab)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(EOS)
    writer.add_eot_token_id(IM_END)
    writer.add_unk_token_id(UNK)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    writer.add_tensor("token_embd.weight", embd)
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", normal(N_EMBD, N_EMBD, std=0.02))
        writer.add_tensor(f"blk.{i}.attn_k.weight", normal(head_dim * N_HEAD_KV, N_EMBD, std=0.02))
        writer.add_tensor(f"blk.{i}.attn_v.weight", normal(head_dim * N_HEAD_KV, N_EMBD, std=0.02))
        writer.add_tensor(f"blk.{i}.attn_output.weight", normal(N_EMBD, N_EMBD, std=0.02))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", normal(N_FF, N_EMBD, std=0.02))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", normal(N_FF, N_EMBD, std=0.02))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", normal(N_EMBD, N_FF, std=0.02))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", output)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    return path


LORA_RANK = 4
LORA_TARGET = SENTENCES[2]
"""The sentence the tiny LoRA makes the model say: its output.weight delta raises that token's logit."""
LORA_BOOST = 6.0
"""Logit added to :data:`LORA_TARGET`'s token (above every other level: the adapted model says it first)."""
LORA_BASE = "dockyard-dev/dockyard-tiny-llama"
"""base_model_name_or_path of the tiny LoRA's adapter_config.json: its last component is the file name
(without .gguf) of the tiny base model as ``make run``'s demo and the tests import it
(``dockyard-tiny-llama.gguf``)."""


def write_tiny_lora(directory: Path, *, base: str = LORA_BASE, seed: int = 20261126) -> Path:
    """Write a GGUF LoRA adapter of the tiny model into ``directory`` (``tiny-lora.gguf``, general.type
    "adapter", adapter.type "lora", alpha = rank) with its ``adapter_config.json`` (PEFT's keys, naming
    ``base``); returns ``directory``.

    lora_a / lora_b pairs (llama.cpp's layout: A is rank x in, B is out x rank) for each layer's attn_q and
    ffn_up (small random values) and for output.weight, whose delta B·A reads the hidden dimension that the
    embeddings hold constant (see the module docstring) and raises :data:`LORA_TARGET` by :data:`LORA_BOOST`:
    at temperature 0 the adapted model answers with that sentence, the base model does not."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens = vocabulary()[0]
    rms = float(np.sqrt((HIDDEN_CONSTANT**2 + (N_EMBD - 1) * 0.09) / N_EMBD))

    def pair(n_out: int, n_in: int) -> tuple[np.ndarray, np.ndarray]:
        a = (rng.standard_normal((LORA_RANK, n_in)) * 0.05).astype(np.float32)
        b = (rng.standard_normal((n_out, LORA_RANK)) * 0.05).astype(np.float32)
        return a, b

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tiny-lora.gguf"
    tmp = path.with_name(path.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), ARCH)
    writer.add_type("adapter")
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(LORA_RANK))
    writer.add_name("dockyard-tiny-lora")
    for i in range(N_LAYER):
        for tensor, n_out, n_in in (
            (f"blk.{i}.attn_q.weight", N_EMBD, N_EMBD),
            (f"blk.{i}.ffn_up.weight", N_FF, N_EMBD),
        ):
            a, b = pair(n_out, n_in)
            writer.add_tensor(f"{tensor}.lora_a", a)
            writer.add_tensor(f"{tensor}.lora_b", b)
    a = np.zeros((LORA_RANK, N_EMBD), dtype=np.float32)
    a[0, 0] = 1.0  # reads the constant dimension 0 (about HIDDEN_CONSTANT / rms after the final norm)
    b = np.zeros((len(tokens), LORA_RANK), dtype=np.float32)
    target = tokens.index("▁" + LORA_TARGET.replace(" ", "▁") + "\n")
    b[target, 0] = LORA_BOOST / (HIDDEN_CONSTANT / rms)
    writer.add_tensor("output.weight.lora_a", a)
    writer.add_tensor("output.weight.lora_b", b)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(path)
    config = {
        "base_model_name_or_path": base,
        "peft_type": "LORA",
        "r": LORA_RANK,
        "lora_alpha": LORA_RANK,
        "target_modules": ["q_proj", "up_proj", "lm_head"],
        "task_type": "CAUSAL_LM",
    }
    (directory / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return directory


def tiny_lora_tar(directory: Path, *, base: str = LORA_BASE) -> bytes:
    """The tiny LoRA as the tar ``dockyard import --adapter`` takes: adapter_config.json and tiny-lora.gguf
    at the top level."""
    write_tiny_lora(directory, base=base)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ("adapter_config.json", "tiny-lora.gguf"):
            tar.add(directory / name, arcname=name)
    return buf.getvalue()


def sha256_of(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()
