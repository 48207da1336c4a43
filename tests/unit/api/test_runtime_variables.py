"""An environment's spec.configuration fills the {{name}} placeholders of its agents' instructions
(docs/deployed-app-api.md, 'What a turn does'; docs/apps-environments.md, 'Environments')."""

from __future__ import annotations

import asyncio
from typing import Any

from dockyard_api.cache import Informer
from dockyard_api.runtime.config import AppLookup, parse_content
from dockyard_api.runtime.endpoints import EndpointResolver
from dockyard_api.runtime.variables import render, variables
from dockyard_core.kubeclient import AsyncKube


def test_a_placeholder_with_a_value_is_replaced_by_it() -> None:
    values = {"support_email": "help@example.com", "region": "eu-west"}
    text = "Write to {{support_email}}; you serve {{ region }} ({{region}})."
    assert render(text, values) == "Write to help@example.com; you serve eu-west (eu-west)."
    assert render("{{a.b-c_1}}", {"a.b-c_1": "x"}) == "x"


def test_a_placeholder_without_a_value_is_left_as_written() -> None:
    assert render("Hello {{name}}, from {{ region }}.", {"other": "x"}) == "Hello {{name}}, from {{ region }}."
    assert render("Hello {{name}}", {}) == "Hello {{name}}"


def test_braces_that_are_not_placeholders_are_text_and_a_backslash_escapes_one() -> None:
    values = {"name": "Ada", "a": "1"}
    json_example = 'Answer as {"name": "..."} or {{"name": 1}}; {name} and {{ two words }} and {{}} stay.'
    assert render(json_example, values) == json_example
    assert render(r"Write \{{name}} literally; hi {{name}}.", values) == "Write {{name}} literally; hi Ada."
    assert render(r"\{{missing}}", values) == "{{missing}}"
    assert render("{{{a}}}", values) == "{1}"
    # a value is inserted as it is: placeholders inside a value are not substituted again
    assert render("{{x}}", {"x": "{{name}}"}) == "{{name}}"
    assert render("no placeholders", values) == "no placeholders"


def test_values_are_strings_as_they_are_and_other_json_as_its_text_null_is_no_value() -> None:
    configuration: dict[str, Any] = {
        "tone": "friendly",
        "limit": 3,
        "ratio": 0.5,
        "strict": True,
        "langs": ["en", "fr"],
        "contact": {"email": "a@b.c"},
        "unset": None,
    }
    found = variables(configuration)
    assert found == {
        "tone": "friendly",
        "limit": "3",
        "ratio": "0.5",
        "strict": "true",
        "langs": '["en","fr"]',
        "contact": '{"email":"a@b.c"}',
    }
    assert render("{{unset}} {{strict}} {{langs}}", found) == '{{unset}} true ["en","fr"]'
    assert variables(None) == {}
    assert variables({}) == {}


def _env(name: str, rv: str, configuration: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"appRef": "bot", "appVersion": "1.0.0"}
    if configuration is not None:
        spec["configuration"] = configuration
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}, "spec": spec}


def test_the_runtime_renders_each_environments_agents_once_per_resource_version(unreachable_kubeconfig: str) -> None:
    kube = AsyncKube(unreachable_kubeconfig)
    envs = Informer(kube, "environments")
    informers = {"environments": envs}
    lookup = AppLookup(kube, informers, EndpointResolver("cluster", Informer(kube, "modeldeployments"), None))
    agents = [{"name": "a", "instructions": "Mail {{email}}. {{missing}}"}, {"name": "b", "instructions": "Plain."}]
    content = parse_content({"agents": agents}, "1.0.0")
    envs.replace(
        [
            _env("bot-eu", "1", {"email": "eu@x.io"}),
            _env("bot-us", "1", {"email": "us@x.io"}),
            _env("bot-none", "1", None),
        ]
    )

    async def rendered(name: str) -> tuple[Any, ...]:
        return lookup.agents(await lookup.environment("ns", name), content)

    eu = asyncio.run(rendered("bot-eu"))
    assert [a.instructions for a in eu] == ["Mail eu@x.io. {{missing}}", "Plain."]
    assert [a.instructions for a in asyncio.run(rendered("bot-us"))] == ["Mail us@x.io. {{missing}}", "Plain."]
    assert asyncio.run(rendered("bot-none")) is content.agents  # nothing to substitute: nothing copied
    assert asyncio.run(rendered("bot-eu")) is eu  # same content, same resourceVersion: cached
    envs.replace([_env("bot-eu", "2", {"email": "new@x.io"})])
    assert asyncio.run(rendered("bot-eu"))[0].instructions == "Mail new@x.io. {{missing}}"
    assert content.agents[0].instructions == "Mail {{email}}. {{missing}}"  # the cached content is untouched
