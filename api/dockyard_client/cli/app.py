"""The ``dockyard`` command line.

Exit codes (also in ``dockyard --help`` and docs/cli.md): see :data:`EXIT_CODES`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich import filesize
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from dockyard_client import __version__
from dockyard_client.client import DockyardClient
from dockyard_client.config import Settings, management_token, resolve
from dockyard_client.errors import (
    ApiError,
    ConfigurationError,
    Conflict,
    DockyardClientError,
    Forbidden,
    Gone,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    TransportError,
    Unauthenticated,
)
from dockyard_client.models import JobRecord
from dockyard_client.upload import ChunkedUpload

from .output import err, fields, print_json, table

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_NOT_FOUND = 4
EXIT_CONFLICT = 5
EXIT_UNAVAILABLE = 6
EXIT_TIMEOUT = 7
EXIT_INTERRUPTED = 130

EXIT_CODES = {
    EXIT_OK: "success (a job that was followed ended SUCCESS)",
    EXIT_FAILED: "the job ended FAILED, or another error",
    EXIT_USAGE: "bad usage or a request the facade refused as invalid (400, 413, 422), missing configuration",
    EXIT_AUTH: "authentication or permission refused (401, 403)",
    EXIT_NOT_FOUND: "not found (404)",
    EXIT_CONFLICT: "conflict with the current state (409, 410)",
    EXIT_UNAVAILABLE: "the facade or what it depends on is unreachable or failing (connection errors, 429, 5xx); retry",
    EXIT_TIMEOUT: "--timeout passed while the job was still IN_PROGRESS",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C); an import resumes when run again",
}

EPILOG_EXIT = "\b\nExit codes:\n" + "\n".join(f"  {code:<4} {text}" for code, text in EXIT_CODES.items())

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100, "terminal_width": 100}

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
deploy_app = typer.Typer(
    help="Deploy a model or a tool (SPEC.md §4, §5) and follow the dock job.",
    epilog="\b\nExamples:\n  dockyard deploy model llama-3-8b-instruct --device g5.xlarge\n"
    "  dockyard deploy tool weather-1.2.0 --async",
    rich_markup_mode=None,
    no_args_is_help=True,
    context_settings=CONTEXT,
)
env_app = typer.Typer(
    help="Environments of an app: list, create, deploy a version, history, rollback, delete.",
    epilog="\b\nExamples:\n  dockyard env list demo\n  dockyard env create demo staging --version 1.0.0\n"
    "  dockyard env deploy demo-staging 1.1.0\n  dockyard env rollback demo-staging 1.0.0 --yes",
    context_settings=CONTEXT,
    rich_markup_mode=None,
    no_args_is_help=True,
)
keys_app = typer.Typer(
    help="API keys of an environment (the new key is printed once).",
    epilog="\b\nExamples:\n  dockyard keys create demo-production ci\n  dockyard keys list demo-production",
    rich_markup_mode=None,
    no_args_is_help=True,
    context_settings=CONTEXT,
)
versions_app = typer.Typer(
    help="App versions: create, list, preview, restore into the draft, delete.",
    epilog="\b\nExamples:\n  dockyard versions create demo 1.0.0 --name 'First release'\n  dockyard versions list demo",
    context_settings=CONTEXT,
    rich_markup_mode=None,
    no_args_is_help=True,
)
app.add_typer(deploy_app, name="deploy")
app.add_typer(env_app, name="env")
app.add_typer(keys_app, name="keys")
app.add_typer(versions_app, name="versions")


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
        _fail(EXIT_USAGE, str(exc))
    ctx.obj = State(settings, timeout)


def _state(ctx: typer.Context) -> State:
    state: State = ctx.find_root().obj
    return state


def _fail(code: int, message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", markup=True)
    raise typer.Exit(code)


def exit_code_of(exc: BaseException) -> int:
    if isinstance(exc, Unauthenticated | Forbidden):
        return EXIT_AUTH
    if isinstance(exc, NotFound):
        return EXIT_NOT_FOUND
    if isinstance(exc, Conflict | Gone):
        return EXIT_CONFLICT
    if isinstance(exc, InvalidRequest | PayloadTooLarge | ConfigurationError) or (
        isinstance(exc, ApiError) and exc.status_code == 400
    ):
        return EXIT_USAGE
    if isinstance(exc, TransportError) or (
        isinstance(exc, ApiError) and (exc.status_code == 429 or exc.status_code >= 500)
    ):
        return EXIT_UNAVAILABLE
    return EXIT_FAILED


@contextmanager
def errors(json_output: bool = False) -> Iterator[None]:
    """Client errors as a message on stderr (the JSON error body with --json) and a documented exit code."""
    try:
        yield
    except DockyardClientError as exc:
        code = exit_code_of(exc)
        if json_output and isinstance(exc, ApiError):
            print_json(exc.body)
        if isinstance(exc, ApiError):
            detail = f" {exc.details}" if exc.details and not json_output else ""
            _fail(code, f"{exc.status_code} {exc.code}: {exc.message}{detail}")
        _fail(code, str(exc))
    except KeyboardInterrupt:
        err.print("\ninterrupted")
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _job_line(job: JobRecord) -> str:
    colour = {"SUCCESS": "green", "FAILED": "red"}.get(job.status, "yellow")
    target = job.model_id or job.tool_id or ""
    reason = f" {job.reason}" if job.reason else ""
    message = f": {job.message}" if job.message else ""
    return f"[{colour}]{job.status}[/]{reason} {job.job_type} {job.action} {target} ({job.dock_status_id}){message}"


def _follow(
    client: DockyardClient, job: JobRecord, *, json_output: bool, timeout: float | None, interval: float = 1.0
) -> int:
    """Poll a job until SUCCESS/FAILED; print each change; the exit code it ends with."""
    last: list[tuple[str, str, str]] = []

    def show(record: JobRecord) -> None:
        now = (record.status, record.reason, record.message)
        if not last or last[-1] != now:
            last.append(now)
            if not json_output:
                err.print(_job_line(record), markup=True)

    final = job if job.done else client.wait_job(job.dock_status_id, timeout=timeout, interval=interval, on_update=show)
    if job.done:
        show(job)
    if json_output:
        print_json(final)
    return _job_exit(final)


def _job_exit(job: JobRecord) -> int:
    return EXIT_OK if job.status == "SUCCESS" else EXIT_FAILED if job.status == "FAILED" else EXIT_TIMEOUT


# --- import ----------------------------------------------------------------------------------------------


def _size(text: str) -> int:
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a size (e.g. 16MiB, 512k, 1048576)") from None


@app.command(
    "import",
    epilog="\b\nExamples:\n"
    "  dockyard import llama-lora.tar                      # upload, then follow the import job\n"
    "  dockyard import model.gguf --parallel 8 --chunk-size 32MiB\n"
    "  dockyard import llama-lora.tar --adapter --json     # one JSON job record on stdout\n"
    "  dockyard import llama-lora.tar                      # again after Ctrl-C: resumes the session\n\n" + EPILOG_EXIT,
)
def import_file(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="the model file")],
    chunk_size: Annotated[str, typer.Option("--chunk-size", help="bytes per chunk (e.g. 16MiB)")] = "16MiB",
    parallel: Annotated[int, typer.Option("--parallel", "-p", min=1, max=64, help="chunks in flight")] = 4,
    extension: Annotated[str | None, typer.Option(help="file type; default: from the name")] = None,
    context: Annotated[str, typer.Option("--context", help="fileContext of the session")] = "model",
    adapter: Annotated[bool, typer.Option("--adapter", help="the file is an adapter (e.g. LoRA)")] = False,
    resume: Annotated[bool, typer.Option("--resume/--no-resume", help="resume an interrupted upload")] = True,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="follow the import job to the end")] = True,
    timeout: Annotated[float | None, typer.Option(help="stop following the job after this many seconds")] = None,
    max_rate: Annotated[
        str | None, typer.Option("--max-rate", help="bandwidth cap, bytes per second (e.g. 50MiB)")
    ] = None,
    retry_for: Annotated[
        float, typer.Option("--retry-for", help="seconds to keep retrying while the facade is unreachable")
    ] = 120.0,
    json_output: Annotated[bool, typer.Option("--json", help="print the job record as JSON")] = False,
) -> None:
    """Import a model file: chunked upload with parallel chunks, SHA-256 verified, resumable; then follow the
    import job to SUCCESS (the Model is ReadyToDeploy) or FAILED."""
    state = _state(ctx)
    size = _size(chunk_size)
    with errors(json_output), state.client() as client:
        upload = ChunkedUpload(
            client,
            file,
            chunk_size=size,
            parallel=parallel,
            retry_for=retry_for,
            extension=extension,
            file_context=context,
            is_adapter=adapter,
            resume=resume,
            max_rate=_size(max_rate) if max_rate else None,
            on_retry=lambda exc: err.print(f"[yellow]{exc}[/]; retrying for up to {retry_for:g}s", markup=True),
        )
        with _progress() as progress:
            plan = upload.prepare()
            record = plan.record
            if plan.resumed:
                err.print(
                    f"resuming session {record.session_id} (model {record.model_id}): "
                    f"{record.total_chunks - len(plan.missing)} of {record.total_chunks} chunks already there"
                )
            else:
                err.print(f"session {record.session_id}: model {record.model_id}, {record.total_chunks} chunk(s)")
            try:
                if plan.completed_job is None:
                    hashing = progress.add_task("sha256", total=upload.size)
                    task = progress.add_task(
                        "upload", total=plan.file_size, completed=plan.file_size - _missing_bytes(plan)
                    )
                    upload.start_hashing(lambda n: progress.update(hashing, advance=n))
                    upload.upload(plan, lambda n: progress.update(task, advance=n))
                    progress.update(task, completed=plan.file_size)
                    upload.sha256()
            except KeyboardInterrupt:
                upload.stop.set()
                progress.stop()
                err.print(
                    f"\ninterrupted: {len(plan.uploaded_chunks)} chunk(s) sent this time; run the same command again "
                    "to resume"
                )
                raise typer.Exit(EXIT_INTERRUPTED) from None
        job = upload.complete(plan)
        if not json_output and record.sha256:
            err.print(f"sha256 {record.sha256}")
            err.print(_job_line(job), markup=True)
        if not wait:
            if json_output:
                print_json(job)
            raise typer.Exit(EXIT_OK)
        code = _follow(client, job, json_output=json_output, timeout=timeout)
        if code != EXIT_TIMEOUT:
            upload.finished()
        raise typer.Exit(code)


def _missing_bytes(plan: Any) -> int:
    record = plan.record
    total = 0
    for n in plan.missing:
        total += min(record.chunk_size, plan.file_size - n * record.chunk_size)
    return total


class BinarySpeedColumn(ProgressColumn):
    """The transfer rate in the same binary units as the byte counts (MiB/s next to MiB)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        if speed is None:
            return Text("?/s", style="progress.data.speed")
        unit, suffix = filesize.pick_unit_and_suffix(int(speed), ["B", "KiB", "MiB", "GiB", "TiB"], 1024)
        return Text(f"{speed / unit:.1f} {suffix}/s", style="progress.data.speed")


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        DownloadColumn(binary_units=True),
        BinarySpeedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=err,
        transient=False,
    )


# --- deploy and status ---------------------------------------------------------------------------------------


@deploy_app.command(
    "model",
    epilog="\b\nExamples:\n"
    "  dockyard deploy model llama-3-8b-instruct --device g5.xlarge\n"
    "  dockyard deploy model llama-3-8b-instruct --device g5.12xlarge --redeploy --min-replicas 2 --max-replicas 4\n"
    "  dockyard deploy model support-ft --model-type fineTune --device g5.xlarge --temperature 0.2 "
    "--max-tokens 256 --top-p 0.9 --top-k 40 --no-wait --json\n\n" + EPILOG_EXIT,
)
def deploy_model(
    ctx: typer.Context,
    model_id: Annotated[str, typer.Argument(help="the model (a Model that is ReadyToDeploy)")],
    device: Annotated[str, typer.Option("--device", "-d", help="deviceType, e.g. g5.xlarge")],
    name: Annotated[str | None, typer.Option(help="deployment name (default: the model id)")] = None,
    model_type: Annotated[str, typer.Option("--model-type", help="openSource or fineTune")] = "openSource",
    redeploy: Annotated[bool, typer.Option("--redeploy", help="isDeployedPreviously: true")] = False,
    temperature: Annotated[float | None, typer.Option(help="0 to 2 (with --max-tokens, --top-p, --top-k)")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens", help="0 to 512")] = None,
    top_p: Annotated[float | None, typer.Option("--top-p", help="0 to 1")] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", help="1 to 100")] = None,
    stop: Annotated[list[str] | None, typer.Option("--stop", help="stop sequence (repeatable)")] = None,
    min_replicas: Annotated[int | None, typer.Option("--min-replicas")] = None,
    max_replicas: Annotated[int | None, typer.Option("--max-replicas")] = None,
    max_batch_size: Annotated[int | None, typer.Option("--max-batch-size")] = None,
    scale_up_delay: Annotated[int | None, typer.Option("--scale-up-delay", help="milliseconds")] = None,
    scale_down_delay: Annotated[int | None, typer.Option("--scale-down-delay", help="milliseconds")] = None,
    optimization: Annotated[str | None, typer.Option(help="ctranslate2 or vllm")] = None,
    quantization: Annotated[str | None, typer.Option(help="no_quantization or int8_float16")] = None,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="follow the job to SUCCESS/FAILED")] = True,
    timeout: Annotated[float | None, typer.Option(help="stop following after this many seconds")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print the job record as JSON")] = False,
) -> None:
    """Deploy a model that is Ready to Deploy on GPU nodes of a device type, then follow its dock job."""
    sampling = {"temperature": temperature, "maxTokens": max_tokens, "topP": top_p, "topK": top_k}
    hyper: dict[str, Any] | None = None
    if any(v is not None for v in sampling.values()) or stop:
        hyper = {k: v for k, v in sampling.items() if v is not None}
        if stop:
            hyper["stopSequence"] = list(stop)
    scaling = {
        k: v
        for k, v in {
            "minReplicas": min_replicas,
            "maxReplicas": max_replicas,
            "maxBatchSize": max_batch_size,
            "scaleUpDelay": scale_up_delay,
            "scaleDownDelay": scale_down_delay,
        }.items()
        if v is not None
    }
    optimization_info = None
    if optimization is not None or quantization is not None:
        optimization_info = {"optimizationType": optimization or "", "quantizationType": quantization or ""}
    with errors(json_output), _state(ctx).client() as client:
        job = client.deploy_model(
            model_id,
            name=name or model_id,
            device_type=device,
            model_type=model_type,
            is_deployed_previously=redeploy,
            hyper_parameters=hyper,
            scaling_parameters=scaling or None,
            optimization_info=optimization_info,
        )
        _after_deploy(client, job, wait=wait, json_output=json_output, timeout=timeout)


@deploy_app.command(
    "tool",
    epilog="\b\nExamples:\n"
    "  dockyard deploy tool weather-1.2.0            # the facade waits (isAsync false): SUCCESS or FAILED\n"
    "  dockyard deploy tool weather-1.2.0 --async    # answers at once, then the job is followed here\n"
    "  dockyard deploy tool weather-1.2.0 --async --no-wait --json\n\n" + EPILOG_EXIT,
)
def deploy_tool(
    ctx: typer.Context,
    tool_id: Annotated[str, typer.Argument(help="the tool version, <name>-<version>")],
    is_async: Annotated[bool, typer.Option("--async", help="isAsync: true (answer at once)")] = False,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="follow the job to SUCCESS/FAILED")] = True,
    timeout: Annotated[float | None, typer.Option(help="stop following after this many seconds")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print the job record as JSON")] = False,
) -> None:
    """Deploy a tool version to the environment and follow its dock job."""
    with errors(json_output), _state(ctx).client() as client:
        job = client.deploy_tool(tool_id, is_async=is_async)
        _after_deploy(client, job, wait=wait, json_output=json_output, timeout=timeout)


def _after_deploy(
    client: DockyardClient, job: JobRecord, *, wait: bool, json_output: bool, timeout: float | None
) -> NoReturn:
    if not wait:
        if json_output:
            print_json(job)
        else:
            err.print(_job_line(job), markup=True)
        raise typer.Exit(EXIT_OK if job.status != "FAILED" else EXIT_FAILED)
    if not json_output:
        err.print(_job_line(job), markup=True)
    raise typer.Exit(_follow(client, job, json_output=json_output, timeout=timeout))


@app.command(
    "status",
    epilog="\b\nExamples:\n"
    "  dockyard status 9f1c2b7e-3d4a-4c8e-9b1f-6a2d5e7c8b90\n"
    "  dockyard status 9f1c2b7e-3d4a-4c8e-9b1f-6a2d5e7c8b90 --watch --timeout 600\n\n"
    "The exit code follows the job: 0 SUCCESS, 1 FAILED; with --watch, 7 when --timeout passes first.\n"
    "Without --watch an IN_PROGRESS job exits 0.\n\n" + EPILOG_EXIT,
)
def status(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="the dockStatusId")],
    watch: Annotated[bool, typer.Option("--watch", "-w", help="follow the job until SUCCESS or FAILED")] = False,
    interval: Annotated[float, typer.Option(help="seconds between polls with --watch")] = 1.0,
    timeout: Annotated[float | None, typer.Option(help="stop watching after this many seconds")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="print the job record as JSON")] = False,
) -> None:
    """The dock status (job record) of an import or a deployment."""
    with errors(json_output), _state(ctx).client() as client:
        job = client.dock_status(job_id)
        if watch:
            raise typer.Exit(_follow(client, job, json_output=json_output, timeout=timeout, interval=interval))
        if json_output:
            print_json(job)
        else:
            fields(
                [
                    ("dockStatusId", job.dock_status_id),
                    ("status", job.status),
                    ("reason", job.reason),
                    ("message", job.message),
                    ("jobType", job.job_type),
                    ("action", job.action),
                    ("modelId", job.model_id),
                    ("toolId", job.tool_id),
                    ("deployment", job.deployment_name),
                    ("started", job.start_time),
                    ("completed", job.completion_time),
                ]
            )
        raise typer.Exit(EXIT_FAILED if job.status == "FAILED" else EXIT_OK)


# --- management: environments ----------------------------------------------------------------------------------

JsonFlag = Annotated[bool, typer.Option("--json", help="print the answer as JSON")]
YesFlag = Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")]


def _confirm(yes: bool, question: str) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        _fail(EXIT_USAGE, f"{question} — refusing without a terminal to ask; pass --yes")
    if not typer.confirm(question, default=False, err=True):
        raise typer.Exit(EXIT_FAILED)


def _mgmt(ctx: typer.Context, json_output: bool, action: Callable[[DockyardClient], Any]) -> None:
    with errors(json_output), _state(ctx).client(management=True) as client:
        action(client)


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

    _mgmt(ctx, json_output, run)


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

    _mgmt(ctx, json_output, run)


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

    _mgmt(ctx, json_output, run)


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

    _mgmt(ctx, json_output, run)


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

    _mgmt(ctx, json_output, run)


@env_app.command("rollback", epilog="\b\nExamples:\n  dockyard env rollback demo-production 1.0.0 --yes")
def env_rollback(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    version: Annotated[str, typer.Argument(help="a Previous version of the history")],
    yes: YesFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Roll back to a previous version from the history (asks for confirmation)."""
    _confirm(yes, f"roll {environment} back to version {version}?")

    def run(client: DockyardClient) -> None:
        env = client.rollback_environment(environment, version)
        if json_output:
            print_json(env)
        else:
            err.print(f"{env.object_name}: rolled back to version {env.app_version}")

    _mgmt(ctx, json_output, run)


@env_app.command("delete", epilog="\b\nExamples:\n  dockyard env delete demo-staging --yes")
def env_delete(
    ctx: typer.Context,
    environment: Annotated[str, typer.Argument(metavar="ENV")],
    yes: YesFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Delete an environment: endpoints off, keys revoked, resources released (audit log and usage kept)."""
    _confirm(yes, f"delete environment {environment}? This cannot be undone")

    def run(client: DockyardClient) -> None:
        done = client.delete_environment(environment)
        if json_output:
            print_json(done)
        else:
            err.print(f"{done.deleted} deleted: {done.message} ({done.audit_record})")

    _mgmt(ctx, json_output, run)


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

    _mgmt(ctx, json_output, run)


# --- management: keys --------------------------------------------------------------------------------------------


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

    _mgmt(ctx, json_output, run)


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

    _mgmt(ctx, json_output, run)


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

    _mgmt(ctx, False, run)


# --- management: versions ------------------------------------------------------------------------------------------


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

    _mgmt(ctx, json_output, run)


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

    _mgmt(ctx, json_output, run)


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

    _mgmt(ctx, json_output, run)


@versions_app.command("restore", epilog="\b\nExamples:\n  dockyard versions restore demo 1.0.0 --yes")
def versions_restore(
    ctx: typer.Context,
    app_name: Annotated[str, typer.Argument(metavar="APP")],
    version: Annotated[str, typer.Argument()],
    yes: YesFlag = False,
    json_output: JsonFlag = False,
) -> None:
    """Restore a version into the draft: overwrites the whole draft and cannot be undone (asks first)."""
    _confirm(yes, f"overwrite the whole draft of {app_name} with version {version}? This cannot be undone")

    def run(client: DockyardClient) -> None:
        restored = client.restore_version(app_name, version)
        print_json(restored) if json_output else err.print(f"draft of {restored.name} restored from {version}")

    _mgmt(ctx, json_output, run)


@versions_app.command("delete", epilog="\b\nExamples:\n  dockyard versions delete demo 0.9.0 --yes")
def versions_delete(
    ctx: typer.Context,
    app_name: Annotated[str, typer.Argument(metavar="APP")],
    version: Annotated[str, typer.Argument()],
    yes: YesFlag = False,
) -> None:
    """Delete a version permanently (refused while an environment deploys it)."""
    _confirm(yes, f"delete version {version} of {app_name} permanently?")

    def run(client: DockyardClient) -> None:
        client.delete_version(app_name, version)
        err.print(f"version {version} deleted")

    _mgmt(ctx, False, run)


# --- chat ----------------------------------------------------------------------------------------------------------


@app.command(
    "chat",
    epilog="\b\nExamples:\n  dockyard chat demo -e demo-production            # interactive; /exit or Ctrl-D ends\n"
    "  dockyard chat demo -m 'What is the weather in Oslo?' --json\n"
    "  dockyard chat demo --session session-1 --user alice\n\n" + EPILOG_EXIT,
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
    with errors(json_output), _state(ctx).client() as client:
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


def main() -> None:
    app()
