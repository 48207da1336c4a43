"""The Environment webhook refuses a ``spec.pii`` that cannot compile, naming the field (CEL cannot compile a
regular expression; docs/guardrails.md, "PII protection"), and the Environment type refuses it the same way."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dockyard_core.resources.v1alpha1.environment import EnvironmentSpec
from dockyard_operator import admission


def env(pii: object) -> dict[str, object]:
    return {"metadata": {"name": "shop-prod", "namespace": "team"}, "spec": {"appRef": "shop", "pii": pii}}


def test_a_pattern_that_cannot_compile_is_refused_naming_the_field() -> None:
    refusal = admission.environment_pii_refusal(
        env({"customPatterns": [{"name": "ORDER", "pattern": r"ORD-\d+"}, {"name": "BAD", "pattern": "([a-z]"}]})
    )
    assert refusal is not None
    assert refusal.code == 422
    assert refusal.message.startswith("spec.pii.customPatterns[1].pattern: is not a valid regular expression")


def test_a_pattern_matching_nothing_but_the_empty_text_is_refused() -> None:
    refusal = admission.environment_pii_refusal(env({"customPatterns": [{"name": "ANY", "pattern": ".*"}]}))
    assert refusal is not None
    assert (
        refusal.message
        == "spec.pii.customPatterns[0].pattern: matches the empty text: it must match at least one character"
    )


@pytest.mark.parametrize("pii", [None, {}, {"entities": ["US_SSN"], "customPatterns": [{"name": "X", "pattern": "x"}]}])
def test_a_spec_that_compiles_passes(pii: object) -> None:
    assert admission.environment_pii_refusal(env(pii)) is None


def test_the_environment_type_names_the_same_field() -> None:
    with pytest.raises(ValidationError) as raised:
        EnvironmentSpec.model_validate({"appRef": "shop", "pii": {"customPatterns": [{"name": "X", "pattern": "("}]}})
    error = raised.value.errors()[0]
    assert error["loc"] == ("pii", "customPatterns", 0, "pattern")
    assert "not a valid regular expression" in error["msg"]
    with pytest.raises(ValidationError, match="not a region phone numbers know: XX"):
        EnvironmentSpec.model_validate({"appRef": "shop", "pii": {"phoneRegions": ["XX"]}})
    with pytest.raises(ValidationError, match="already a built-in entity"):
        EnvironmentSpec.model_validate(
            {"appRef": "shop", "pii": {"customPatterns": [{"name": "US_SSN", "pattern": "x"}]}}
        )
