"""The console's tool test form: its arguments field, and a refused call's causes next to its fields."""

from __future__ import annotations

from dockyard_api.console.tooltests import call_errors, parse_arguments


def test_the_arguments_must_be_a_json_object() -> None:
    assert parse_arguments('{"city": "Oslo"}') == ({"city": "Oslo"}, None)
    assert parse_arguments("") == ({}, None)
    value, problem = parse_arguments("{city: Oslo}")
    assert value is None
    assert problem is not None
    assert problem.startswith("not JSON: ")
    assert parse_arguments("[1]") == (None, 'must be a JSON object, e.g. {"city": "Oslo"}')


def test_a_refusal_is_shown_next_to_the_field_it_names() -> None:
    schema = call_errors(
        "the arguments do not match",
        [{"field": "body.arguments", "message": "'city' is a required property"},
         {"field": "body.arguments.days", "message": "'x' is not of type 'integer'"}],
    )  # fmt: skip
    assert schema.of("arguments") == ["'city' is a required property", "days: 'x' is not of type 'integer'"]
    assert not schema.general
    unknown = call_errors("version 1.0.0 of app 'bot' has no tool 'nope'", {"field": "body.tool", "tools": []})
    assert unknown.of("tool") == ["version 1.0.0 of app 'bot' has no tool 'nope'"]
    forbidden = call_errors('user "vic" cannot create environments/tooltests', {"verb": "create"})
    assert forbidden.general == ['user "vic" cannot create environments/tooltests']
