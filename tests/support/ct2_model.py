"""A tiny CTranslate2 decoder model with random weights and a tokenizer trained here: no torch, no hub.

The model is Llama-shaped (pre-norm RMSNorm, SwiGLU feed-forward, rotary positions), built with
``ctranslate2.specs`` from numpy arrays and saved with its config and vocabulary; the tokenizer is a
byte-level BPE trained with ``tokenizers`` on a few sentences, saved as ``tokenizer.json`` beside it,
with a ``tokenizer_config.json`` naming its special tokens (and, optionally, a chat template).

    python -m tests.support.ct2_model OUTDIR [--layers 2 --dim 64 ...]   # for the local runner, benches
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from ctranslate2.specs import common_spec, transformer_spec
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, how are you today my friend?",
    "Dockyard deploys models and apps on Kubernetes clusters.",
    "a model answers questions; an agent calls tools and reads their results",
    "numbers 0 1 2 3 4 5 6 7 8 9 and punctuation . , ; : ! ? ( ) [ ] { }",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber stra\u00dfe \u65e5\u672c\u8a9e \U0001f600",
]


@dataclass(frozen=True)
class TinyModel:
    path: Path
    vocab_size: int
    tokenizer: Tokenizer


def train_tokenizer(vocab_size: int = 400) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    return tok


def build(
    out: Path,
    *,
    layers: int = 2,
    dim: int = 64,
    heads: int = 4,
    ffn: int = 128,
    vocab_size: int = 400,
    seed: int = 0,
    chat_template: str | None = None,
    quantization: str | None = None,
) -> TinyModel:
    """Write a CTranslate2 model directory to ``out`` and return what it holds."""
    tok = train_tokenizer(vocab_size)
    vocab = [tok.id_to_token(i) for i in range(tok.get_vocab_size())]
    size = len(vocab)
    spec = transformer_spec.TransformerDecoderModelSpec.from_config(
        layers,
        heads,
        activation=common_spec.Activation.SWISH,
        pre_norm=True,
        ffn_glu=True,
        rms_norm=True,
        rotary_dim=0,
        rotary_interleave=False,
    )
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def ones() -> np.ndarray:
        return np.ones(dim, dtype=np.float32)

    decoder = spec.decoder
    decoder.scale_embeddings = False
    decoder.embeddings.weight = weight(size, dim)
    decoder.layer_norm.gamma = ones()
    for layer in decoder.layer:
        layer.self_attention.layer_norm.gamma = ones()
        layer.self_attention.linear[0].weight = weight(3 * dim, dim)  # fused q, k, v
        layer.self_attention.linear[1].weight = weight(dim, dim)
        layer.ffn.layer_norm.gamma = ones()
        layer.ffn.linear_0.weight = weight(ffn, dim)
        layer.ffn.linear_0_noact.weight = weight(ffn, dim)
        layer.ffn.linear_1.weight = weight(dim, ffn)
    decoder.projection.weight = weight(size, dim)
    spec.register_vocabulary(vocab)
    spec.config.bos_token = "<s>"
    spec.config.eos_token = "</s>"
    spec.config.unk_token = "<unk>"
    spec.config.layer_norm_epsilon = 1e-6
    spec.validate()
    spec.optimize(quantization=quantization)
    out.mkdir(parents=True, exist_ok=True)
    spec.save(str(out))
    tok.save(str(out / "tokenizer.json"))
    config: dict[str, object] = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    if chat_template is not None:
        config["chat_template"] = chat_template
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return TinyModel(path=out, vocab_size=size, tokenizer=tok)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=400)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    model = build(
        args.out,
        layers=args.layers,
        dim=args.dim,
        heads=args.heads,
        ffn=args.ffn,
        vocab_size=args.vocab_size,
        seed=args.seed,
    )
    print(f"{model.path}: {model.vocab_size} tokens, files {sorted(p.name for p in model.path.iterdir())}")


if __name__ == "__main__":
    main()
