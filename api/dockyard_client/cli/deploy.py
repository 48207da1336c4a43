"""The ``deploy`` command group: deploy a model or a tool version, then follow its dock job."""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import typer

from dockyard_client.client import DockyardClient
from dockyard_client.models import JobRecord

from .exits import EPILOG_EXIT, EXIT_FAILED, EXIT_OK, errors
from .jobs import follow, job_line
from .output import err, print_json
from .state import CONTEXT, state_of

deploy_app = typer.Typer(
    help="Deploy a model or a tool through the public API and follow the dock job.",
    epilog="\b\nExamples:\n  dockyard deploy model llama-3-8b-instruct --device g5.xlarge\n"
    "  dockyard deploy tool weather-1.2.0 --async",
    rich_markup_mode=None,
    no_args_is_help=True,
    context_settings=CONTEXT,
)


@deploy_app.command(
    "model",
    epilog="\b\nExamples:\n"
    "  dockyard deploy model llama-3-8b-instruct --device g5.xlarge\n"
    "  dockyard deploy model llama-3-8b-instruct --device g5.12xlarge --redeploy --min-replicas 2 --max-replicas 4\n"
    "  dockyard deploy model support-ft --model-type fineTune --device g5.xlarge --temperature 0.2 "
    "--max-tokens 256 --top-p 0.9 --top-k 40 --no-wait --json\n"
    "  dockyard deploy model tiny-lora-3f9a1c2e --model-type fineTune --device g5.xlarge    # an adapter\n"
    "  dockyard deploy model tiny-lora-3f9a1c2e --model-type fineTune --device g5.xlarge "
    "--base-model tiny-llama-0b1c2d3e\n\n" + EPILOG_EXIT,
)
def deploy_model(
    ctx: typer.Context,
    model_id: Annotated[str, typer.Argument(help="the model (a Model that is ReadyToDeploy)")],
    device: Annotated[str, typer.Option("--device", "-d", help="deviceType, e.g. g5.xlarge")],
    name: Annotated[str | None, typer.Option(help="deployment name, any text (default: the model id)")] = None,
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
    base_model: Annotated[
        str | None,
        typer.Option(
            "--base-model",
            help="for an adapter: the modelId of the model to serve it on (default: the one its "
            "adapter_config.json names)",
        ),
    ] = None,
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
    with errors(json_output), state_of(ctx).client() as client:
        job = client.deploy_model(
            model_id,
            name=name or model_id,
            device_type=device,
            model_type=model_type,
            is_deployed_previously=redeploy,
            hyper_parameters=hyper,
            scaling_parameters=scaling or None,
            optimization_info=optimization_info,
            base_model=base_model,
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
    with errors(json_output), state_of(ctx).client() as client:
        job = client.deploy_tool(tool_id, is_async=is_async)
        _after_deploy(client, job, wait=wait, json_output=json_output, timeout=timeout)


def _after_deploy(
    client: DockyardClient, job: JobRecord, *, wait: bool, json_output: bool, timeout: float | None
) -> NoReturn:
    if not wait:
        if json_output:
            print_json(job)
        else:
            err.print(job_line(job), markup=True)
        raise typer.Exit(EXIT_OK if job.status != "FAILED" else EXIT_FAILED)
    if not json_output:
        err.print(job_line(job), markup=True)
    raise typer.Exit(follow(client, job, json_output=json_output, timeout=timeout))
