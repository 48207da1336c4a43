"""The ``import`` command: a model file's chunked, resumable upload with its progress bars, then the
import job followed to its end."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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

from dockyard_client.upload import ChunkedUpload

from .exits import EPILOG_EXIT, EXIT_INTERRUPTED, EXIT_OK, EXIT_TIMEOUT, errors
from .jobs import follow, job_line
from .output import err, print_json
from .state import state_of


def _size(text: str) -> int:
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a size (e.g. 16MiB, 512k, 1048576)") from None


IMPORT_EPILOG = (
    "\b\nExamples:\n"
    "  dockyard import llama-lora.tar                      # upload, then follow the import job\n"
    "  dockyard import model.gguf --parallel 8 --chunk-size 32MiB\n"
    "  dockyard import llama-lora.tar --adapter --json     # one JSON job record on stdout\n"
    "  dockyard import llama-lora.tar                      # again after Ctrl-C: resumes the session\n\n" + EPILOG_EXIT
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
    state = state_of(ctx)
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
            err.print(job_line(job), markup=True)
        if not wait:
            if json_output:
                print_json(job)
            raise typer.Exit(EXIT_OK)
        code = follow(client, job, json_output=json_output, timeout=timeout)
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
