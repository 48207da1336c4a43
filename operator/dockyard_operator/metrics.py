"""Load signal of a serving engine, read from its Prometheus text exposition (``GET /metrics``).

The autoscaler needs two gauges per replica: the sequences the engine is running and the requests
waiting in its queue. vLLM exports them as ``vllm:num_requests_running`` and
``vllm:num_requests_waiting`` (one series per engine, labelled e.g. ``{model_name="x",engine="0"}``);
scrapers that sanitise colons spell them ``vllm_num_requests_running`` / ``..._waiting``.

The parser is a small pure function, deliberately hand-written for just these gauges: it never raises
on a malformed exposition, it skips every line it cannot read (comments, ``# HELP`` / ``# TYPE``,
``# EOF``, garbage, NaN, infinities, negative counts) and keeps reading.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Final

RUNNING_METRICS: Final = ("vllm:num_requests_running", "vllm_num_requests_running")
"""Default names of the running-sequences gauge, in order of preference."""
WAITING_METRICS: Final = ("vllm:num_requests_waiting", "vllm_num_requests_waiting")
"""Default names of the waiting-requests gauge, in order of preference."""

_NAME: Final = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL: Final = r'[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"(?:[^"\\\n]|\\.)*"'
_LABELS: Final = rf"\{{\s*(?:{_LABEL}\s*(?:,\s*{_LABEL}\s*)*,?\s*)?\}}"
# name, optional {labels}, value, then anything (timestamp, OpenMetrics exemplar) which is ignored.
_SAMPLE: Final = re.compile(rf"(?P<name>{_NAME})(?:\s*{_LABELS}\s*|\s+)(?P<value>\S+)(?:\s.*)?")
_METRIC_NAME: Final = re.compile(_NAME)


@dataclass(frozen=True)
class LoadSample:
    """Load of one replica: sequences being generated and requests queued, summed over its engines."""

    running: float
    waiting: float

    @property
    def total(self) -> float:
        """Running plus waiting: the demand on this replica."""
        return self.running + self.waiting


@dataclass(frozen=True)
class LoadMetricNames:
    """Which gauges carry the load. Each member lists alternative spellings, most preferred first:
    the first name that has at least one readable series is used and the others are ignored, so an
    exposition carrying both spellings is not counted twice."""

    running: tuple[str, ...] = RUNNING_METRICS
    waiting: tuple[str, ...] = WAITING_METRICS

    def __post_init__(self) -> None:
        for field, names in (("running", self.running), ("waiting", self.waiting)):
            if not names:
                raise ValueError(f"{field}: at least one metric name is required")
            for name in names:
                if not _METRIC_NAME.fullmatch(name):
                    raise ValueError(f"{field}: {name!r} is not a Prometheus metric name")


VLLM_METRICS: Final = LoadMetricNames()
"""The vLLM gauges (the default)."""


def parse_load(text: str, names: LoadMetricNames = VLLM_METRICS) -> LoadSample | None:
    """The load an engine reports in its Prometheus text exposition.

    Every series of a gauge is summed (one per engine or model). A gauge that is absent counts as 0;
    when neither gauge has a readable series the result is None: this replica reported no load.
    """
    wanted = frozenset(names.running) | frozenset(names.waiting)
    prefixes = tuple(wanted)
    sums: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith(prefixes):  # also skips comments, blank lines and other metrics
            continue
        match = _SAMPLE.fullmatch(line)
        if match is None or match["name"] not in wanted:
            continue
        value = _parse_value(match["value"])
        if value is not None:
            sums[match["name"]] = sums.get(match["name"], 0.0) + value
    running = next((sums[n] for n in names.running if n in sums), None)
    waiting = next((sums[n] for n in names.waiting if n in sums), None)
    if running is None and waiting is None:
        return None
    return LoadSample(running=running or 0.0, waiting=waiting or 0.0)


def _parse_value(token: str) -> float | None:
    """A request count, or None for anything that is not a finite, non-negative number."""
    if "_" in token:  # float() accepts 1_000; Prometheus does not
        return None
    try:
        value = float(token)
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value
