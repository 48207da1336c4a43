"""The ``env`` command group: an app's environments (list, create, show, deploy a version, history,
rollback, delete) and their usage statistics (management API)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from dockyard_client.client import DockyardClient

from .output import err, fields, print_json, table
from .state import CONTEXT, JsonFlag, YesFlag, confirm, management

env_app = typer.Typer(
    help="Environments of an app: list, create, deploy a version, history, rollback, delete.",
    epilog="\b\nExamples:\n  dockyard env list demo\n  dockyard env create demo staging --version 1.0.0\n"
    "  dockyard env deploy demo-staging 1.1.0\n  dockyard env rollback demo-staging 1.0.0 --yes",
    context_settings=CONTEXT,
    rich_markup_mode=None,
    no_args_is_help=True,
)


def _env_row(e: Any) -> list[Any]:
    return [e.object_name, e.app_version, e.active_version, e.phase, e.api_base_url]


@env_app.command("list", epilog="\b\nExamples:\n  dockyard env list demo -n default\n  dockyard env list demo --json")
def env_list(
    ctx: typer.Context, app_name: Annotated[str, typer.Argument(metavar="APP")], json_output: JsonFlag = False
) -> None:
    """The app's environments (draft and every created one)."""

    def run(client: DockyardClient) -> None:
        items = client.list_environments(app_name)
        if json_output:
            print_json(items)
        else:
            table(["ENVIRONMENT", "LINKED", "ACTIVE", "PHASE", "API BASE URL"], map(_env_row, items))

    management(ctx, json_output, run)


@env_app.command(
    "create",
    epilog="\b\nExamples:\n  dockyard env create demo staging --version 1.0.0 --description 'QA'\n"
    "  dockyard env create demo production --json",
)
def env_create(
    ctx: typer.Context,
    app_name: Annotated[str, typer.Argument(metavar="APP")],
    name: Annotated[str, typer.Argument(help="environment name; its object name is <app>-<name>")],
    version: Annotated[str | None, typer.Option("--version", help="app version to deploy (default: the draft)")] = None,
    description: Annotated[str, typer.Option(help="what the environment is for")] = "",
    json_output: JsonFlag = False,
) -> None:
    """Create an environment of an app (name, description, app version)."""

    def run(client: DockyardClient) -> None:
        env = client.create_environment(app_name, name, description, version)
        if json_output:
            print_json(env)
        else:
            err.print(f"environment {env.object_name} created (version {env.app_version})")

    management(ctx, json_output, run)


@env_app.command("show", epilog="\b\nExamples:\n  dockyard env show demo-staging")
def env_show(
    ctx: typer.Context, environment: Annotated[str, typer.Argument(metavar="ENV")], json_output: JsonFlag = False
) -> None:
    """An environment: linked version, URLs, cURL script, history and pre-production checklist."""

    def run(client: DockyardClient) -> None:
        env = client.get_environment(environment)
        if json_output:
            print_json(env)
            return
        fields(
            [
                ("environment", env.object_name),
                ("app", env.app),
                ("linked version", env.app_version),
                ("active version", env.active_version),
                ("phase", env.phase),
                ("web client", env.web_client_url),
                ("API base URL", env.api_base_url),
                ("widget script", env.widget_script_url),
            ]
        )
        table(["CATEGORY", "ITEM", "STATE", "DETAIL"], ([c.category, c.item, c.state, c.detail] for c in env.checklist))

    management(ctx, json_output, run)


@env_app.command("deploy", epilog="\b\nExamples:\n  dockyard env deploy demo-staging 1.1.0")
def env_deploy(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    version: Annotated[str, typer.Argument(help="the app version, MAJOR.MINOR.PATCH")],
    json_output: JsonFlag = False,
) -> None:
    """Deploy an app version to an environment (a new history entry)."""

    def run(client: DockyardClient) -> None:
        env = client.deploy_environment(environment, version)
        if json_output:
            print_json(env)
        else:
            err.print(f"{env.object_name}: version {env.app_version} deployed (phase {env.phase})")

    management(ctx, json_output, run)


@env_app.command("history", epilog="\b\nExamples:\n  dockyard env history demo-production")
def env_history(
    ctx: typer.Context, environment: Annotated[str, typer.Argument(metavar="ENV")], json_output: JsonFlag = False
) -> None:
    """The deployment history: version, when, by whom, Active or Previous."""

    def run(client: DockyardClient) -> None:
        items = client.history(environment)
        if json_output:
            print_json(items)
        else:
            table(
                ["VERSION", "DEPLOYED", "BY", "STATUS"],
                ([h.version, h.deployed_at, h.deployed_by, h.status] for h in items),
            )

    management(ctx, json_output, run)


@env_app.command("rollback", epilog="\b\nExamples:\n  dockyard env rollback demo-production 1.0.0 --yes")
def env_rollback(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    version: Annotated[str, typer.Argument(help="a Previous version of the history")],
    yes: YesFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Roll back to a previous version from the history (asks for confirmation)."""
    confirm(yes, f"roll {environment} back to version {version}?")

    def run(client: DockyardClient) -> None:
        env = client.rollback_environment(environment, version)
        if json_output:
            print_json(env)
        else:
            err.print(f"{env.object_name}: rolled back to version {env.app_version}")

    management(ctx, json_output, run)


@env_app.command("delete", epilog="\b\nExamples:\n  dockyard env delete demo-staging --yes")
def env_delete(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    yes: YesFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Delete an environment: endpoints off, keys revoked, resources released (audit log and usage kept)."""
    confirm(yes, f"delete environment {environment}? This cannot be undone")

    def run(client: DockyardClient) -> None:
        done = client.delete_environment(environment)
        if json_output:
            print_json(done)
        else:
            err.print(f"{done.deleted} deleted: {done.message} ({done.audit_record})")

    management(ctx, json_output, run)


@env_app.command("usage", epilog="\b\nExamples:\n  dockyard env usage demo-production --from 2026-11-01 --json")
def env_usage(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    since: Annotated[str | None, typer.Option("--from", help="first UTC day, YYYY-MM-DD")] = None,
    until: Annotated[str | None, typer.Option("--to", help="last UTC day, YYYY-MM-DD")] = None,
    json_output: JsonFlag = False,
) -> None:
    """Usage statistics of an environment (calls, errors, rate-limited calls, tokens) per day and key."""

    def run(client: DockyardClient) -> None:
        report = client.usage(environment, since, until)
        print_json(report) if json_output else fields(
            sorted((k, v) for k, v in report.items() if not isinstance(v, dict | list))
        )
        if not json_output and isinstance(report.get("totals"), dict):
            fields(report["totals"].items())

    management(ctx, json_output, run)
