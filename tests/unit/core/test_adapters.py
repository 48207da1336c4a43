"""An adapter's base model: what adapter_config.json names (read at import) and the one Model of the
namespace it resolves to (docs/public-api.md, 'Adapters')."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dockyard_core.adapters import BaseNotResolved, base_named_in, names_of, resolve_base
from dockyard_core.resources.v1alpha1 import Model


def model(
    name: str,
    *,
    file_name: str | None = None,
    extension: str = "gguf",
    hub: str | None = None,
    adapter: bool = False,
    phase: str = "ReadyToDeploy",
    gguf: str | None = None,
) -> Model:
    source: dict[str, Any] = (
        {"hub": {"id": hub}}
        if hub
        else {
            "upload": {
                "fileContext": "model",
                "fileName": file_name or f"{name}.{extension}",
                "fileExtension": extension,
                "fileSize": 1,
                "totalChunks": 1,
            }
        }
    )
    status: dict[str, Any] = {"phase": phase}
    if gguf:
        status["storage"] = {"path": f"models/a/{name}", "format": "gguf", "file": gguf}
    return Model.model_validate(
        {
            "metadata": {"name": name, "namespace": "a"},
            "spec": {"source": source, "isAdapter": adapter},
            "status": status,
        }
    )


BASE = model("tiny-llama-1a2b3c4d", file_name="tiny-llama.gguf", gguf="tiny-llama.gguf")
HUB = model("llama-8b", hub="meta-llama/Llama-3.1-8B-Instruct")
OTHER = model("other-9f8e7d6c", file_name="other.tar", extension="tar")
LORA = model("tiny-lora-5e6f7a8b", file_name="tiny-lora.tar", extension="tar", adapter=True)
FAILED = model("tiny-llama-00000000", file_name="tiny-llama.gguf", phase="Failed")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("tiny-llama-1a2b3c4d", BASE),  # the object name (modelId)
        ("tiny-llama.gguf", BASE),  # the uploaded file name
        ("TINY-LLAMA", BASE),  # the file name without its extension, case-insensitive
        ("dockyard-dev/tiny-llama", BASE),  # a hub-style id: its last component
        ("/data/models/tiny-llama/", BASE),  # a local path: its last component
        ("meta-llama/Llama-3.1-8B-Instruct", HUB),  # a hub model's id
        ("llama-8b", HUB),
    ],
)
def test_the_value_names_one_model(value: str, expected: Model) -> None:
    assert resolve_base(value, [BASE, HUB, OTHER, LORA, FAILED]) == expected.metadata.name


def test_no_match_names_the_value_and_the_candidates() -> None:
    with pytest.raises(BaseNotResolved) as caught:
        resolve_base("mistralai/Mistral-7B-v0.1", [BASE, HUB, LORA, FAILED])
    assert "'mistralai/Mistral-7B-v0.1'" in caught.value.message
    assert caught.value.candidates == ["llama-8b", "tiny-llama-1a2b3c4d"]  # no adapter, no Failed model
    assert "matches no Model" in caught.value.message
    assert "llama-8b, tiny-llama-1a2b3c4d" in caught.value.message


def test_several_matches_are_refused_with_their_names() -> None:
    twin = model("tiny-llama-99999999", file_name="tiny-llama.gguf")
    with pytest.raises(BaseNotResolved) as caught:
        resolve_base("tiny-llama", [BASE, twin])
    assert caught.value.candidates == ["tiny-llama-1a2b3c4d", "tiny-llama-99999999"]
    assert "matches 2 Models" in caught.value.message


def test_an_adapter_is_never_a_base() -> None:
    with pytest.raises(BaseNotResolved):
        resolve_base("tiny-lora", [LORA])
    assert "tiny-lora" in names_of(LORA)  # it would match by its file name


def test_the_import_reads_base_model_name_or_path(tmp_path: Path) -> None:
    assert base_named_in(tmp_path) is None  # no adapter_config.json
    config = tmp_path / "adapter_config.json"
    config.write_text(json.dumps({"base_model_name_or_path": " meta-llama/Llama-3.1-8B ", "r": 8}))
    assert base_named_in(tmp_path) == "meta-llama/Llama-3.1-8B"
    for bad in ('{"base_model_name_or_path": ""}', '{"base_model_name_or_path": 3}', "[1]", "not json", "{}"):
        config.write_text(bad)
        assert base_named_in(tmp_path) is None, bad
