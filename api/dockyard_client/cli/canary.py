"""The ``env canary`` commands: start a canary (a share of new sessions on another version), change its
weight, promote or abort it, and see it with the SLO watcher's figures (docs/promotion.md)."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

import typer

from dockyard_client._calls import Call
from dockyard_client.client import DockyardClient

from .output import err, print_json, table
from .state import CONTEXT, JsonFlag, YesFlag, confirm, management

canary_app = typer.Typer(
    help="A canary of an environment: a share of new sessions starts on another version (each session keeps "
    "its version); promote it, change its weight or abort it.",
    epilog="\b\nExamples:\n  dockyard env canary start demo-production 1.1.0 --weight 10\n"
    "  dockyard env canary weight demo-production 50\n  dockyard env canary promote demo-production\n"
    "  dockyard env canary abort demo-production --yes\n  dockyard env canary show demo-production",
    context_settings=CONTEXT,
    rich_markup_mode=None,
    no_args_is_help=True,
)

Env = Annotated[str, typer.Argument(metavar="ENV")]


def _call(client: DockyardClient, method: str, environment: str, tail: str = "", body: Any = None) -> Any:
    path = f"{client.calls.mgmt()}/environments/{quote(environment, safe='')}/canary{tail}"
    return client.send(Call(method, path, "kube", json=body))


def _said(answer: dict[str, Any], json_output: bool) -> None:
    if json_output:
        print_json(answer)
    else:
        err.print(answer.get("message", ""))


@canary_app.command("start", epilog="\b\nExamples:\n  dockyard env canary start demo-production 1.1.0 --weight 10")
def canary_start(
    ctx: typer.Context,
    environment: Env,
    version: Annotated[str, typer.Argument(help="the canary's app version, MAJOR.MINOR.PATCH")],
    weight: Annotated[int, typer.Option("--weight", "-w", min=0, max=100, help="percent of new sessions")] = 10,
    json_output: JsonFlag = False,
) -> None:
    """Start a canary: WEIGHT percent of new sessions start on VERSION (a Canary history entry)."""
    body = {"version": version, "weight": weight}
    management(ctx, json_output, lambda c: _said(_call(c, "POST", environment, "", body), json_output))


@canary_app.command("weight", epilog="\b\nExamples:\n  dockyard env canary weight demo-production 50")
def canary_weight(
    ctx: typer.Context,
    environment: Env,
    weight: Annotated[int, typer.Argument(min=0, max=100, help="percent of new sessions")],
    json_output: JsonFlag = False,
) -> None:
    """Change the running canary's share of new sessions."""
    management(ctx, json_output, lambda c: _said(_call(c, "PATCH", environment, "", {"weight": weight}), json_output))


@canary_app.command("promote", epilog="\b\nExamples:\n  dockyard env canary promote demo-production")
def canary_promote(ctx: typer.Context, environment: Env, json_output: JsonFlag = False) -> None:
    """Promote the canary: its version becomes the active one (a history entry with action Promote)."""
    management(ctx, json_output, lambda c: _said(_call(c, "POST", environment, "/promote"), json_output))


@canary_app.command("abort", epilog="\b\nExamples:\n  dockyard env canary abort demo-production --yes")
def canary_abort(ctx: typer.Context, environment: Env, yes: YesFlag = False, json_output: JsonFlag = False) -> None:
    """Abort the canary: new sessions start on the active version again (asks for confirmation)."""
    confirm(yes, f"abort the canary of {environment}?")
    management(ctx, json_output, lambda c: _said(_call(c, "POST", environment, "/abort"), json_output))


@canary_app.command("show", epilog="\b\nExamples:\n  dockyard env canary show demo-production --json")
def canary_show(ctx: typer.Context, environment: Env, json_output: JsonFlag = False) -> None:
    """The canary (or how the last one ended) and the SLO watcher's figures per version."""

    def run(client: DockyardClient) -> None:
        path = f"{client.calls.mgmt()}/environments/{quote(environment, safe='')}"
        env = client.send(Call("GET", path, "kube"))
        shown = {k: env.get(k) for k in ("appVersion", "canary", "canaryState", "slo", "sloState")}
        if json_output:
            print_json(shown)
            return
        state = env.get("canaryState") or {}
        err.print(f"active {env.get('appVersion')}; canary: {state.get('summary') or 'none'}")
        if state.get("reason"):
            err.print(f"reason: {state['reason']}")
        slo = env.get("sloState") or {}
        if slo.get("watching"):
            err.print(f"watching: {slo['watching']}")
        table(
            ["VERSION", "TURNS", "ERROR RATE", "P95 S", "EVAL PASS"],
            ([f.get("version"), f.get("turns"), f.get("errorRate"), f.get("p95LatencySeconds"),
              f.get("evaluationPassRate")] for f in slo.get("figures") or []),
        )  # fmt: skip

    management(ctx, json_output, run)
