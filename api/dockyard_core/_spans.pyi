"""Dockyard's spans in C (``_spans.c``): the base of :class:`dockyard_core.tracing.CSpan` and the C form of
:meth:`dockyard_core.otlp.Encoder.span`."""

from contextvars import ContextVar
from typing import Any

class Span:
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...

def span(span: Any, /) -> bytes | None: ...
def bind(current: ContextVar[Any], /) -> None: ...
