"""The ``keys`` command group: an environment's API keys (create, list, revoke; management API)."""

from __future__ import annotations

from typing import Annotated

import typer

from dockyard_client.client import DockyardClient

from .output import err, print_json, table
from .state import CONTEXT, JsonFlag, management

keys_app = typer.Typer(
    help="API keys of an environment (the new key is printed once).",
    epilog="\b\nExamples:\n  dockyard keys create demo-production ci\n  dockyard keys list demo-production",
    rich_markup_mode=None,
    no_args_is_help=True,
    context_settings=CONTEXT,
)


@keys_app.command(
    "create",
    epilog="\b\nExamples:\n  dockyard keys create demo-production 'ci pipeline'\n"
    "  KEY=$(dockyard keys create demo-production ci --quiet)   # only the key, on stdout",
)
def keys_create(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    name: Annotated[str, typer.Argument(help="a descriptive name")],
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print only the key")] = False,
    json_output: JsonFlag = False,
) -> None:
    """Generate an API key. It is printed this once and can never be viewed again."""

    def run(client: DockyardClient) -> None:
        key = client.create_api_key(environment, name)
        if json_output:
            print_json(key)
        elif quiet:
            typer.echo(key.key)
        else:
            err.print(f"API key {key.prefix} ({key.name}) of {key.environment}; shown once, store it now:")
            typer.echo(key.key)

    management(ctx, json_output, run)


@keys_app.command("list", epilog="\b\nExamples:\n  dockyard keys list demo-production")
def keys_list(
    ctx: typer.Context, environment: Annotated[str, typer.Argument(metavar="ENV")], json_output: JsonFlag = False
) -> None:
    """The environment's API keys (name, prefix, created, last used; never the key)."""

    def run(client: DockyardClient) -> None:
        items = client.list_api_keys(environment)
        if json_output:
            print_json(items)
        else:
            rows = ([k.id, k.name, k.prefix, k.created_at, k.created_by, k.last_used_at] for k in items)
            table(["ID", "NAME", "PREFIX", "CREATED", "BY", "LAST USED"], rows)

    management(ctx, json_output, run)


@keys_app.command("revoke", epilog="\b\nExamples:\n  dockyard keys revoke demo-production 3k9x0a1b2c3d")
def keys_revoke(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    key_id: Annotated[str, typer.Argument(help="the key's id (see keys list)")],
) -> None:
    """Revoke an API key: it stops working at once."""

    def run(client: DockyardClient) -> None:
        client.revoke_api_key(environment, key_id)
        err.print(f"key {key_id} revoked")

    management(ctx, False, run)
