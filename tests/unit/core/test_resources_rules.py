"""Cross-field and transition rules: the CEL rule (run by cel-python) and its pydantic twin agree."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from dockyard_core.crdgen import kind_name, openapi_schema
from dockyard_core.resources.base import DockyardModel, KubeObject
from dockyard_core.resources.cel import Rule
from dockyard_core.resources.v1alpha1 import (
    KINDS,
    App,
    AppVersion,
    Environment,
    KnowledgeBase,
    Model,
    ModelDeployment,
    ModelDeploymentSpec,
    ObjectMeta,
    ScalingParameters,
    Tool,
    ToolDeployment,
)
from tests.unit.crd_validator import CrdValidator

EXAMPLES_DIR = Path(__file__).resolve().parents[3] / "docs" / "examples"
Edit = Callable[[dict[str, Any]], None]


def example(kind: type[KubeObject], index: int = 0) -> dict[str, Any]:
    docs = list(yaml.safe_load_all((EXAMPLES_DIR / f"{kind_name(kind).lower()}.yaml").read_text()))
    doc: dict[str, Any] = docs[index]
    return doc


def edited(doc: dict[str, Any], edit: Edit) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    edit(out)
    return out


def pydantic_errors(kind: type[KubeObject], doc: dict[str, Any]) -> list[str]:
    try:
        kind.model_validate(doc)
    except ValidationError as exc:
        return [str(e["msg"]) for e in exc.errors()]
    return []


# --- rules on one object: CEL and pydantic reject the same objects ---------------------------------


def _spec(**changes: Any) -> Edit:
    return lambda doc: doc["spec"].update(changes)


def _pop_spec(*keys: str) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        for key in keys:
            doc["spec"].pop(key)

    return edit


def _set_name(name: str) -> Edit:
    return lambda doc: doc["metadata"].update(name=name)


def _unpin_weather(doc: dict[str, Any]) -> None:
    doc["spec"]["toolVersions"] = [t for t in doc["spec"]["toolVersions"] if t["name"] != "weather"]


def _mcp_tools(*refs: str) -> Edit:
    def edit(doc: dict[str, Any]) -> None:
        doc["spec"]["agents"][0]["mcpTools"] = list(refs)
        doc["spec"]["mcpServers"] = [{"name": "docs", "url": "https://docs.example.com/mcp"}]

    return edit


def _duplicate_agent(doc: dict[str, Any]) -> None:
    doc["spec"]["agents"].append(copy.deepcopy(doc["spec"]["agents"][0]))


def _duplicate_agent_tool(doc: dict[str, Any]) -> None:
    doc["spec"]["agents"][0]["tools"] = ["weather", "weather"]


RULE_CASES: list[tuple[type[KubeObject], int, str, Edit, str | None]] = [
    # (kind, example index, case, edit, expected message fragment or None when accepted)
    (ModelDeployment, 0, "min > max", lambda d: d["spec"]["scalingParameters"].update(minReplicas=4), "minReplicas"),
    (ModelDeployment, 0, "min == max", lambda d: d["spec"]["scalingParameters"].update(minReplicas=3), None),
    (ModelDeployment, 0, "no max", lambda d: d["spec"]["scalingParameters"].pop("maxReplicas"), None),
    (ModelDeployment, 0, "64-character name", _set_name("m" * 64), "at most 63 characters"),
    (ModelDeployment, 0, "63-character name", _set_name("m" * 63), None),
    (Model, 0, "both sources", lambda d: d["spec"]["source"].update(hub={"id": "a/b"}), "exactly one of upload"),
    (Model, 1, "no source", _spec(source={}), "exactly one of upload or hub"),
    (Model, 1, "baseModel without adapter", _spec(baseModel="llama-3-8b-instruct"), "only to adapters"),
    (Model, 1, "adapter with baseModel", _spec(isAdapter=True, baseModel="llama-3-8b-instruct"), None),
    (Tool, 0, "container and endpoint", _spec(endpoint="https://x.example.com"), "exactly one of container"),
    (Tool, 1, "neither", _pop_spec("endpoint"), "exactly one of container"),
    (Tool, 0, "wrong object name", _set_name("weather"), "metadata.name must be"),
    (AppVersion, 0, "wrong object name", _set_name("support-bot-1.0.1"), "metadata.name must be"),
    (AppVersion, 0, "unpinned tool", _unpin_weather, "every tool an agent uses"),
    (AppVersion, 0, "MCP tool of no server", _mcp_tools("wiki/x"), "every MCP tool an agent names"),
    (AppVersion, 0, "MCP tool of an MCP server", _mcp_tools("docs/search"), None),
    (AppVersion, 0, "MCP tool of an agent's tool", _mcp_tools("crm-lookup/now"), None),  # the webhook: is it MCP
    (AppVersion, 0, "MCP tool without its server", _mcp_tools("search"), "match"),
    (AppVersion, 0, "unpinned knowledge base", lambda d: d["spec"].pop("knowledgeBaseVersions"),
     "every knowledge base an agent searches"),
    (KnowledgeBase, 0, "wrong object name", _set_name("harbour-rules"), "metadata.name must be"),
    (KnowledgeBase, 0, "overlap too large", _spec(chunking={"maxChars": 200, "overlapChars": 100}),
     "overlapChars must be less than half"),
    (App, 0, "MCP tool of no server in the draft", _mcp_tools("wiki/x"), None),
    (App, 0, "duplicate agent", _duplicate_agent, "uplicate"),
    (App, 0, "duplicate agent tool", _duplicate_agent_tool, "uplicate"),
    (App, 0, "unpinned tool in the draft", _unpin_weather, None),
    (Environment, 0, "oidc without its provider", _spec(access={"webClient": "oidc"}), "webClient oidc needs"),
    (Environment, 0, "oidc with its provider",
     _spec(access={"webClient": "oidc", "oidc": {"issuer": "https://id.example.com", "clientId": "web"}}), None),
    (Environment, 0, "signIn (deprecated) still accepted", _spec(access={"webClient": "signIn"}), None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "index", "edit", "expected"),
    [pytest.param(k, i, e, x, id=f"{kind_name(k)}:{c}") for k, i, c, e, x in RULE_CASES],
)
def test_rule_on_create(kind: type[KubeObject], index: int, edit: Edit, expected: str | None) -> None:
    doc = edited(example(kind, index), edit)
    crd_errors = CrdValidator(openapi_schema(kind)).errors(doc)
    py_errors = pydantic_errors(kind, doc)
    if expected is None:
        assert crd_errors == []
        assert py_errors == []
    else:
        assert any(expected in e for e in crd_errors), crd_errors
        assert any(expected in e for e in py_errors), py_errors


# --- transition rules: what may change after creation ---------------------------------------------


def _upload(**changes: Any) -> Edit:
    return lambda doc: doc["spec"]["source"]["upload"].update(changes)


TRANSITIONS: list[tuple[type[KubeObject], int, str, Edit, Edit | None, str | None]] = [
    # (kind, example, case, edit before create (or None), edit of the update, rejection fragment or None)
    (ModelDeployment, 0, "modelRef", None, _spec(modelRef="other-model"), "modelRef is immutable"),
    (ModelDeployment, 0, "deviceType (redeploy)", None, _spec(deviceType="g6e.xlarge"), None),
    (ModelDeployment, 0, "replicas (scale)", None, _spec(replicas=2), None),
    (Model, 0, "source", None, _upload(fileSize=1), "source is immutable"),
    (Model, 0, "isAdapter", None, _spec(isAdapter=True), "isAdapter is immutable"),
    (Model, 0, "modelType", None, _spec(modelType="openSource"), None),
    (Model, 0, "baseModel set later", _spec(isAdapter=True), _spec(baseModel="llama-3-8b-instruct"), None),
    (
        Model,
        0,
        "baseModel changed",
        _spec(isAdapter=True, baseModel="a"),
        _spec(baseModel="b"),
        "baseModel is immutable",
    ),
    (Model, 0, "baseModel removed", _spec(isAdapter=True, baseModel="a"), _pop_spec("baseModel"), "cannot be removed"),
    (Tool, 0, "description", None, _spec(description="changed"), "immutable tool version"),
    (ToolDeployment, 0, "toolRef", None, _spec(toolRef="weather-1.3.0"), "toolRef is immutable"),
    (ToolDeployment, 0, "isAsync", None, _spec(isAsync=False), None),
    (AppVersion, 0, "description", None, _spec(description="changed"), "AppVersion is immutable"),
    (KnowledgeBase, 0, "documents (import, delete)", None, _spec(documents=[]), None),
    (KnowledgeBase, 0, "chunking", None, _spec(chunking={"maxChars": 800}), "chunking is immutable"),
    (KnowledgeBase, 0, "embedding changed", None, _spec(embedding={"modelDeployment": "x"}), "embedding is immutable"),
    (KnowledgeBase, 0, "embedding removed", None, _pop_spec("embedding"), "embedding is immutable"),
    (App, 0, "draft edit", None, _spec(description="changed"), None),
    (Environment, 0, "appRef", None, _spec(appRef="other-app"), "appRef is immutable"),
    (Environment, 0, "appVersion (deploy / roll back)", None, _spec(appVersion="0.9.0"), None),
]


@pytest.mark.parametrize(
    ("kind", "index", "before", "edit", "expected"),
    [pytest.param(k, i, b, e, x, id=f"{kind_name(k)}:{c}") for k, i, c, b, e, x in TRANSITIONS],
)
def test_rule_on_update(
    kind: type[KubeObject], index: int, before: Edit | None, edit: Edit, expected: str | None
) -> None:
    old = example(kind, index) if before is None else edited(example(kind, index), before)
    validator = CrdValidator(openapi_schema(kind))
    assert validator.errors(old) == []
    assert validator.errors(old, old=old) == [], "an unchanged update must pass"
    new = edited(old, edit)
    assert pydantic_errors(kind, new) == [], "the new object is valid on its own"
    errors = validator.errors(new, old=old)
    if expected is None:
        assert errors == []
    else:
        assert any(expected in e for e in errors), errors


# --- the rule declarations ----------------------------------------------------------------------------


def _models(root: type[DockyardModel]) -> set[type[DockyardModel]]:
    seen: set[type[DockyardModel]] = set()
    stack = [root]
    while stack:
        model = stack.pop()
        if model in seen:
            continue
        seen.add(model)
        for sub in model.__subclasses__():
            stack.append(sub)
    return seen


def test_every_rule_has_a_python_twin_or_is_a_transition_rule() -> None:
    rules: list[Rule] = [rule for model in _models(DockyardModel) for rule in model.cel_rules]
    assert rules
    assert all(rule.check is not None or rule.is_transition for rule in rules)
    with pytest.raises(ValueError, match="needs a Python check"):
        Rule("self.a < self.b", "a must be less than b")


# --- Python API ---------------------------------------------------------------------------------------


def test_construct_in_python_and_round_trip() -> None:
    mdep = ModelDeployment(
        metadata=ObjectMeta(name="llama", namespace="team-a"),
        spec=ModelDeploymentSpec(model_ref="llama", model_type="openSource", name="llama", device_type="g5.xlarge"),
    )
    body = mdep.to_manifest()
    assert body["apiVersion"] == "dockyard.dev/v1alpha1"
    assert body["kind"] == "ModelDeployment"
    assert body["metadata"] == {"name": "llama", "namespace": "team-a"}
    assert body["spec"]["modelRef"] == "llama"
    assert body["spec"]["deviceType"] == "g5.xlarge"
    assert body["spec"]["scalingParameters"] == {
        "maxBatchSize": 256,
        "minReplicas": 1,
        "scaleUpDelay": 1000,
        "scaleDownDelay": 2000,
    }
    assert ModelDeployment.model_validate(body) == mdep
    assert CrdValidator(openapi_schema(ModelDeployment)).errors(body) == []


def test_unknown_fields_are_rejected_but_unknown_metadata_is_kept() -> None:
    doc = example(ModelDeployment)
    assert pydantic_errors(ModelDeployment, edited(doc, _spec(devicetype="g5.xlarge")))
    doc["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    assert ModelDeployment.model_validate(doc).to_manifest()["metadata"]["managedFields"] == [{"manager": "kubectl"}]


def test_status_round_trips_what_the_operator_writes() -> None:
    status = {
        "observedGeneration": 2,
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-02T03:04:05Z", "reason": "Available"}
        ],
        "job": {"dockStatusId": "d-1", "jobType": "MODELS", "action": "DEPLOY", "status": "SUCCESS"},
        "replicas": 1,
        "readyReplicas": 1,
        "selector": "dockyard.dev/model-deployment=llama",
        "runtime": "vllm",
    }
    doc = {**example(ModelDeployment), "status": status}
    obj = ModelDeployment.model_validate(doc)
    assert obj.status.job is not None
    assert obj.status.job.status == "SUCCESS"
    assert CrdValidator(openapi_schema(ModelDeployment)).errors(obj.to_manifest()) == []


@pytest.mark.parametrize(
    ("minimum", "maximum", "wanted", "runs"),
    [(1, None, None, 1), (2, None, 5, 2), (1, 4, None, 1), (1, 4, 3, 3), (1, 4, 9, 4), (2, 4, 1, 2)],
)
def test_desired_replicas_stay_within_the_scaling_bounds(
    minimum: int, maximum: int | None, wanted: int | None, runs: int
) -> None:
    scaling = ScalingParameters(min_replicas=minimum, max_replicas=maximum)
    assert scaling.clamp(wanted) == runs


def test_object_names_follow_the_name_rules() -> None:
    assert Tool.object_name("weather", "1.2.0") == example(Tool)["metadata"]["name"]
    assert AppVersion.object_name("support-bot", "1.0.0") == example(AppVersion)["metadata"]["name"]


def test_kinds_are_all_exported() -> None:
    assert [kind_name(k) for k in KINDS] == [
        "Model",
        "ModelDeployment",
        "Tool",
        "ToolDeployment",
        "KnowledgeBase",
        "App",
        "AppVersion",
        "Environment",
    ]
