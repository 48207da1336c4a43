"""Dockyard's autoscaler for ModelDeployments: one pure decision per observation of the load.

HPA works in whole seconds; a ModelDeployment gives scaleUpDelay / scaleDownDelay in milliseconds
(docs/autoscaling.md, "Delays"), so the operator decides itself. :func:`decide` does no I/O and reads
no clock: the caller passes the time (``now_ms``, wall-clock milliseconds since the epoch, because the
state outlives the process) and the state returned by the previous decision, which it persists
(:meth:`AutoscalerState.to_dict`) so that an operator restart loses nothing.

Rules (docs/autoscaling.md explains them):

- recommendation = ceil(total load / (maxBatchSize x target utilization)), clamped to
  [minReplicas, maxReplicas]; total load is running + waiting requests summed over the ready replicas;
- a replica count outside the bounds is clamped at once (``Clamped``);
- no replica reported load: hold (``NoMetrics``);
- an increase happens once "more replicas are needed" has held continuously for scaleUpDelay ms, a
  decrease once "fewer are needed" has held for scaleDownDelay ms (``Holding`` meanwhile); anything
  else in between (no change needed, the opposite change, no metrics, a replica count changed by
  someone else, a gap in the observations) restarts the wait;
- the change is the largest one that every observation of the window agrees on: scaling up goes to
  the lowest recommendation seen during the window, scaling down to the highest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator
from pydantic.alias_generators import to_camel

from dockyard_core.resources.v1alpha1.modeldeployment import ScalingParameters
from dockyard_operator.engine_load import LoadSample

Reason = Literal["ScaleUp", "ScaleDown", "WithinBounds", "Clamped", "Holding", "NoMetrics"]


@dataclass(frozen=True)
class AutoscalerConfig:
    """Operator-wide tuning of the autoscaler (not part of the ModelDeployment)."""

    target_utilization: float = 0.8
    """Fraction of maxBatchSize a replica should carry, in (0, 1]: headroom for bursts."""
    max_gap_ms: int = 5_000
    """Longest time between two observations that still counts as "continuously": a longer gap (an
    operator restart, a stalled loop) restarts a pending wait. Must exceed the polling interval."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.target_utilization) and 0 < self.target_utilization <= 1):
            raise ValueError(f"target_utilization must be in (0, 1], not {self.target_utilization}")
        if self.max_gap_ms <= 0:
            raise ValueError(f"max_gap_ms must be positive, not {self.max_gap_ms}")


DEFAULT_CONFIG: Final = AutoscalerConfig()


@dataclass(frozen=True)
class Observation:
    """What the operator saw at one instant."""

    total_load: float
    """Running + waiting requests, summed over the replicas that reported."""
    reporting_replicas: int
    """How many ready replicas reported load; 0 means there is no load signal."""
    now_ms: int
    """Wall-clock time of the observation, milliseconds since the epoch."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.total_load) and self.total_load >= 0):
            raise ValueError(f"total_load must be a finite number >= 0, not {self.total_load}")
        if self.reporting_replicas < 0:
            raise ValueError(f"reporting_replicas must be >= 0, not {self.reporting_replicas}")

    @classmethod
    def from_samples(cls, samples: Iterable[LoadSample | None], now_ms: int) -> Observation:
        """The observation of the samples scraped from each ready replica (None: it reported none)."""
        present = [s for s in samples if s is not None]
        return cls(total_load=sum(s.total for s in present), reporting_replicas=len(present), now_ms=now_ms)


class _StateModel(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
    )


class PendingChange(_StateModel):
    """A change of replica count waiting for its delay to pass."""

    from_replicas: Annotated[StrictInt, Field(ge=0)]
    """The replica count the change is measured against; the wait restarts if it changes."""
    to_replicas: Annotated[StrictInt, Field(ge=0)]
    """Where the change would go: the lowest recommendation seen so far when scaling up, the highest
    when scaling down."""
    since_ms: StrictInt
    """When the change was first wanted."""
    last_ms: StrictInt
    """The latest observation that still wanted it."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.from_replicas == self.to_replicas:
            raise ValueError("a pending change must change the replica count")
        if self.since_ms > self.last_ms:
            raise ValueError("sinceMs must not be later than lastMs")
        return self

    @property
    def scale_up(self) -> bool:
        return self.to_replicas > self.from_replicas


class AutoscalerState(_StateModel):
    """What the autoscaler remembers between decisions. Persist it with :meth:`to_dict`."""

    pending: PendingChange | None = None
    """The change being waited for, if any."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (camelCase keys), e.g. ``{}`` or
        ``{"pending": {"fromReplicas": 1, "toReplicas": 3, "sinceMs": ..., "lastMs": ...}}``."""
        return self.model_dump(mode="json", exclude_none=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> AutoscalerState:
        """The state :meth:`to_dict` produced; None gives the initial state. Raises ValueError (a
        pydantic ValidationError) on anything else: the caller should then start from
        ``AutoscalerState()``, which only restarts a pending wait."""
        return cls() if data is None else cls.model_validate(data)


@dataclass(frozen=True)
class Decision:
    """The replica count to run, why, and the state to pass to the next decision."""

    replicas: int
    reason: Reason
    message: str
    new_state: AutoscalerState


def replicas_for_load(total_load: float, max_batch_size: int, target_utilization: float) -> int:
    """ceil(total_load / (max_batch_size x target_utilization)), unclamped; 0 for no load."""
    capacity = max_batch_size * target_utilization
    # Rounding first keeps an exact fit exact (e.g. 204.8 / (256 x 0.8) is 1, not 1.0000000000000002).
    return max(0, math.ceil(round(total_load / capacity, 9)))


def decide(
    params: ScalingParameters,
    current_replicas: int,
    observation: Observation,
    state: AutoscalerState | None = None,
    config: AutoscalerConfig = DEFAULT_CONFIG,
) -> Decision:
    """The replica count a ModelDeployment should run now. Pure: same inputs, same decision."""
    if current_replicas < 0:
        raise ValueError(f"current_replicas must be >= 0, not {current_replicas}")
    low, high = params.min_replicas, params.effective_max_replicas
    idle = AutoscalerState()
    if not low <= current_replicas <= high:
        target = params.clamp(current_replicas)
        return Decision(
            target,
            "Clamped",
            f"{current_replicas} replicas is outside minReplicas {low} .. maxReplicas {high}; set to {target}",
            idle,
        )
    if observation.reporting_replicas == 0:
        return Decision(current_replicas, "NoMetrics", f"no replica reported load; holding {current_replicas}", idle)

    load = observation.total_load
    needed = replicas_for_load(load, params.max_batch_size, config.target_utilization)
    recommended = params.clamp(needed)
    load_text = (
        f"load {load:g} on {observation.reporting_replicas} replica(s) needs {needed} at "
        f"{config.target_utilization:.0%} of maxBatchSize {params.max_batch_size}"
    )
    if recommended == current_replicas:
        bound = ""
        if needed > high:
            bound = f", capped at maxReplicas {high}"
        elif needed < low:
            bound = f", kept at minReplicas {low}"
        return Decision(current_replicas, "WithinBounds", f"{load_text}{bound}; running {current_replicas}", idle)

    scale_up = recommended > current_replicas
    now = observation.now_ms
    previous = (state or idle).pending
    if (
        previous is not None
        and previous.from_replicas == current_replicas
        and previous.scale_up == scale_up
        and 0 <= now - previous.last_ms <= config.max_gap_ms
    ):
        extreme = min if scale_up else max
        pending = PendingChange(
            from_replicas=current_replicas,
            to_replicas=extreme(previous.to_replicas, recommended),
            since_ms=previous.since_ms,
            last_ms=now,
        )
    else:
        pending = PendingChange(from_replicas=current_replicas, to_replicas=recommended, since_ms=now, last_ms=now)

    delay, delay_name = (
        (params.scale_up_delay, "scaleUpDelay") if scale_up else (params.scale_down_delay, "scaleDownDelay")
    )
    held = now - pending.since_ms
    direction = "up" if scale_up else "down"
    if held >= delay:
        return Decision(
            pending.to_replicas,
            "ScaleUp" if scale_up else "ScaleDown",
            f"{load_text}; wanted for {held} ms ({delay_name} {delay} ms): "
            f"scaling {direction} from {current_replicas} to {pending.to_replicas}",
            idle,
        )
    return Decision(
        current_replicas,
        "Holding",
        f"{load_text}; scaling {direction} from {current_replicas} to {pending.to_replicas} "
        f"once that has lasted {delay_name} {delay} ms ({held} ms so far)",
        AutoscalerState(pending=pending),
    )
