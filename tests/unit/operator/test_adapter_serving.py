"""An adapter served on its base (builders/model.py, reconcile/modeldeployment.py): a GGUF LoRA on a GGUF base
is llama-server's --model and --lora; an adapter whose base is unknown fails with a message that says what
adapter_config.json named and what to do; a kubectl-made deployment of an adapter without spec.baseModel uses
the Model its adapter_config.json names."""

from __future__ import annotations

from typing import Any

import pytest

from dockyard_core.resources.v1alpha1 import Model
from dockyard_operator.builders.model import ModelNotDeployable, model_workload, resolve_served_model
from dockyard_operator.context import Views
from dockyard_operator.reconcile.modeldeployment import _base_of
from dockyard_operator.runtimes import DEFAULT_CATALOG, select_runtime
from tests.unit.operator.test_builders import DELIVERY, PROGRESS_DEADLINE, model_deployment

LLAMA = DEFAULT_CATALOG.runtimes["llama-cpp"]


def stored(name: str, *, adapter: bool = False, base: str | None = None, named: str | None = None) -> dict[str, Any]:
    """An imported GGUF Model (or GGUF LoRA adapter) as the API server holds it."""
    file = "tiny-lora.gguf" if adapter else f"{name}.gguf"
    spec: dict[str, Any] = {
        "source": {
            "upload": {"fileContext": "model", "fileName": f"{name}.tar", "fileExtension": "tar", "fileSize": 1,
                       "totalChunks": 1}
        },
        "isAdapter": adapter,
        **({"baseModel": base} if base else {}),
    }  # fmt: skip
    status: dict[str, Any] = {
        "phase": "ReadyToDeploy",
        "storage": {"path": f"models/a/{name}", "format": "gguf", "file": file, "filesBytes": 1000},
        **({"adapter": {"baseModelNameOrPath": named}} if named else {}),
    }
    return {"metadata": {"name": name, "namespace": "a"}, "spec": spec, "status": status}


def test_a_gguf_lora_is_served_with_lora_on_the_base_file() -> None:
    lora = Model.model_validate(stored("lora", adapter=True, base="tiny"))
    served = resolve_served_model("lora", lora, Model.model_validate(stored("tiny")))
    assert (served.model_format, served.weights_file) == ("gguf", "tiny.gguf")  # the base's
    assert (served.adapter_format, served.adapter_file) == ("gguf", "tiny-lora.gguf")  # the adapter's
    name, runtime = select_runtime(
        model_deployment().spec, DEFAULT_CATALOG, served.model_format, adapter=True, adapter_format="gguf"
    )
    workload = model_workload(
        model_deployment(), served, name, runtime, progress_deadline_seconds=PROGRESS_DEADLINE, delivery=DELIVERY
    )
    args = workload.deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--model") + 1] == "/models/models/a/tiny/tiny.gguf"
    assert args[args.index("--lora") + 1] == "/adapters/models/a/lora/tiny-lora.gguf"
    init = workload.deployment["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in init] == ["storage-initializer", "storage-initializer-adapter"]


def test_without_a_base_the_message_says_what_adapter_config_named_and_what_to_do() -> None:
    lora = Model.model_validate(stored("lora", adapter=True, named="dockyard-dev/tiny-llama"))
    why = "adapter_config.json names base model 'dockyard-dev/tiny-llama', which matches no Model of this namespace"
    with pytest.raises(ModelNotDeployable) as caught:
        resolve_served_model("lora", lora, None, base_error=why)
    assert caught.value.reason == "AdapterWithoutBase"
    message = caught.value.message
    assert "'dockyard-dev/tiny-llama'" in message
    assert "--base-model" in message
    assert "kubectl patch models.dockyard.dev lora" in message
    unnamed = Model.model_validate(stored("lora", adapter=True))
    with pytest.raises(ModelNotDeployable, match="names no base model"):
        resolve_served_model("lora", unnamed, None)


def views_of(*models: dict[str, Any]) -> Views:
    index = {(m["metadata"]["namespace"], m["metadata"]["name"]): [m] for m in models}
    return Views(deployments={}, pods={}, nodes={}, models=index, tools={})


def test_a_kubectl_deployment_of_an_adapter_uses_the_model_adapter_config_names() -> None:
    tiny, other = stored("tiny-llama-1a2b3c4d"), stored("other")
    lora = stored("lora", adapter=True, named="dockyard-dev/tiny-llama-1a2b3c4d")
    elsewhere = {**stored("tiny-llama"), "metadata": {"name": "tiny-llama", "namespace": "b"}}
    views = views_of(tiny, other, lora, elsewhere)
    assert _base_of(views, "a", lora) == ("tiny-llama-1a2b3c4d", None)
    assert _base_of(views, "a", stored("lora", adapter=True, base="other", named="x")) == ("other", None)
    assert _base_of(views, "a", tiny) == (None, None)  # not an adapter
    base, why = _base_of(views_of(other, lora, elsewhere), "a", lora)  # the one in namespace b does not count
    assert base is None
    assert why is not None
    assert "matches no Model" in why
    assert "other" in why
