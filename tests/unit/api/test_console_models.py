"""The catalog's ModelDeployment view and the console's Models and tools page show both names of a model
deployment: the deploy call's (spec.name, any text) and the object's, derived from it."""

from __future__ import annotations

from typing import Any

from dockyard_api.console.common import TEMPLATES
from dockyard_api.management.catalog.service import model_deployment_view
from dockyard_core.resources.v1alpha1 import ModelDeployment


def deployment(name: str, display_name: str) -> dict[str, Any]:
    obj = ModelDeployment.model_validate(
        {
            "kind": "ModelDeployment",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {"modelRef": "llama", "modelType": "openSource", "name": display_name, "deviceType": "g5.xlarge"},
        }
    )
    view: dict[str, Any] = model_deployment_view(obj).wire()
    return view


def page(*deployments: dict[str, Any]) -> str:
    return TEMPLATES.get_template("models.html").render(
        ctx=None, csrf="c", flash={}, base="/console/ns/team", namespace="team", models=[],
        modelDeployments=list(deployments), toolDeployments=[], tools=[], busy=False,
    )  # fmt: skip


def test_the_view_has_the_object_name_and_the_deploy_calls_name() -> None:
    view = deployment("llama-3-8b-0f3a9c1d", "Llama 3 8B")
    assert (view["name"], view["displayName"], view["modelRef"]) == ("llama-3-8b-0f3a9c1d", "Llama 3 8B", "llama")


def test_the_models_page_shows_the_name_and_the_object_when_they_differ() -> None:
    html = page(deployment("llama-3-8b-0f3a9c1d", "Llama 3 8B"), deployment("chat", "chat"))
    assert 'data-label="Name">Llama 3 8B <span class="hint">object llama-3-8b-0f3a9c1d</span></td>' in html
    assert 'data-label="Name">chat</td>' in html  # one name when they are the same
    assert "<script>" not in page(deployment("x-1", "<script>alert(1)</script>"))  # escaped
