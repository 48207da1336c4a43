"""Which serving engine can run which model format (docs/runtimes.md), shared by facade and operator.

The import job records the format of what it stored (``Model.status.storage.format``, from the files
at the model's top level, :func:`detect_format`). A deployment's ``optimizationInfo`` then either
picks an engine that can run that format, or is refused: by the public deploy API with a 422 naming
the field, and for a ModelDeployment created with kubectl by a FAILED job (reason
``InvalidOptimization``).

| format      | files                             | empty optimizationType | refused                  |
|-------------|-----------------------------------|------------------------|--------------------------|
| gguf        | ``*.gguf``                        | llama.cpp (llama-cpp)  | ctranslate2, vllm, int8  |
| ctranslate2 | ``model.bin`` (CTranslate2's)     | CTranslate2            | vllm                     |
| safetensors | ``*.safetensors`` (+ config.json) | the catalog's default  | —                        |
| pytorch     | ``*.bin`` / ``*.pt`` / ``*.pth``  | the catalog's default  | —                        |

(int8: quantizationType int8_float16.)

Pure: no I/O except :func:`detect_format`, which reads a few bytes of ``model.bin``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

ModelFormat = Literal["gguf", "ctranslate2", "safetensors", "pytorch"]

LLAMA_CPP = "llama-cpp"
CTRANSLATE2 = "ctranslate2"
VLLM = "vllm"

OPTIMIZATION_FIELD = "optimizationInfo.optimizationType"
QUANTIZATION_FIELD = "optimizationInfo.quantizationType"

_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's format since PyTorch 1.6
_PICKLE_PROTOCOL = 0x80  # an older torch.save: a pickle stream


def _is_ctranslate2_bin(head: bytes) -> bool:
    """CTranslate2's model.bin starts with a little-endian uint32 format version (small), then the
    length-prefixed spec name; a PyTorch .bin is a zip or a pickle stream."""
    if len(head) < 8 or head.startswith(_ZIP_MAGIC) or head[0] == _PICKLE_PROTOCOL:
        return False
    version = int.from_bytes(head[:4], "little")
    return 1 <= version <= 100


def detect_format(files: Mapping[str, Path]) -> ModelFormat | None:
    """The format of a model directory, from its top-level files (name → path); None when it holds
    no weights Dockyard recognises (e.g. an adapter of config files only)."""
    names = {name.lower(): path for name, path in files.items()}
    if any(name.endswith(".gguf") for name in names):
        return "gguf"
    if "model.bin" in names:
        with names["model.bin"].open("rb") as f:
            head = f.read(16)
        if _is_ctranslate2_bin(head):
            return "ctranslate2"
    if any(name.endswith(".safetensors") for name in names):
        return "safetensors"
    if any(name.endswith((".bin", ".pt", ".pth")) for name in names):
        return "pytorch"
    return None


def main_file(files: Mapping[str, Path], model_format: ModelFormat | None) -> str | None:
    """The file an engine loads by name: for GGUF the (first, of a split model) ``.gguf`` file."""
    if model_format != "gguf":
        return None
    ggufs = sorted(name for name in files if name.lower().endswith(".gguf"))
    return ggufs[0] if ggufs else None


CONVERT_HINT = (
    "convert it with llama.cpp's convert_lora_to_gguf.py (--base <the base model's Hugging Face directory> "
    "--outtype f16) and import adapter_config.json with the .gguf it writes"
)
"""How a PEFT (safetensors) adapter becomes a GGUF LoRA that llama.cpp loads."""


def adapter_refusal(base_format: str | None, adapter_format: str | None) -> str | None:
    """Why no engine serves an adapter of ``adapter_format`` on a base of ``base_format`` (None: one can):
    llama.cpp loads GGUF LoRA adapters on a GGUF base, vLLM PEFT adapters (safetensors / .bin) on a Hugging
    Face base, CTranslate2 none."""
    if base_format == "gguf" and adapter_format != "gguf":
        kind = f"a {adapter_format} (PEFT) adapter" if adapter_format else "an adapter without weights llama.cpp loads"
        return (
            f"the base model is GGUF, served by llama.cpp, which loads LoRA adapters in GGUF only; this is {kind}: "
            + (CONVERT_HINT)
        )
    if base_format == "ctranslate2":
        return "the base model is a CTranslate2 model, and CTranslate2 cannot serve LoRA adapters"
    if adapter_format == "gguf" and base_format != "gguf":
        shown = f"{base_format}" if base_format else "a hub model"
        return f"a GGUF LoRA adapter is served by llama.cpp on a GGUF base model; this base model is {shown}"
    return None


class Refusal(ValueError):
    """A format and an optimizationInfo that no engine can serve together; ``field`` names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def engine_for(model_format: str | None, optimization_type: str, quantization_type: str) -> str | None:
    """The runtime a format and optimizationInfo ask for: a runtime name, or None for "the catalog's
    default"; raises :class:`Refusal` for an impossible pair."""
    if model_format == "gguf":
        if optimization_type in (CTRANSLATE2, VLLM):
            raise Refusal(
                OPTIMIZATION_FIELD,
                f"a GGUF model is served by llama.cpp, not {optimization_type}: leave optimizationType empty "
                "(or import the model as safetensors for vllm / ctranslate2)",
            )
        if quantization_type == "int8_float16":
            raise Refusal(
                QUANTIZATION_FIELD,
                "int8_float16 is a CTranslate2 compute type; a GGUF model carries its own quantization: send "
                "no_quantization or an empty string",
            )
        return LLAMA_CPP
    if model_format == "ctranslate2":
        if optimization_type == VLLM:
            raise Refusal(
                OPTIMIZATION_FIELD,
                "a CTranslate2 model (model.bin) is served by ctranslate2, not vllm: leave optimizationType empty "
                "or send ctranslate2",
            )
        return CTRANSLATE2
    return optimization_type or None
