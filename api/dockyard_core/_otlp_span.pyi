"""The C form of :meth:`dockyard_core.otlp.Encoder.span` (``_otlp_span.c``)."""

from typing import Any

def span(span: Any, /) -> bytes | None: ...
