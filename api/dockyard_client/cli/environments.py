"""The ``env`` command group: an app's environments (list, create, show, settings, deploy a version,
history, rollback, delete), their usage statistics and guardrail interventions (management API)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from dockyard_client.client import DockyardClient

from .canary import canary_app
from .output import err, fields, print_json, table
from .state import CONTEXT, JsonFlag, YesFlag, confirm, management

env_app = typer.Typer(
    help="Environments of an app: list, create, settings, deploy a version, history, rollback, delete.",
    epilog="\b\nExamples:\n  dockyard env list demo\n  dockyard env create demo staging --version 1.0.0\n"
    "  dockyard env settings demo-staging --web-client public --allow-origin https://shop.example.com\n"
    "  dockyard env deploy demo-staging 1.1.0\n  dockyard env rollback demo-staging 1.0.0 --yes",
    context_settings=CONTEXT,
    rich_markup_mode=None,
    no_args_is_help=True,
)
env_app.add_typer(canary_app, name="canary")


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


def _settings_patch(
    current: Any,
    web_client: str | None,
    allow: list[str],
    remove: list[str],
    token_ttl: int | None,
    requests_per_minute: int | None,
    tokens_per_day: int | None,
    config: list[str],
    unset_config: list[str],
    oidc: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    """The merge patch the options ask for (the allowed origins: the current ones, added to and removed from;
    ``oidc``: members of spec.access.oidc, an empty value removing clientSecretRef)."""
    patch: dict[str, Any] = {}
    if web_client is not None:
        patch["access"] = {"webClient": web_client}
    given = {member: (value or None) for member, value in (oidc or {}).items() if value is not None}
    if given:
        patch.setdefault("access", {})["oidc"] = given
    widget: dict[str, Any] = {}
    if allow or remove:
        origins = [o for o in current.widget.get("allowedOrigins", []) if o not in remove]
        widget["allowedOrigins"] = origins + [o for o in allow if o not in origins]
    if token_ttl is not None:
        widget["tokenTtlSeconds"] = token_ttl
    if widget:
        patch["widget"] = widget
    limits: dict[str, Any] = {}
    for member, limit in (("requestsPerMinute", requests_per_minute), ("tokensPerDay", tokens_per_day)):
        if limit is not None:
            limits[member] = limit or None  # 0: no limit (the member removed)
    if limits:
        patch["rateLimits"] = limits
    configuration: dict[str, Any] = {key: None for key in unset_config}
    for item in config:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--config")
        configuration[key] = value
    if configuration:
        patch["configuration"] = configuration
    return patch


def _web_client(access: dict[str, Any]) -> str:
    """The web client access in words: its value (signIn as kubernetes) and, for oidc, the provider."""
    mode = access.get("webClient", "public")
    mode = "kubernetes" if mode == "signIn" else mode
    oidc = access.get("oidc") or {}
    if mode == "oidc" and oidc:
        return f"oidc ({oidc.get('issuer')}, client {oidc.get('clientId')})"
    return str(mode)


@env_app.command(
    "settings",
    epilog="\b\nExamples:\n  dockyard env settings demo-staging\n"
    "  dockyard env settings demo-staging --web-client public --allow-origin https://shop.example.com\n"
    "  dockyard env settings demo-staging --requests-per-minute 60 --config greeting='Hello there'\n"
    "  dockyard env settings demo-staging --remove-origin https://old.example.com --requests-per-minute 0\n"
    "  dockyard env settings demo-staging --web-client oidc --oidc-issuer https://accounts.example.com \\\n"
    "      --oidc-client-id dockyard-web --oidc-client-secret-ref web-oidc-client",
)
def env_settings(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    web_client: Annotated[
        str | None,
        typer.Option(
            "--web-client", help="who may use the web client page: public, oidc, kubernetes (signIn) or disabled"
        ),
    ] = None,
    oidc_issuer: Annotated[
        str | None, typer.Option("--oidc-issuer", help="oidc: the OpenID provider's issuer URL")
    ] = None,
    oidc_client_id: Annotated[
        str | None, typer.Option("--oidc-client-id", help="oidc: the client id registered at the provider")
    ] = None,
    oidc_client_secret_ref: Annotated[
        str | None,
        typer.Option(
            "--oidc-client-secret-ref",
            help="oidc: a Secret of the namespace whose key clientSecret is the client secret ('': a public client)",
        ),
    ] = None,
    allow: Annotated[
        list[str] | None, typer.Option("--allow-origin", help="a site allowed to embed the widget (repeatable)")
    ] = None,
    remove: Annotated[list[str] | None, typer.Option("--remove-origin", help="an allowed site to remove")] = None,
    token_ttl: Annotated[int | None, typer.Option("--token-ttl", help="widget token lifetime, seconds")] = None,
    requests_per_minute: Annotated[
        int | None, typer.Option("--requests-per-minute", help="calls per API key per minute (0: no limit)")
    ] = None,
    tokens_per_day: Annotated[
        int | None, typer.Option("--tokens-per-day", help="model tokens of the environment per UTC day (0: no limit)")
    ] = None,
    config: Annotated[
        list[str] | None, typer.Option("--config", help="KEY=VALUE of spec.configuration (repeatable)")
    ] = None,
    unset_config: Annotated[
        list[str] | None, typer.Option("--unset-config", help="a configuration key to remove")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Show or change an environment's settings: web client access, widget origins, rate limits, configuration."""

    def run(client: DockyardClient) -> None:
        env = client.get_environment(environment)
        patch = _settings_patch(
            env, web_client, allow or [], remove or [], token_ttl, requests_per_minute, tokens_per_day,
            config or [], unset_config or [],
            {"issuer": oidc_issuer, "clientId": oidc_client_id, "clientSecretRef": oidc_client_secret_ref},
        )  # fmt: skip
        if patch:
            env = client.change_settings(environment, patch)
        if json_output:
            print_json({"access": env.access, "widget": env.widget, "rateLimits": env.rate_limits,
                        "configuration": env.configuration})  # fmt: skip
            return
        if patch:
            err.print(f"{env.object_name}: settings changed ({', '.join(patch)})")
        limits = env.rate_limits or {}
        fields(
            [
                ("web client", _web_client(env.access)),
                ("allowed origins", ", ".join(env.widget.get("allowedOrigins", [])) or "(none)"),
                ("widget token lifetime", f"{env.widget.get('tokenTtlSeconds', 900)}s"),
                ("requests per minute", limits.get("requestsPerMinute", "no limit")),
                ("tokens per day", limits.get("tokensPerDay", "no limit")),
                *((f"configuration {k}", v) for k, v in sorted(env.configuration.items())),
            ]
        )

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


@env_app.command(
    "interventions", epilog="\b\nExamples:\n  dockyard env interventions demo-production --limit 20 --json"
)
def env_interventions(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    limit: Annotated[int | None, typer.Option("--limit", help="how many, newest first (1 to 500; default 50)")] = None,
    json_output: JsonFlag = False,
) -> None:
    """What guardrails and PII protection did to the environment's turns, newest first (never the values)."""

    def run(client: DockyardClient) -> None:
        found = client.interventions(environment, limit)
        if json_output:
            print_json(found)
            return
        table(
            ["AT", "POLICY", "STAGE", "ACTION", "REASON", "SESSION"],
            ([i["at"], i["policy"], _stage(i), i["action"], i["reason"], i["sessionId"]] for i in found),
        )

    management(ctx, json_output, run)


def _stage(found: dict[str, Any]) -> str:
    return f"{found['stage']} ({found['tool']})" if found.get("tool") else str(found["stage"])
