"""The facade's tracing hooks (``dockyard_api.runtime.tracing``) put in use for one test: with the C tracer its
hooks of a turn in C, with the Python one the Python functions (``tracing.use``), as they were after the test."""

from __future__ import annotations

from typing import Any

import pytest

from dockyard_api.runtime import tracing


def trace_with(monkeypatch: pytest.MonkeyPatch, tracer: Any, capture_content: bool = False) -> None:
    for name in ("TRACER", "CAPTURE_CONTENT", "_HOOKS", *tracing._PYTHON_HOOKS):
        monkeypatch.setattr(tracing, name, getattr(tracing, name))  # restored after the test
    tracing.use(tracer, capture_content)
