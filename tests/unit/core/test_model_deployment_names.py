"""The deploy call's ``name`` is any text (SPEC.md §4, docs/public-api.md 'Deploy a model'): the rule it
must meet (check_display_name) and the ModelDeployment object name derived from it (model_deployment_name)."""

from __future__ import annotations

import re

import pytest

from dockyard_core.resources.v1alpha1.common import DNS_LABEL_PATTERN
from dockyard_core.resources.v1alpha1.modeldeployment import check_display_name, model_deployment_name

DNS_LABEL = re.compile(DNS_LABEL_PATTERN)
NAMES = [
    "Llama 3 8B",
    "llama 3 8b",
    "LLAMA-3-8B",
    "llama-3-8b ",
    "llama_3_8b",
    "Llama 3 8B (support team)",
    "Café crème",
    "模型",
    "a" * 253,
    "a" * 252 + "b",
    "x" * 64,
    "-leading-dash",
    "trailing-dash-",
    "two--dashes",
    "dotted.name",
    "Llama 3, 8B = tuned",
]


@pytest.mark.parametrize("name", NAMES)
def test_the_object_name_is_a_dns_label_derived_the_same_way_every_time(name: str) -> None:
    derived = model_deployment_name(name)
    assert DNS_LABEL.match(derived), derived
    assert 1 <= len(derived) <= 63
    assert model_deployment_name(name) == derived  # deterministic
    assert model_deployment_name(derived) == derived  # the derived name is itself a name that maps to itself


@pytest.mark.parametrize("name", ["llama-3-8b", "chat", "llama-3-8b-instruct", "a", "0", "x" * 63, "a-b-c-1"])
def test_a_dns_label_is_the_object_name_unchanged(name: str) -> None:
    assert model_deployment_name(name) == name  # every name valid before keeps its deployment


def test_distinct_names_never_share_an_object() -> None:
    derived = [model_deployment_name(name) for name in [*NAMES, "llama-3-8b"]]
    assert len(set(derived)) == len(derived)
    # the slug is readable and the hash tells apart the names that slug alike
    assert re.fullmatch(r"llama-3-8b-[0-9a-f]{8}", model_deployment_name("Llama 3 8B"))
    assert model_deployment_name("Llama 3 8B") != model_deployment_name("llama-3-8b")
    assert model_deployment_name("Llama 3 8B") != model_deployment_name("llama 3 8b")
    assert model_deployment_name("Café crème").startswith("cafe-creme-")
    assert re.fullmatch(r"model-[0-9a-f]{8}", model_deployment_name("模型"))
    assert len(model_deployment_name("a" * 253)) == 63


@pytest.mark.parametrize("name", ["Llama 3 8B", "模型", "a", "x" * 253, "Llama 3, 8B = tuned", "r2-d2 ✓"])
def test_any_text_with_a_letter_or_digit_is_a_name(name: str) -> None:
    assert check_display_name(name) == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "must not be empty"),
        ("x" * 254, "at most 253 characters"),
        ("Llama\n3", "control characters"),
        ("Llama\t3", "control characters"),
        ("llama\x00", "control characters"),
        ("Llama\u2028 3", "control characters"),
        ("Llama \ud800", "lone surrogates"),
        (" Llama 3", "whitespace"),
        ("Llama 3 ", "whitespace"),
        ("---", "letter or digit"),
        ("!?", "letter or digit"),
        ("   ", "letter or digit"),
    ],
)
def test_names_refused_say_why(name: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        check_display_name(name)
