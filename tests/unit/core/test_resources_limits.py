"""The limits table (tests/limits.py) holds for the pydantic types and for the generated CRD schema."""

from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from dockyard_api.app import create_app
from dockyard_api.public.schemas import MODEL_DEPLOY_SAMPLE, ModelDeployBody
from dockyard_core.crdgen import openapi_schema
from dockyard_core.devices import DEVICE_TYPES
from dockyard_core.resources.structural import Schema, to_structural
from dockyard_core.resources.v1alpha1 import ModelDeployment, ModelDeploymentSpec
from tests.limits import ABSENT, LIMITS, Limit, deploy_request, manifest, schema_at, valid_spec
from tests.unit.crd_validator import CrdValidator

# SPEC.md "Limits" and §4, retyped on purpose: the table derives its numbers from the types.
SPEC_RANGES: dict[str, tuple[tuple[str, ...], float, float]] = {
    "temperature": (("hyperParameters", "temperature"), 0, 2),
    "maxTokens": (("hyperParameters", "maxTokens"), 0, 512),
    "topP": (("hyperParameters", "topP"), 0, 1),
    "topK": (("hyperParameters", "topK"), 1, 100),
    "maxBatchSize": (("scalingParameters", "maxBatchSize"), 1, 256),
    "minReplicas": (("scalingParameters", "minReplicas"), 1, 10),
    "maxReplicas": (("scalingParameters", "maxReplicas"), 1, 50),
    "scaleUpDelay": (("scalingParameters", "scaleUpDelay"), 1, 1000),
    "scaleDownDelay": (("scalingParameters", "scaleDownDelay"), 50, 2000),
}
SPEC_INTEGERS = {"maxTokens", "topK", "maxBatchSize", "minReplicas", "maxReplicas", "scaleUpDelay", "scaleDownDelay"}
SPEC_ENUMS: dict[str, tuple[tuple[str, ...], set[str]]] = {
    "deviceType": (
        ("deviceType",),
        {
            "g4dn.xlarge",
            "g5.xlarge",
            "g5.2xlarge",
            "g6e.xlarge",
            "g4dn.12xlarge",
            "g5.12xlarge",
            "g5.48xlarge",
            "g4dn.metal",
        },
    ),
    # SPEC's sample sends "" for both; Dockyard reads it as "the default".
    "optimizationType": (("optimizationInfo", "optimizationType"), {"ctranslate2", "vllm", ""}),
    "quantizationType": (("optimizationInfo", "quantizationType"), {"no_quantization", "int8_float16", ""}),
    "modelType": (("modelType",), {"openSource", "fineTune"}),
}
SPEC_REQUIRED = {("name",), ("deviceType",), ("modelType",)} | {
    ("hyperParameters", f) for f in ("temperature", "maxTokens", "topP", "topK")
}

CASES = [
    pytest.param(limit, value, accepted, id=f"{limit.subject}:{limit.case_id(value)}")
    for limit in LIMITS
    for value, accepted in limit.cases()
]


@pytest.fixture(scope="module")
def crd() -> CrdValidator:
    return CrdValidator(openapi_schema(ModelDeployment))


def _pydantic_accepts(spec: dict[str, Any]) -> bool:
    try:
        ModelDeploymentSpec.model_validate(spec)
    except ValidationError:
        return False
    return True


def test_the_valid_spec_is_valid(crd: CrdValidator) -> None:
    assert _pydantic_accepts(valid_spec())
    assert crd.errors(manifest(valid_spec())) == []


@pytest.mark.parametrize(("limit", "value", "accepted"), CASES)
def test_pydantic_model(limit: Limit, value: Any, accepted: bool) -> None:
    assert _pydantic_accepts(limit.spec(value)) is accepted


@pytest.mark.parametrize(("limit", "value", "accepted"), CASES)
def test_crd_schema(crd: CrdValidator, limit: Limit, value: Any, accepted: bool) -> None:
    errors = crd.errors(manifest(limit.spec(value)))
    assert (errors == []) is accepted, errors


@pytest.mark.parametrize("subject", sorted(SPEC_RANGES))
def test_ranges_are_spec_numbers(subject: str) -> None:
    path, low, high = SPEC_RANGES[subject]
    node = schema_at(path)
    assert (node["minimum"], node["maximum"]) == (low, high)
    assert node["type"] == ("integer" if subject in SPEC_INTEGERS else "number")
    assert not node.get("exclusiveMinimum")
    assert not node.get("exclusiveMaximum")
    (row,) = [limit for limit in LIMITS if limit.subject == subject]
    assert row.path == path
    assert low in row.inside
    assert high in row.inside


@pytest.mark.parametrize("subject", sorted(SPEC_ENUMS))
def test_enums_are_spec_values(subject: str) -> None:
    path, values = SPEC_ENUMS[subject]
    assert set(schema_at(path)["enum"]) == values
    (row,) = [limit for limit in LIMITS if limit.subject == subject]
    assert set(row.inside) == values


def test_device_types_come_from_the_catalog() -> None:
    assert tuple(schema_at(("deviceType",))["enum"]) == DEVICE_TYPES


def test_every_spec_limit_and_required_field_has_a_row() -> None:
    subjects = {limit.subject for limit in LIMITS if limit.source == "SPEC"}
    assert subjects >= set(SPEC_RANGES) | set(SPEC_ENUMS)
    required = {limit.path for limit in LIMITS if limit.outside == (ABSENT,)}
    assert required >= SPEC_REQUIRED | {("modelRef",)}


def test_minimal_deploy_body_is_accepted(crd: CrdValidator) -> None:
    """SPEC.md §4 marks only name and deviceType required in the body (+ modelId, modelType)."""
    spec = {"modelRef": "m", "modelType": "fineTune", "name": "m", "deviceType": "g4dn.xlarge"}
    assert _pydantic_accepts(spec)
    assert crd.errors(manifest(spec)) == []


# --- the public deploy call (SPEC.md §4) checks the same table --------------------------------------

DEPLOY_PATH = "/e/{namespace}/{environment}/api/public/models/{modelId}/deploy"


@cache
def _deploy_parameters() -> dict[str, Schema]:
    """The path and query parameter schemas the facade enforces, from its OpenAPI document."""
    operation = create_app().openapi()["paths"][DEPLOY_PATH]["post"]
    return {p["name"]: p for p in operation["parameters"]}


def _public_call_accepts(spec: dict[str, Any]) -> bool:
    """Offline twin of the facade's validation: path and query parameters as its OpenAPI document declares
    them (what FastAPI enforces), the body with its pydantic model."""
    call = deploy_request(spec)
    params = _deploy_parameters()
    values = {"modelId": call.model_id, **call.params}
    for name in ("modelId", "modelType"):
        if name not in values:
            return False
        try:
            jsonschema.validate(values[name], params[name]["schema"])
        except jsonschema.ValidationError:
            return False
    try:
        ModelDeployBody.model_validate(call.body)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize(("limit", "value", "accepted"), CASES)
def test_public_deploy_call(limit: Limit, value: Any, accepted: bool) -> None:
    assert _public_call_accepts(limit.spec(value)) is accepted


def _without_docs(schema: Any) -> Any:
    """A schema without descriptions and defaults (the API's docs may word a field differently)."""
    if isinstance(schema, dict):
        return {k: _without_docs(v) for k, v in schema.items() if k not in ("description", "default")}
    if isinstance(schema, list):
        return [_without_docs(v) for v in schema]
    return schema


def test_the_deploy_body_is_made_of_the_resource_types() -> None:
    """One source of truth: every body member but name has exactly the schema of the CRD's field."""
    body = to_structural(ModelDeployBody.model_json_schema(by_alias=True, mode="validation"))
    spec = to_structural(ModelDeploymentSpec.model_json_schema(by_alias=True, mode="validation"))
    # baseModel is Dockyard's addition for adapters (set on the adapter Model, not on the deployment)
    assert set(body["properties"]) - {"baseModel"} == set(spec["properties"]) - {"modelRef", "modelType", "replicas"}
    for field, schema in body["properties"].items():
        if field not in ("name", "baseModel"):
            assert _without_docs(schema) == _without_docs(spec["properties"][field]), field
    # name is any text within the CRD's spec.name bounds (the ModelDeployment's own name is derived from it);
    # the body checks more than its schema says (a letter or digit, no control characters: test_deploy_body)
    assert _without_docs(body["properties"]["name"]) == _without_docs(spec["properties"]["name"])
    assert body["properties"]["name"]["maxLength"] == 253
    assert set(body["required"]) == {"name", "deviceType"}


def test_the_spec_sample_body_is_accepted_as_sent() -> None:
    parsed = ModelDeployBody.model_validate(MODEL_DEPLOY_SAMPLE)
    assert parsed.optimization_info is not None
    assert (parsed.optimization_info.optimization_type, parsed.optimization_info.quantization_type) == ("", "")
