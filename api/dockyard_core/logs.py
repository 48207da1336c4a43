"""Logging of both processes: plain text or one JSON object per line, the request id on every record of
a request, and no secret ever written: API keys (``dky_<id>_<secret>``), bearer tokens and JWTs are
masked in every message and argument before a handler sees them.

Nor any personal data of a turn whose environment redacts it before storage (``spec.pii.redact.storage``):
once the runtime knows the turn's PII policy it calls :func:`pii_for_this_task` (or runs the turn inside
:func:`pii_scope`), and every record written from then on in that task (its message, its arguments and
its traceback: an exception's text may quote what the user wrote) is redacted with the same placeholders as
the stored conversation (docs/guardrails.md, "PII protection")."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from pythonjsonlogger.json import JsonFormatter

from dockyard_core import requestid

if TYPE_CHECKING:
    from dockyard_core.pii import PiiPolicy

_pii: ContextVar[Callable[[str], str] | None] = ContextVar("dockyard_log_pii", default=None)


def _redactor(policy: PiiPolicy | None, key: bytes, session: str) -> Callable[[str], str] | None:
    if policy is None or not policy.redact_storage:
        return None

    def redact_pii(text: str) -> str:
        return policy.redact(text, key=key, session=session).text

    return redact_pii


def pii_for_this_task(policy: PiiPolicy | None, *, key: bytes, session: str) -> None:
    """Redact ``policy``'s PII in every record logged from here to the end of the current asyncio task (a
    request's task: what its error handlers log after the turn too) and in the tasks it starts from here;
    other requests' tasks are not affected. No-op without a policy or with storage redaction off."""
    redactor = _redactor(policy, key, session)
    if redactor is not None:
        _pii.set(redactor)


@contextmanager
def pii_scope(policy: PiiPolicy | None, *, key: bytes, session: str) -> Iterator[None]:
    """Redact ``policy``'s PII in every record logged inside (tasks started inside too) when the policy
    redacts before storage; without a policy, or with storage redaction off, records are left as they are."""
    redactor = _redactor(policy, key, session)
    if redactor is None:
        yield
        return
    token = _pii.set(redactor)
    try:
        yield
    finally:
        _pii.reset(token)


SECRETS = re.compile(
    r"(dky_[a-z0-9]{12})_[A-Za-z0-9_\-]+"  # an API key: keep only its public prefix
    r"|((?:[Bb]earer|[Tt]oken)[\s:=]+)[A-Za-z0-9._~+/\-]{8,}=*"  # Authorization: Bearer ..., token=...
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"  # a JWT (service-account tokens)
)


def redact(text: str) -> str:
    def mask(match: re.Match[str]) -> str:
        if match.group(1):
            return f"{match.group(1)}_***"
        if match.group(2):
            return f"{match.group(2)}***"
        return "***"

    return SECRETS.sub(mask, text)


class RedactFilter(logging.Filter):
    """Masks secrets, and inside :func:`pii_scope` personal data, in the formatted message (the record's
    args are folded in first) and its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the formatter's own error handling
            return True
        pii = _pii.get()
        cleaned = redact(message) if pii is None else pii(redact(message))
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        if pii is not None and record.exc_text:
            record.exc_text = pii(record.exc_text)
        if pii is not None and record.stack_info:
            record.stack_info = pii(record.stack_info)
        return True


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "request_id", None):
            rid = requestid.current.get()
            if rid:
                record.request_id = rid
        return True


def json_formatter() -> logging.Formatter:
    return JsonFormatter(
        "%(asctime)s %(levelname)s %(name)s %(message)s",
        rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        timestamp=False,
    )


def install_filters(handler: logging.Handler) -> None:
    for kind in (RequestIdFilter, RedactFilter):
        if not any(isinstance(f, kind) for f in handler.filters):
            handler.addFilter(kind())


def configure(fmt: str = "plain", level: str | int = "INFO") -> None:
    """Root logging for a process: one stderr handler in ``fmt`` (plain or json), with the filters."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(json_formatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    install_filters(handler)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level if isinstance(level, int) else level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True


def protect_all_handlers() -> None:
    """Add the filters to every handler of the root logger (e.g. after kopf configured its own)."""
    for handler in logging.getLogger().handlers:
        install_filters(handler)
