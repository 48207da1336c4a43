"""The ``dockyard`` command line: the root command with its global options, and every command and
command group registered on it (each lives in its own module of this package).

Exit codes (also in ``dockyard --help`` and docs/cli.md): see :data:`~dockyard_client.cli.exits.EXIT_CODES`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from dockyard_client import __version__
from dockyard_client.config import resolve
from dockyard_client.errors import ConfigurationError

from . import chat, deploy, environments, evaluations, importing, jobs, keys, knowledge, tools, versions
from .exits import EPILOG_EXIT, EXIT_USAGE, fail
from .state import CONTEXT, State

app = typer.Typer(
    name="dockyard",
    help="Dockyard from the terminal: import models, deploy models and tools, follow dock jobs, manage app "
    "versions, environments and API keys, and chat with a deployed app.",
    epilog="\b\nConfiguration (flags, then environment variables, then the profile file):\n"
    "  --url / DOCKYARD_URL            the facade, or an environment's base URL .../e/<namespace>/<environment>\n"
    "  -n / DOCKYARD_NAMESPACE         the namespace\n"
    "  -e / DOCKYARD_ENVIRONMENT       the environment (object name, e.g. demo-draft)\n"
    "  --api-key / DOCKYARD_API_KEY    an API key of the environment (public API, chat)\n"
    "  --token / DOCKYARD_TOKEN        a Kubernetes token (management API); else the kubeconfig's user\n"
    "  --kubeconfig / KUBECONFIG       where a token and the namespace are read from\n"
    "  --profile / DOCKYARD_PROFILE    a profile of ~/.config/dockyard/config.toml (DOCKYARD_CONFIG)\n\n" + EPILOG_EXIT,
    rich_markup_mode=None,
    no_args_is_help=True,
    context_settings=CONTEXT,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# The commands, then the groups, in the order --help lists them.
app.command("import", epilog=importing.IMPORT_EPILOG)(importing.import_file)
app.command("status", epilog=jobs.STATUS_EPILOG)(jobs.status)
app.command("chat", epilog=chat.CHAT_EPILOG)(chat.chat)
app.add_typer(deploy.deploy_app, name="deploy")
app.add_typer(environments.env_app, name="env")
app.add_typer(evaluations.eval_app, name="eval")
app.add_typer(keys.keys_app, name="keys")
app.add_typer(knowledge.kb_app, name="kb")
app.add_typer(tools.tool_app, name="tool")
app.add_typer(versions.versions_app, name="versions")


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"dockyard {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option("--url", help="facade URL, or an environment base URL")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="namespace")] = None,
    environment: Annotated[str | None, typer.Option("--environment", "-e", help="environment object name")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", help="API key of the environment")] = None,
    token: Annotated[str | None, typer.Option("--token", help="Kubernetes bearer token (management)")] = None,
    kubeconfig: Annotated[str | None, typer.Option("--kubeconfig", help="kubeconfig for the token")] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="profile of the profile file")] = None,
    timeout: Annotated[float, typer.Option("--http-timeout", help="seconds per HTTP request")] = 60.0,
    version: Annotated[
        bool, typer.Option("--version", callback=version_callback, is_eager=True, help="print the version")
    ] = False,
) -> None:
    """Dockyard from the terminal."""
    try:
        settings = resolve(
            url=url,
            namespace=namespace,
            environment=environment,
            api_key=api_key,
            token=token,
            kubeconfig=kubeconfig,
            profile=profile,
        )
    except ConfigurationError as exc:
        fail(EXIT_USAGE, str(exc))
    ctx.obj = State(settings, timeout)


def main() -> None:
    app()
