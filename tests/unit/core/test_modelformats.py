"""Unit tests of api/dockyard_core/modelformats.py: which engine serves which format (docs/runtimes.md)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from dockyard_core.modelformats import Refusal, detect_format, engine_for, main_file


def files(tmp_path: Path, **contents: bytes) -> dict[str, Path]:
    out = {}
    for name, data in contents.items():
        path = tmp_path / name.replace("__", ".")
        path.write_bytes(data)
        out[path.name] = path
    return out


def ct2_bin() -> bytes:
    name = b"TransformerDecoderModelSpec"
    return struct.pack("<I", 6) + struct.pack("<H", len(name) + 1) + name + b"\0" + b"\0" * 32


def test_formats_are_found_from_the_files(tmp_path: Path) -> None:
    assert detect_format(files(tmp_path, tiny__gguf=b"GGUF\3\0\0\0")) == "gguf"
    assert detect_format(files(tmp_path / "", config__json=b"{}")) is None


@pytest.mark.parametrize(
    ("contents", "expected"),
    [
        ({"model.bin": ct2_bin(), "config.json": b"{}"}, "ctranslate2"),
        ({"model.bin": b"PK\x03\x04" + b"\0" * 20, "config.json": b"{}"}, "pytorch"),  # torch.save's zip
        ({"pytorch_model.bin": b"\x80\x02" + b"\0" * 20}, "pytorch"),
        ({"model.safetensors": b"\0" * 16, "config.json": b"{}"}, "safetensors"),
        ({"model.safetensors": b"\0" * 16, "q4.gguf": b"GGUF"}, "gguf"),
    ],
)
def test_each_format(tmp_path: Path, contents: dict[str, bytes], expected: str) -> None:
    found = {}
    for name, data in contents.items():
        (tmp_path / name).write_bytes(data)
        found[name] = tmp_path / name
    assert detect_format(found) == expected


def test_the_first_part_of_a_split_gguf_is_the_file_to_load(tmp_path: Path) -> None:
    names = {n: tmp_path / n for n in ("m-00002-of-00002.gguf", "m-00001-of-00002.gguf", "README.md")}
    assert main_file(names, "gguf") == "m-00001-of-00002.gguf"
    assert main_file(names, "safetensors") is None


@pytest.mark.parametrize(
    ("fmt", "optimization", "quantization", "engine"),
    [
        ("gguf", "", "", "llama-cpp"),
        ("gguf", "", "no_quantization", "llama-cpp"),
        ("ctranslate2", "", "", "ctranslate2"),
        ("ctranslate2", "ctranslate2", "int8_float16", "ctranslate2"),
        ("safetensors", "", "", None),
        ("safetensors", "vllm", "", "vllm"),
        (None, "ctranslate2", "", "ctranslate2"),
    ],
)
def test_engine_for(fmt: str | None, optimization: str, quantization: str, engine: str | None) -> None:
    assert engine_for(fmt, optimization, quantization) == engine


@pytest.mark.parametrize(
    ("fmt", "optimization", "quantization", "field"),
    [
        ("gguf", "ctranslate2", "", "optimizationInfo.optimizationType"),
        ("gguf", "vllm", "", "optimizationInfo.optimizationType"),
        ("gguf", "", "int8_float16", "optimizationInfo.quantizationType"),
        ("ctranslate2", "vllm", "", "optimizationInfo.optimizationType"),
    ],
)
def test_impossible_pairs_name_the_field(fmt: str, optimization: str, quantization: str, field: str) -> None:
    with pytest.raises(Refusal) as caught:
        engine_for(fmt, optimization, quantization)
    assert caught.value.field == field
