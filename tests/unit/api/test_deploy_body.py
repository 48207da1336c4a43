"""The public deploy body is derived from the ModelDeployment spec: every member is a spec field of the
same type (so the CRD's limits apply), and the spec is built from the body by name, not field by field."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from dockyard_api.public.schemas import MODEL_DEPLOY_EXAMPLES, MODEL_DEPLOY_SAMPLE, NOT_SPEC_FIELDS, ModelDeployBody
from dockyard_core.resources.v1alpha1 import ModelDeploymentSpec, ScalingParameters

OWN_TYPE = {"name", "scaling_parameters"}
"""``name`` is checked beyond the spec's length (no control characters, a letter or digit: the object is named
after it); ``scalingParameters`` may be absent."""


def test_every_body_member_is_a_spec_field_of_the_same_type() -> None:
    spec = ModelDeploymentSpec.model_fields
    for name, field in ModelDeployBody.model_fields.items():
        if name in NOT_SPEC_FIELDS:  # Dockyard's additions (baseModel, for adapters)
            continue
        assert name in spec, name
        if name not in OWN_TYPE:
            assert field.annotation == spec[name].annotation, name
            assert field.metadata == spec[name].metadata, name


def test_the_spec_of_a_body_carries_every_member() -> None:
    for example in MODEL_DEPLOY_EXAMPLES.values():
        body = ModelDeployBody.model_validate(example["value"])
        spec = body.to_spec("llama-3-8b", "openSource")
        assert (spec.model_ref, spec.model_type) == ("llama-3-8b", "openSource")
        assert spec.name == body.name
        assert spec.is_deployed_previously == body.is_deployed_previously
        assert spec.hyper_parameters == body.hyper_parameters
        assert spec.scaling_parameters == (body.scaling_parameters or ScalingParameters())
        assert spec.device_type == body.device_type
        assert spec.optimization_info == body.optimization_info


def test_base_model_is_not_a_spec_field_and_is_an_object_name() -> None:
    body = ModelDeployBody.model_validate({**MODEL_DEPLOY_SAMPLE, "baseModel": "tiny-llama-1a2b3c4d"})
    assert body.base_model == "tiny-llama-1a2b3c4d"
    assert "base_model" not in body.to_spec("lora", "fineTune").model_dump()
    with pytest.raises(ValidationError) as caught:
        ModelDeployBody.model_validate({**MODEL_DEPLOY_SAMPLE, "baseModel": "Not A Name"})
    assert [e["loc"] for e in caught.value.errors()] == [("baseModel",)]


def test_the_name_is_any_text_and_names_the_object_after_it() -> None:
    body = ModelDeployBody.model_validate({**MODEL_DEPLOY_SAMPLE, "name": "Llama 3 8B"})
    assert body.name == "Llama 3 8B"
    assert re.fullmatch(r"llama-3-8b-[0-9a-f]{8}", body.object_name)
    assert body.to_spec("llama-3-8b", "openSource").name == "Llama 3 8B"  # spec.name: the name as sent
    # a DNS label names the object itself (every deployment name valid before keeps its object)
    assert ModelDeployBody.model_validate(MODEL_DEPLOY_SAMPLE).object_name == "llama-3-8b-instruct"


@pytest.mark.parametrize("name", ["", "---", "   ", "Llama\n3", " Llama", "x" * 254])
def test_a_name_without_a_letter_or_digit_or_with_control_characters_is_refused(name: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ModelDeployBody.model_validate({**MODEL_DEPLOY_SAMPLE, "name": name})
    assert [e["loc"] for e in caught.value.errors()] == [("name",)]
