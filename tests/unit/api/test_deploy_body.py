"""The public deploy body is derived from the ModelDeployment spec: every member is a spec field of the
same type (so the CRD's limits apply), and the spec is built from the body by name, not field by field."""

from __future__ import annotations

from dockyard_api.public.schemas import MODEL_DEPLOY_EXAMPLES, ModelDeployBody
from dockyard_core.resources.v1alpha1 import ModelDeploymentSpec, ScalingParameters

OWN_TYPE = {"name", "scaling_parameters"}
"""``name`` names the object (a DNS label, stricter than the spec's); ``scalingParameters`` may be absent."""


def test_every_body_member_is_a_spec_field_of_the_same_type() -> None:
    spec = ModelDeploymentSpec.model_fields
    for name, field in ModelDeployBody.model_fields.items():
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
