"""The ``tool`` command group: test-call a tool of the version active in an environment (management API);
the outcome is recorded and counts for the checklist item "Tools deployed and tested"."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from dockyard_client.client import DockyardClient

from .exits import EXIT_FAILED, EXIT_USAGE, fail
from .output import fields, print_json
from .state import CONTEXT, JsonFlag, management

tool_app = typer.Typer(
    help="Tools of the version active in an environment.",
    epilog='\b\nExamples:\n  dockyard tool test demo-production weather --args \'{"city": "Oslo"}\'\n'
    '  dockyard tool test demo-production docs/search --args \'{"query": "tls"}\'',
    rich_markup_mode=None,
    no_args_is_help=True,
    context_settings=CONTEXT,
)


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(EXIT_USAGE, f"--args is not JSON: {exc.msg} (line {exc.lineno} column {exc.colno})")
    if not isinstance(value, dict):
        fail(EXIT_USAGE, '--args must be a JSON object, e.g. \'{"city": "Oslo"}\'')
    return value


@tool_app.command(
    "test",
    epilog='\b\nExamples:\n  dockyard tool test demo-production weather --args \'{"city": "Oslo"}\'\n'
    '  dockyard tool test demo-draft docs/search --args \'{"query": "tls"}\' --json\n\n'
    "\bExit status: 0 when the call passed, 1 when it was made and failed (recorded as failed), and the\n"
    "usual codes when it was refused before the call (bad arguments: 2, unknown tool: 4, not allowed: 3).",
)
def tool_test(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    tool: Annotated[
        str, typer.Argument(metavar="TOOL", help="an HTTP tool's name, or <server>/<tool> for an MCP tool")
    ],
    args: Annotated[str, typer.Option("--args", help="the call's arguments, a JSON object")] = "{}",
    json_output: JsonFlag = False,
) -> None:
    """Call one tool of the version active in ENV the way its agents call it, with the arguments validated
    against the tool's JSON Schema first; the outcome is recorded (who, when, passed, duration) and the
    checklist item "Tools deployed and tested" is Done once every tool has a passing call."""
    arguments = _arguments(args)

    def run(client: DockyardClient) -> None:
        answer = client.test_tool(environment, tool, arguments)
        if json_output:
            print_json(answer)
        else:
            what = answer.tool + (f" {answer.tool_version}" if answer.tool_version else "")
            fields(
                [
                    ("Tool", what),
                    ("Environment", f"{answer.environment} (version {answer.app_version})"),
                    ("Passed", "yes" if answer.passed else "no"),
                    ("Error", answer.error),
                    ("Duration", f"{answer.duration_ms} ms"),
                    ("Recorded on", answer.recorded_on),
                    ("Result", answer.result),
                ]
            )
        if not answer.passed:
            raise typer.Exit(EXIT_FAILED)

    management(ctx, json_output, run)
