"""What every command shares: the Typer context settings, the resolved settings (``State``, built by the
root callback) with the client made from them, the --json and --yes flags, confirmation and the
management calls' wrapper."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from dockyard_client.client import DockyardClient
from dockyard_client.config import Settings, management_token

from .exits import EXIT_FAILED, EXIT_USAGE, errors, fail

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100, "terminal_width": 100}

JsonFlag = Annotated[bool, typer.Option("--json", help="print the answer as JSON")]
YesFlag = Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")]


@dataclass
class State:
    settings: Settings
    timeout: float

    def client(self, *, management: bool = False) -> DockyardClient:
        s = self.settings
        token = management_token(s) if management else None
        namespace = s.namespace
        if management and namespace is None and s.kubeconfig:
            from dockyard_client.config import kubeconfig_token

            namespace = kubeconfig_token(s.kubeconfig)[1]
        return DockyardClient(
            s.url,
            api_key=s.api_key,
            token=token,
            namespace=namespace,
            environment=s.environment,
            timeout=self.timeout,
        )


def state_of(ctx: typer.Context) -> State:
    state: State = ctx.find_root().obj
    return state


def confirm(yes: bool, question: str) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        fail(EXIT_USAGE, f"{question} — refusing without a terminal to ask; pass --yes")
    if not typer.confirm(question, default=False, err=True):
        raise typer.Exit(EXIT_FAILED)


def management(ctx: typer.Context, json_output: bool, action: Callable[[DockyardClient], Any]) -> None:
    """``action`` with a client of the management API (a Kubernetes token), its errors as exit codes."""
    with errors(json_output), state_of(ctx).client(management=True) as client:
        action(client)
