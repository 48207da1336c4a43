"""The console's choice of an adapter's base (CatalogService.choose_base_model): set once as the caller, with
the refusals naming baseModel."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dockyard_api.management.catalog.service import CatalogService
from dockyard_core.errors import ConflictError, InvalidRequestError, NotFoundError
from dockyard_core.resources.v1alpha1 import Model


def model(name: str, fmt: str, *, adapter: bool = False, base: str | None = None) -> Model:
    spec: dict[str, Any] = {"source": {"hub": {"id": f"org/{name}"}}, "isAdapter": adapter}
    if base:
        spec["baseModel"] = base
    status = {"phase": "ReadyToDeploy", "storage": {"path": f"models/a/{name}", "format": fmt}}
    return Model.model_validate({"metadata": {"name": name, "namespace": "a"}, "spec": spec, "status": status})


class Models:
    """The Model repository as the caller (get, find, merge), over a dict."""

    def __init__(self, *models: Model) -> None:
        self.items = {m.metadata.name: m for m in models}
        self.merged: list[tuple[str, dict[str, Any]]] = []

    async def get(self, namespace: str, name: str, *, missing: str | None = None) -> Model:
        if name not in self.items:
            raise NotFoundError(missing or name)
        return self.items[name]

    async def find(self, namespace: str, name: str) -> Model | None:
        return self.items.get(name)

    async def merge(self, namespace: str, name: str, patch: dict[str, Any]) -> Model:
        self.merged.append((name, patch))
        current = self.items[name].model_dump(mode="json", by_alias=True, exclude_none=True)
        current["spec"].update(patch["spec"])
        self.items[name] = Model.model_validate(current)
        return self.items[name]


class Repos:
    def __init__(self, models: Models) -> None:
        self.models = models


def choose(models: Models, adapter: str, base: str) -> Any:
    return asyncio.run(CatalogService(Repos(models)).choose_base_model("a", adapter, base))  # type: ignore[arg-type]


def test_an_adapter_gets_its_base_once() -> None:
    models = Models(model("tiny", "gguf"), model("lora", "gguf", adapter=True))
    view = choose(models, "lora", "tiny")
    assert (view.is_adapter, view.base_model) == (True, "tiny")
    assert models.merged == [("lora", {"spec": {"baseModel": "tiny"}})]
    assert choose(models, "lora", "tiny").base_model == "tiny"  # the same again: nothing written
    assert len(models.merged) == 1
    with pytest.raises(ConflictError, match="already"):
        choose(Models(model("tiny", "gguf"), model("lora", "gguf", adapter=True, base="other")), "lora", "tiny")


@pytest.mark.parametrize(
    ("adapter", "base", "says"),
    [
        ("tiny", "tiny", "not an adapter"),
        ("lora", "nothing", "no model of this namespace"),
        ("lora", "other-lora", "an adapter"),
        ("peft", "tiny", "convert_lora_to_gguf.py"),
    ],
)
def test_refusals_name_base_model(adapter: str, base: str, says: str) -> None:
    models = Models(
        model("tiny", "gguf"),
        model("lora", "gguf", adapter=True),
        model("other-lora", "gguf", adapter=True),
        model("peft", "safetensors", adapter=True),
    )
    with pytest.raises(InvalidRequestError, match=says) as caught:
        choose(models, adapter, base)
    assert caught.value.details[0]["field"] == "baseModel"
    assert models.merged == []


def test_an_unknown_adapter_is_not_found() -> None:
    with pytest.raises(NotFoundError):
        choose(Models(), "lora", "tiny")
