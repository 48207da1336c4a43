"""Exit codes of the ``dockyard`` command and the mapping of client errors onto them: ``errors()`` turns
an error answer into a message on stderr (the JSON error body with --json) and its documented code."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer

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

from .output import err, print_json

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


def fail(code: int, message: str) -> NoReturn:
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
            fail(code, f"{exc.status_code} {exc.code}: {exc.message}{detail}")
        fail(code, str(exc))
    except KeyboardInterrupt:
        err.print("\ninterrupted")
        raise typer.Exit(EXIT_INTERRUPTED) from None
