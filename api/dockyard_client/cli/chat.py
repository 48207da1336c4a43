"""The ``chat`` command: talk to a deployed app in the terminal, one message or interactively, with the
answer streamed as it is generated."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from dockyard_client.client import DockyardClient

from .exits import EPILOG_EXIT, errors
from .output import err, print_json
from .state import state_of

CHAT_EPILOG = (
    "\b\nExamples:\n  dockyard chat demo -e demo-production            # interactive; /exit or Ctrl-D ends\n"
    "  dockyard chat demo -m 'What is the weather in Oslo?' --json\n"
    "  dockyard chat demo --session session-1 --user alice\n\n" + EPILOG_EXIT
)


def chat(
    ctx: typer.Context,
    app_id: Annotated[str, typer.Argument(metavar="APP", help="the app id (the App's name)")],
    message: Annotated[str | None, typer.Option("--message", "-m", help="send one message and exit")] = None,
    session: Annotated[str | None, typer.Option(help="continue (or create) this session id")] = None,
    user: Annotated[str | None, typer.Option(help="metadata.user_id")] = None,
    stream: Annotated[bool, typer.Option("--stream/--no-stream", help="stream the answer as it is written")] = True,
    json_output: Annotated[bool, typer.Option("--json", help="print the final answer as JSON")] = False,
) -> None:
    """Talk to a deployed app in the terminal; answers are streamed as they are generated."""
    with errors(json_output), state_of(ctx).client() as client:
        session_id = session
        interactive = message is None
        if interactive:
            err.print(f"chat with {app_id} — /exit or Ctrl-D ends, /new starts a new session")
        while True:
            text = message if message is not None else _ask()
            if text is None:
                break
            if text.strip() in ("/exit", "/quit"):
                break
            if text.strip() == "/new":
                session_id = None
                continue
            if not text.strip():
                continue
            result = _turn(client, app_id, text, session_id, user, stream=stream and not json_output)
            session_id = result.get("session_id", session_id)
            if json_output:
                print_json(result)
            if not interactive:
                break


def _ask() -> str | None:
    try:
        return err.input("[bold cyan]you>[/] ")
    except EOFError:
        return None


def _turn(
    client: DockyardClient, app_id: str, text: str, session_id: str | None, user: str | None, *, stream: bool
) -> dict[str, Any]:
    if not stream:
        result = client.execute(app_id, text, session_id=session_id, user_id=user)
        return result.model_dump()
    final: dict[str, Any] = {}
    started = False
    for event in client.execute_stream(app_id, text, session_id=session_id, user_id=user):
        data = event.data if isinstance(event.data, dict) else {}
        if event.event == "agent":
            err.print(f"[bold magenta]{data.get('agent', 'agent')}>[/] ", end="")
            started = True
        elif event.event == "tool_call":
            err.print(f"\n[dim]  → {data.get('name')}({data.get('arguments')})[/]")
        elif event.event == "tool_result":
            ok = "ok" if data.get("ok") else "failed"
            err.print(f"[dim]  ← {data.get('name')}: {ok}[/]")
        elif event.event == "delta":
            if not started:
                started = True
            sys.stdout.write(str(data.get("text", "")))
            sys.stdout.flush()
        elif event.event == "done":
            final = data
    sys.stdout.write("\n")
    sys.stdout.flush()
    tokens = final.get("tokens") or {}
    err.print(f"[dim]session {final.get('session_id')} · tokens in {tokens.get('input')} out {tokens.get('output')}[/]")
    return final
