"""The ``eval`` command group: run an app version's evaluation suite against an environment and read the
runs (management API, docs/promotion.md)."""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import quote

import typer

from dockyard_client._calls import Call
from dockyard_client.client import DockyardClient

from .exits import EXIT_FAILED, EXIT_TIMEOUT
from .output import fields, print_json, table
from .state import CONTEXT, JsonFlag, management

eval_app = typer.Typer(
    help="Evaluation runs of an app version's suite (spec.evaluations) against an environment.",
    epilog="\b\nExamples:\n  dockyard eval run demo-staging\n  dockyard eval run demo-production --version 1.2.0"
    "\n  dockyard eval list demo-staging\n  dockyard eval show demo-staging 3f2a9c0d1e2b4a5c",
    rich_markup_mode=None,
    no_args_is_help=True,
    context_settings=CONTEXT,
)


def _runs(client: DockyardClient, environment: str) -> str:
    return f"{client.calls.mgmt()}/environments/{quote(environment, safe='')}/evaluations"


def _show(run: dict[str, Any]) -> None:
    fields(
        [
            ("Run", run["id"]),
            ("Environment", run["environment"] + (" (shadow)" if run.get("shadow") else "")),
            ("Version", run["version"]),
            ("State", run["state"]),
            ("Passed", f"{run['passed']}/{run['total']} ({run.get('passRate', 0):.0%})"),
            ("Error", run.get("error") or ""),
            ("Previous run", run.get("previousRun") or ""),
        ]
    )
    changes = {d["case"]: d["change"] for d in run.get("diff") or []}
    rows = [
        (
            r["case"],
            r["category"],
            "pass" if r["passed"] else "FAIL",
            changes.get(r["case"], ""),
            f"{r.get('latencyMs', 0)} ms",
            "; ".join(r.get("reasons") or []),
        )
        for r in run.get("results") or []
    ]
    if rows:
        table(["Case", "Category", "Result", "Change", "Latency", "Why"], rows)


@eval_app.command(
    "run",
    epilog="\b\nExamples:\n  dockyard eval run demo-staging\n"
    "  dockyard eval run demo-production --version 1.2.0 --json\n"
    "  dockyard eval run demo-draft --case refund-policy --case greeting\n\n"
    "\bExit status: 0 when every case passed, 1 when a case failed (or the run could not run), 7 when\n"
    "--wait ran out first, and the usual codes when the run was refused (no suite: 5, not allowed: 3).",
)
def eval_run(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    version: Annotated[
        str | None, typer.Option("--version", help="the version to evaluate (default: the active one)")
    ] = None,
    case: Annotated[list[str] | None, typer.Option("--case", help="run only this case (repeatable)")] = None,
    wait: Annotated[float, typer.Option("--wait", help="seconds to wait for the run to end (0: do not wait)")] = 600,
    json_output: JsonFlag = False,
) -> None:
    """Run the suite of VERSION (default: the version active in ENV) against ENV: a version that is not the
    active one runs in a shadow of ENV. Waits for the run and prints each case's result and its change
    against the previous run."""
    body: dict[str, Any] = {}
    if version:
        body["version"] = version
    if case:
        body["cases"] = list(case)

    def run(client: DockyardClient) -> None:
        started = client.send(Call("POST", _runs(client, environment), "kube", json=body))
        current = started
        deadline = time.monotonic() + wait
        while current["state"] == "running" and time.monotonic() < deadline:
            left = max(1.0, min(30.0, deadline - time.monotonic()))
            url = f"{_runs(client, environment)}/{started['id']}"
            current = client.send(Call("GET", url, "kube", params={"wait": f"{left:.0f}"}))
        if json_output:
            print_json(current)
        else:
            _show(current)
        if current["state"] == "running":
            if not json_output:
                typer.echo(f"the run is still running: dockyard eval show {environment} {started['id']}", err=True)
            raise typer.Exit(EXIT_TIMEOUT)
        if current["state"] != "passed":
            raise typer.Exit(EXIT_FAILED)

    management(ctx, json_output, run)


@eval_app.command(
    "list", epilog="\b\nExamples:\n  dockyard eval list demo-staging\n  dockyard eval list demo-staging --json"
)
def eval_list(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    json_output: JsonFlag = False,
) -> None:
    """The newest evaluation runs in ENV."""

    def run(client: DockyardClient) -> None:
        answer = client.send(Call("GET", _runs(client, environment), "kube"))
        if json_output:
            print_json(answer)
            return
        table(
            ["Run", "Version", "State", "Passed", "Started", "By"],
            [
                (
                    r["id"],
                    r["version"] + (" (shadow)" if r.get("shadow") else ""),
                    r["state"],
                    f"{r['passed']}/{r['total']}",
                    r["startedAt"],
                    r["startedBy"],
                )
                for r in answer["items"]
            ],
        )

    management(ctx, json_output, run)


@eval_app.command(
    "show",
    epilog="\b\nExamples:\n  dockyard eval show demo-staging 3f2a9c0d1e2b4a5c\n"
    "  dockyard eval show demo-staging 3f2a9c0d1e2b4a5c --json",
)
def eval_show(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    json_output: JsonFlag = False,
) -> None:
    """One run: its per-case results and the diff against the previous run."""

    def run(client: DockyardClient) -> None:
        answer = client.send(Call("GET", f"{_runs(client, environment)}/{quote(run_id, safe='')}", "kube"))
        if json_output:
            print_json(answer)
        else:
            _show(answer)

    management(ctx, json_output, run)
