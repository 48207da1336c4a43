"""Logging of both processes: plain text or one JSON object per line, the request id on every record of
a request, and no secret ever written: API keys (``dky_<id>_<secret>``), bearer tokens and JWTs are
masked in every message and argument before a handler sees them."""

from __future__ import annotations

import logging
import re

from pythonjsonlogger.json import JsonFormatter

from dockyard_core import requestid

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
    """Masks secrets in the formatted message (the record's args are folded in first)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the formatter's own error handling
            return True
        cleaned = redact(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
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
