"""The dock job as the terminal shows it: the one-line summary, following a job to its end (the exit code
it ends with), and the ``status`` command."""

from __future__ import annotations

from typing import Annotated

import typer

from dockyard_client.client import DockyardClient
from dockyard_client.models import JobRecord

from .exits import EPILOG_EXIT, EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT, errors
from .output import err, fields, print_json
from .state import state_of


def job_line(job: JobRecord) -> str:
    colour = {"SUCCESS": "green", "FAILED": "red"}.get(job.status, "yellow")
    target = job.model_id or job.tool_id or ""
    reason = f" {job.reason}" if job.reason else ""
    message = f": {job.message}" if job.message else ""
    return f"[{colour}]{job.status}[/]{reason} {job.job_type} {job.action} {target} ({job.dock_status_id}){message}"


def follow(
    client: DockyardClient, job: JobRecord, *, json_output: bool, timeout: float | None, interval: float = 1.0
) -> int:
    """Poll a job until SUCCESS/FAILED; print each change; the exit code it ends with."""
    last: list[tuple[str, str, str]] = []

    def show(record: JobRecord) -> None:
        now = (record.status, record.reason, record.message)
        if not last or last[-1] != now:
            last.append(now)
            if not json_output:
                err.print(job_line(record), markup=True)

    final = job if job.done else client.wait_job(job.dock_status_id, timeout=timeout, interval=interval, on_update=show)
    if job.done:
        show(job)
    if json_output:
        print_json(final)
    return job_exit(final)


def job_exit(job: JobRecord) -> int:
    return EXIT_OK if job.status == "SUCCESS" else EXIT_FAILED if job.status == "FAILED" else EXIT_TIMEOUT


STATUS_EPILOG = (
    "\b\nExamples:\n"
    "  dockyard status 9f1c2b7e-3d4a-4c8e-9b1f-6a2d5e7c8b90\n"
    "  dockyard status 9f1c2b7e-3d4a-4c8e-9b1f-6a2d5e7c8b90 --watch --timeout 600\n\n"
    "The exit code follows the job: 0 SUCCESS, 1 FAILED; with --watch, 7 when --timeout passes first.\n"
    "Without --watch an IN_PROGRESS job exits 0.\n\n" + EPILOG_EXIT
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
    with errors(json_output), state_of(ctx).client() as client:
        job = client.dock_status(job_id)
        if watch:
            raise typer.Exit(follow(client, job, json_output=json_output, timeout=timeout, interval=interval))
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
                    ("name", job.name),
                    ("deployment", job.deployment_name),
                    ("started", job.start_time),
                    ("completed", job.completion_time),
                ]
            )
        raise typer.Exit(EXIT_FAILED if job.status == "FAILED" else EXIT_OK)
