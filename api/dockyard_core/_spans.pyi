"""Dockyard's spans in C (``_spans.c``): the bases of :class:`dockyard_core.tracing.CSpan` and ``CTracer``, the C
form of :func:`dockyard_core.tracing.py_extract` and of :meth:`dockyard_core.otlp.Encoder.span`."""

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

class Span:
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...

class Tracer:
    def __init__(self, sample: Any, sink: Any) -> None: ...

class Sink:
    def __init__(
        self,
        queue: Any,
        max_queue: int,
        max_batch: int,
        wake: Callable[[], object],
        full: Callable[[], object],
        slow: Callable[[Any], object],
    ) -> None: ...
    def __call__(self, span: Any, /) -> None: ...

def span(span: Any, /) -> bytes | None: ...
def bind(current: ContextVar[Any], span_class: type[Span], /) -> None: ...
def extract(traceparent: str | None, tracestate: str | None = None, /) -> Any: ...
