"""The management API names each field of a refused version: the version webhook's problems become causes."""

from __future__ import annotations

from dockyard_api.management.apps.service import problem_causes


def test_each_problem_of_the_webhook_becomes_a_cause_with_its_field() -> None:
    message = (
        'admission webhook "validate-appversion.dockyard.dev" denied the request: the version is not valid: '
        "spec.agents[0].model: agent triage has no model (name its ModelDeployment); "
        "spec.mcpServers[1]: MCP server docs at http://x/mcp lists no tools (tools/list is empty)"
    )
    assert problem_causes(message) == [
        {
            "field": "spec.agents[0].model",
            "message": "agent triage has no model (name its ModelDeployment)",
            "reason": "FieldValueInvalid",
        },
        {
            "field": "spec.mcpServers[1]",
            "message": "MCP server docs at http://x/mcp lists no tools (tools/list is empty)",
            "reason": "FieldValueInvalid",
        },
    ]


def test_other_refusals_have_no_causes() -> None:
    assert problem_causes('appversions.dockyard.dev "bot-1.0.0" already exists') == []
    assert problem_causes("the version is not valid: something without a field") == []
