"""The public deploy of an adapter (docs/public-api.md, 'Adapters'): which base it is served on, and the
refusals that name body.baseModel before anything is created or bound."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dockyard_api.public.deploy.service import DeployService, check_adapter, check_base_ready
from dockyard_api.settings import ApiSettings
from dockyard_core.errors import ConflictError, InvalidRequestError
from dockyard_core.resources.v1alpha1 import Model


def model(
    name: str,
    *,
    fmt: str = "gguf",
    adapter: bool = False,
    base: str | None = None,
    named: str | None = None,
    phase: str = "ReadyToDeploy",
    hub: bool = False,
    file_name: str | None = None,
) -> Model:
    upload = {"fileContext": "model", "fileName": file_name or f"{name}.gguf", "fileExtension": "gguf", "fileSize": 1,
              "totalChunks": 1}  # fmt: skip
    spec: dict[str, Any] = {"source": {"hub": {"id": f"org/{name}"}} if hub else {"upload": upload}}
    spec |= {"isAdapter": adapter, **({"baseModel": base} if base else {})}
    status: dict[str, Any] = {"phase": phase, "storage": {"path": f"models/a/{name}", "format": fmt}}
    if named:
        status["adapter"] = {"baseModelNameOrPath": named}
    return Model.model_validate({"metadata": {"name": name, "namespace": "a"}, "spec": spec, "status": status})


class Models:
    def __init__(self, *models: Model) -> None:
        self.items = {m.metadata.name: m for m in models}

    async def find(self, namespace: str, name: str) -> Model | None:
        return self.items.get(name)

    async def select(self, namespace: str) -> list[Model]:
        return list(self.items.values())


def base_of(adapter: Model, explicit: str | None, *others: Model) -> Model | None:
    service = DeployService(object(), ApiSettings())  # type: ignore[arg-type]
    service.models = Models(adapter, *others)  # type: ignore[assignment]
    return asyncio.run(service.base_of("a", adapter, explicit))


TINY = model("dockyard-tiny-llama-0b1c2d3e", file_name="dockyard-tiny-llama.gguf")


def test_the_base_is_the_body_s_then_the_bound_one_then_the_one_adapter_config_names() -> None:
    other = model("other")
    lora = model("lora", adapter=True, named="dockyard-dev/dockyard-tiny-llama")
    assert base_of(lora, None, TINY, other) == TINY  # adapter_config.json's value, by file name
    assert base_of(lora, "other", TINY, other) == other  # the body's baseModel beats it
    bound = model("lora", adapter=True, base="other", named="dockyard-dev/dockyard-tiny-llama")
    assert base_of(bound, None, TINY, other) == other
    assert base_of(model("plain"), None, TINY) is None  # not an adapter: no base


@pytest.mark.parametrize(
    ("adapter", "explicit", "says"),
    [
        (model("lora", adapter=True, named="someone/unknown"), None, "'someone/unknown', which matches no Model"),
        (model("lora", adapter=True), None, "names no base model"),
        (model("lora", adapter=True), "nothing", "no model 'nothing'"),
        (model("lora", adapter=True), "lora2", "itself an adapter"),
        (model("plain"), "dockyard-tiny-llama-0b1c2d3e", "not an adapter"),
    ],
)
def test_an_unresolved_base_is_refused_naming_base_model(adapter: Model, explicit: str | None, says: str) -> None:
    with pytest.raises(InvalidRequestError, match=says) as caught:
        base_of(adapter, explicit, TINY, model("lora2", adapter=True))
    assert caught.value.details[0]["field"] == "body.baseModel"


def test_another_base_than_the_bound_one_is_a_conflict() -> None:
    with pytest.raises(ConflictError, match="set once"):
        base_of(model("lora", adapter=True, base="other"), "dockyard-tiny-llama-0b1c2d3e", TINY, model("other"))


def test_the_pair_and_the_base_s_phase_are_checked() -> None:
    with pytest.raises(InvalidRequestError, match=r"convert_lora_to_gguf\.py"):
        check_adapter(model("peft", adapter=True, fmt="safetensors"), TINY)
    check_adapter(model("lora", adapter=True), TINY)
    with pytest.raises(ConflictError, match="Importing, not ReadyToDeploy"):
        check_base_ready(model("base", phase="Importing"))
    check_base_ready(model("hub", hub=True, phase="Importing"))  # a hub model needs no import
    check_base_ready(TINY)
