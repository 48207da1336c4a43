"""The ``versions`` command group: an app's versions (create from the draft, list, preview, restore into
the draft, delete; management API)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from dockyard_client.client import DockyardClient

from .output import err, fields, print_json, table
from .state import CONTEXT, JsonFlag, YesFlag, confirm, management

versions_app = typer.Typer(
    help="App versions: create, list, preview, restore into the draft, delete.",
    epilog="\b\nExamples:\n  dockyard versions create demo 1.0.0 --name 'First release'\n  dockyard versions list demo",
    context_settings=CONTEXT,
    rich_markup_mode=None,
    no_args_is_help=True,
)


def _version_row(v: Any) -> list[Any]:
    deployed = ", ".join(str(d.get("environment", d)) if isinstance(d, dict) else str(d) for d in v.deployed_in)
    return [v.version, v.name, v.description, deployed, v.created_at]


@versions_app.command(
    "create",
    epilog="\b\nExamples:\n"
    "  dockyard versions create demo 1.0.0 --name 'First release' --description 'triage + weather'",
)
def versions_create(
    ctx: typer.Context,
    app_name: Annotated[str, typer.Argument(metavar="APP")],
    version: Annotated[str, typer.Argument(help="MAJOR.MINOR.PATCH")],
    name: Annotated[str, typer.Option(help="the version's name")],
    description: Annotated[str, typer.Option(help="what changed")] = "",
    json_output: JsonFlag = False,
) -> None:
    """Create a version from the app's draft (validated first: tools, models, MCP configurations)."""

    def run(client: DockyardClient) -> None:
        v = client.create_version(app_name, version, name, description)
        print_json(v) if json_output else err.print(f"version {v.version} of {v.app} created")

    management(ctx, json_output, run)


@versions_app.command("list", epilog="\b\nExamples:\n  dockyard versions list demo")
def versions_list(
    ctx: typer.Context, app_name: Annotated[str, typer.Argument(metavar="APP")], json_output: JsonFlag = False
) -> None:
    """The app's versions (the full history is kept)."""

    def run(client: DockyardClient) -> None:
        items = client.list_versions(app_name)
        if json_output:
            print_json(items)
        else:
            table(["VERSION", "NAME", "DESCRIPTION", "DEPLOYED IN", "CREATED"], map(_version_row, items))

    management(ctx, json_output, run)


@versions_app.command("preview", epilog="\b\nExamples:\n  dockyard versions preview demo 1.0.0 --json")
def versions_preview(
    ctx: typer.Context,
    app_name: Annotated[str, typer.Argument(metavar="APP")],
    version: Annotated[str, typer.Argument()],
    json_output: JsonFlag = False,
) -> None:
    """Preview a version: its agents, tool versions and MCP servers."""

    def run(client: DockyardClient) -> None:
        v = client.get_version(app_name, version)
        if json_output:
            print_json(v)
            return
        fields([("version", v.version), ("name", v.name), ("description", v.description)])
        table(
            ["AGENT", "VERSION", "MODEL", "TOOLS"],
            ([a.get("name"), a.get("version"), a.get("model"), ", ".join(a.get("tools", []))] for a in v.agents),
        )
        table(["TOOL", "VERSION"], ([t.get("name"), t.get("version")] for t in v.tool_versions))
        table(["MCP SERVER", "URL"], ([m.get("name"), m.get("url")] for m in v.mcp_servers))

    management(ctx, json_output, run)


@versions_app.command("restore", epilog="\b\nExamples:\n  dockyard versions restore demo 1.0.0 --yes")
def versions_restore(
    ctx: typer.Context,
    app_name: Annotated[str, typer.Argument(metavar="APP")],
    version: Annotated[str, typer.Argument()],
    yes: YesFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Restore a version into the draft: overwrites the whole draft and cannot be undone (asks first)."""
    confirm(yes, f"overwrite the whole draft of {app_name} with version {version}? This cannot be undone")

    def run(client: DockyardClient) -> None:
        restored = client.restore_version(app_name, version)
        print_json(restored) if json_output else err.print(f"draft of {restored.name} restored from {version}")

    management(ctx, json_output, run)


@versions_app.command("delete", epilog="\b\nExamples:\n  dockyard versions delete demo 0.9.0 --yes")
def versions_delete(
    ctx: typer.Context,
    app_name: Annotated[str, typer.Argument(metavar="APP")],
    version: Annotated[str, typer.Argument()],
    yes: YesFlag = False,
) -> None:
    """Delete a version permanently (refused while an environment deploys it)."""
    confirm(yes, f"delete version {version} of {app_name} permanently?")

    def run(client: DockyardClient) -> None:
        client.delete_version(app_name, version)
        err.print(f"version {version} deleted")

    management(ctx, False, run)
