from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from dockyard_core.resources.v1alpha1.modeldeployment import ScalingParameters
from dockyard_operator.autoscaler import (
    DEFAULT_CONFIG,
    AutoscalerConfig,
    AutoscalerState,
    Decision,
    Observation,
    PendingChange,
    decide,
    replicas_for_load,
)
from dockyard_operator.engine_load import LoadSample

# maxBatchSize 10 at the default 80 % target: one replica per 8 requests (running + waiting).
PARAMS = ScalingParameters(max_batch_size=10, min_replicas=1, max_replicas=5, scale_up_delay=200, scale_down_delay=500)
PER_REPLICA = 8


def params_with(**changes: Any) -> ScalingParameters:
    """PARAMS with some members changed (validated)."""
    return ScalingParameters(**{**PARAMS.model_dump(by_alias=False), **changes})


def load_for(replicas: int) -> float:
    """A load that needs exactly this many replicas with PARAMS."""
    return float(replicas * PER_REPLICA)


# A trace is a step function: (t_ms, load) pairs sorted by time; the load holds until the next pair.
# A load of None means no replica reported (no metrics).
Trace = Sequence[tuple[int, float | None]]


@dataclass(frozen=True)
class Tick:
    t: int
    load: float | None
    before: int  # replicas when the decision was taken
    replicas: int  # replicas decided
    reason: str


def load_at(trace: Trace, t: int) -> float | None:
    current: float | None = None
    for start, load in trace:
        if start > t:
            break
        current = load
    return current


def simulate(
    params: ScalingParameters,
    trace: Trace,
    *,
    end_ms: int,
    tick_ms: int = 50,
    start_replicas: int | None = None,
    config: AutoscalerConfig = DEFAULT_CONFIG,
    persist: bool = True,
) -> list[Tick]:
    """Feed the trace through decide() every tick_ms from t=0 to end_ms, obeying every decision.

    With persist, the state travels through its JSON form between ticks, as the operator stores it."""
    replicas = params.min_replicas if start_replicas is None else start_replicas
    stored = json.dumps(AutoscalerState().to_dict())
    state = AutoscalerState()
    timeline: list[Tick] = []
    for t in range(0, end_ms + 1, tick_ms):
        load = load_at(trace, t)
        observation = Observation(
            total_load=0.0 if load is None else load,
            reporting_replicas=0 if load is None else replicas,
            now_ms=t,
        )
        if persist:
            state = AutoscalerState.from_dict(json.loads(stored))
        decision = decide(params, replicas, observation, state, config)
        if persist:
            stored = json.dumps(decision.new_state.to_dict())
        else:
            state = decision.new_state
        timeline.append(Tick(t, load, replicas, decision.replicas, decision.reason))
        replicas = decision.replicas
    return timeline


def changes(timeline: list[Tick]) -> list[tuple[int, int]]:
    """(t, new replicas) of every tick that changed the replica count."""
    return [(tick.t, tick.replicas) for tick in timeline if tick.replicas != tick.before]


def obs(load: float, now_ms: int, reporting: int = 1) -> Observation:
    return Observation(total_load=load, reporting_replicas=reporting, now_ms=now_ms)


# --- the recommendation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("load", "max_batch_size", "utilization", "expected"),
    [
        (0, 10, 0.8, 0),
        (0.5, 10, 0.8, 1),
        (8, 10, 0.8, 1),
        (8.01, 10, 0.8, 2),
        (16, 10, 0.8, 2),
        (17, 10, 0.8, 3),
        (204.8, 256, 0.8, 1),
        (21, 3, 0.7, 10),  # an exact fit stays exact: in floats 21 / (3 x 0.7) is 10.000000000000002
        (409.6, 256, 0.8, 2),
        (10, 10, 1.0, 1),
        (11, 10, 1.0, 2),
        (1, 1, 0.8, 2),
        (3, 1, 0.1, 30),
        (1e9, 256, 0.8, 4_882_813),
    ],
)
def test_replicas_for_load(load: float, max_batch_size: int, utilization: float, expected: int) -> None:
    assert replicas_for_load(load, max_batch_size, utilization) == expected


def test_target_utilization_is_configurable() -> None:
    full = AutoscalerConfig(target_utilization=1.0)
    assert decide(PARAMS, 1, obs(10, 0), config=full).reason == "WithinBounds"
    assert decide(PARAMS, 1, obs(10, 0)).reason == "Holding"  # needs 2 at 80 %


@pytest.mark.parametrize("kwargs", [{"target_utilization": 0}, {"target_utilization": 1.01}, {"max_gap_ms": 0}])
def test_invalid_config_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be"):
        AutoscalerConfig(**kwargs)


def test_invalid_observations_are_refused() -> None:
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="total_load"):
            obs(bad, 0)
    with pytest.raises(ValueError, match="reporting_replicas"):
        obs(0, 0, reporting=-1)
    with pytest.raises(ValueError, match="current_replicas"):
        decide(PARAMS, -1, obs(0, 0))


def test_observation_from_samples_sums_the_replicas_that_reported() -> None:
    samples = [LoadSample(3, 1), None, LoadSample(0.5, 2)]
    assert Observation.from_samples(samples, 7) == Observation(total_load=6.5, reporting_replicas=2, now_ms=7)
    assert Observation.from_samples([None, None], 7) == Observation(total_load=0, reporting_replicas=0, now_ms=7)


# --- delays ---------------------------------------------------------------------------------------


def test_a_burst_shorter_than_scale_up_delay_does_not_scale() -> None:
    # High load observed at 1000, 1050, 1100, 1150: it lasted 150 ms < 200 ms.
    timeline = simulate(PARAMS, [(0, 1.0), (1000, load_for(4)), (1200, 1.0)], end_ms=3000)
    assert changes(timeline) == []
    assert [t.reason for t in timeline if t.reason == "Holding"] == ["Holding"] * 4


def test_a_burst_lasting_exactly_scale_up_delay_scales() -> None:
    # Observed at 1000 .. 1200: it lasted 200 ms.
    timeline = simulate(PARAMS, [(0, 1.0), (1000, load_for(4)), (1250, 1.0)], end_ms=1300)
    assert changes(timeline) == [(1200, 4)]


@pytest.mark.parametrize(("delay", "tick", "first_change"), [(1, 50, 1050), (50, 50, 1050), (51, 50, 1100),
                                                             (200, 50, 1200), (1000, 50, 2000), (137, 1, 1137),
                                                             (1000, 250, 2000), (130, 100, 1200)])  # fmt: skip
def test_sustained_load_scales_up_at_the_first_tick_after_the_delay(delay: int, tick: int, first_change: int) -> None:
    params = params_with(scale_up_delay=delay)
    timeline = simulate(params, [(0, 1.0), (1000, load_for(3))], end_ms=4000, tick_ms=tick)
    assert changes(timeline) == [(first_change, 3)]
    assert next(t for t in timeline if t.t == first_change).reason == "ScaleUp"


def test_sustained_low_load_scales_down_only_after_scale_down_delay() -> None:
    timeline = simulate(PARAMS, [(0, load_for(4)), (3000, 0.0)], end_ms=6000, start_replicas=4)
    assert changes(timeline) == [(3500, 1)]
    assert [t.reason for t in timeline if 3000 <= t.t < 3500] == ["Holding"] * 10
    assert next(t for t in timeline if t.t == 3500).reason == "ScaleDown"


def test_a_dip_shorter_than_scale_down_delay_does_not_scale() -> None:
    timeline = simulate(PARAMS, [(0, load_for(4)), (1000, 0.0), (1500, load_for(4))], end_ms=4000, start_replicas=4)
    assert changes(timeline) == []


@pytest.mark.parametrize("period", [50, 100, 150])
def test_flapping_load_never_scales(period: int) -> None:
    # The load alternates, faster than either delay, between needing 4 replicas and needing 2: from 2
    # replicas it flips between "more" and "enough", from 3 between "more" and "fewer", from 4 between
    # "enough" and "fewer". Every flip restarts the wait.
    trace = [(t, load_for(4) if (t // period) % 2 == 0 else load_for(2)) for t in range(0, 10_000, period)]
    for start in (2, 3, 4):
        timeline = simulate(PARAMS, trace, end_ms=10_000, start_replicas=start)
        assert changes(timeline) == []
        assert "Holding" in {t.reason for t in timeline}


def test_flapping_in_one_direction_does_not_reset_the_wait() -> None:
    # Needing 3, 5, 3, 5 replicas: "more than 2" holds throughout, so it scales at 200 ms, to 3.
    trace = [(t, load_for(3) if (t // 50) % 2 == 0 else load_for(5)) for t in range(0, 1000, 50)]
    assert changes(simulate(PARAMS, trace, end_ms=999, start_replicas=2))[0] == (200, 3)


def test_huge_load_scales_to_max_in_one_step_and_never_beyond() -> None:
    timeline = simulate(PARAMS, [(0, 1.0), (1000, 1e9)], end_ms=5000)
    assert changes(timeline) == [(1200, 5)]
    assert max(t.replicas for t in timeline) == 5
    at_max = [t for t in timeline if t.t > 1200]
    assert {t.reason for t in at_max} == {"WithinBounds"}
    assert "capped at maxReplicas 5" in decide(PARAMS, 5, obs(1e9, 0)).message


def test_back_to_min_after_load_drops_only_after_scale_down_delay() -> None:
    timeline = simulate(PARAMS, [(0, 1e6), (2000, 0.0)], end_ms=5000)
    assert changes(timeline) == [(200, 5), (2500, 1)]
    assert all(t.replicas == 5 for t in timeline if 200 <= t.t < 2500)
    assert "kept at minReplicas 2" in decide(params_with(min_replicas=2), 2, obs(0, 0)).message


def test_scale_down_goes_to_the_highest_recommendation_of_the_window() -> None:
    # From 5 replicas, the load falls to need 1, with a brief bump needing 3 inside the down window.
    trace = [(0, load_for(5)), (1000, load_for(1)), (1200, load_for(3)), (1250, load_for(1))]
    timeline = simulate(PARAMS, trace, end_ms=4000, start_replicas=5)
    # First down window 1000..1500 saw 1, 3, 1: go to 3. Then a new window from 1550: go to 1 at 2050.
    assert changes(timeline) == [(1500, 3), (2050, 1)]


def test_scale_up_goes_to_the_lowest_recommendation_of_the_window() -> None:
    # A spike needing 5 inside a window that otherwise needs 3: the sustained need is 3.
    trace = [(0, 1.0), (1000, load_for(3)), (1100, load_for(5)), (1150, load_for(3))]
    assert changes(simulate(PARAMS, trace, end_ms=3000)) == [(1200, 3)]


def test_a_rising_load_is_followed_window_by_window() -> None:
    trace = [(t, float(t // 10)) for t in range(0, 1000, 50)]  # needs 1 replica more every 80 ms
    params = params_with(max_replicas=50)
    timeline = simulate(params, trace, end_ms=999)
    steps = changes(timeline)
    assert all(b - a >= 200 for (a, _), (b, _) in itertools.pairwise(steps))
    assert [r for _, r in steps] == sorted(r for _, r in steps)
    for t, replicas in steps:
        # Each step goes to what the start of its window needed (the lowest recommendation in it).
        assert replicas == replicas_for_load(float((t - 200) // 10), 10, 0.8)


def test_the_opposite_change_restarts_the_wait() -> None:
    state = decide(PARAMS, 2, obs(load_for(4), 0)).new_state
    assert state.pending == PendingChange(from_replicas=2, to_replicas=4, since_ms=0, last_ms=0)
    down = decide(PARAMS, 2, obs(load_for(1), 150), state)
    assert down.reason == "Holding"
    assert down.new_state.pending == PendingChange(from_replicas=2, to_replicas=1, since_ms=150, last_ms=150)
    assert decide(PARAMS, 2, obs(load_for(1), 600), down.new_state).reason == "Holding"
    assert decide(PARAMS, 2, obs(load_for(1), 650), down.new_state).replicas == 1


def test_no_change_needed_clears_the_wait() -> None:
    state = decide(PARAMS, 2, obs(load_for(4), 0)).new_state
    steady = decide(PARAMS, 2, obs(load_for(2), 100), state)
    assert (steady.replicas, steady.reason, steady.new_state) == (2, "WithinBounds", AutoscalerState())


def test_a_replica_count_changed_by_someone_else_restarts_the_wait() -> None:
    state = decide(PARAMS, 2, obs(load_for(5), 0)).new_state
    decision = decide(PARAMS, 3, obs(load_for(5), 300), state)  # kubectl scale to 3 meanwhile
    assert decision.reason == "Holding"
    assert decision.new_state.pending == PendingChange(from_replicas=3, to_replicas=5, since_ms=300, last_ms=300)


def test_a_gap_in_observations_restarts_the_wait() -> None:
    config = AutoscalerConfig(max_gap_ms=1000)
    state = decide(PARAMS, 1, obs(load_for(3), 0), config=config).new_state
    assert decide(PARAMS, 1, obs(load_for(3), 1000), state, config).reason == "ScaleUp"
    stale = decide(PARAMS, 1, obs(load_for(3), 1001), state, config)
    assert stale.reason == "Holding"
    assert stale.new_state.pending is not None
    assert stale.new_state.pending.since_ms == 1001


def test_a_clock_going_backwards_restarts_the_wait() -> None:
    state = decide(PARAMS, 1, obs(load_for(3), 10_000)).new_state
    decision = decide(PARAMS, 1, obs(load_for(3), 9_000), state)
    assert decision.reason == "Holding"
    assert decision.new_state.pending is not None
    assert decision.new_state.pending.since_ms == 9_000


def test_delays_changed_mid_wait_apply_at_once() -> None:
    state = decide(PARAMS, 1, obs(load_for(3), 0)).new_state
    assert decide(PARAMS, 1, obs(load_for(3), 100), state).reason == "Holding"
    faster = params_with(scale_up_delay=100)
    assert decide(faster, 1, obs(load_for(3), 100), state).reason == "ScaleUp"


def test_holding_reports_progress() -> None:
    state = decide(PARAMS, 1, obs(load_for(3), 0)).new_state
    decision = decide(PARAMS, 1, obs(load_for(3), 150), state)
    assert (decision.replicas, decision.reason) == (1, "Holding")
    assert "scaleUpDelay 200 ms (150 ms so far)" in decision.message
    assert "from 1 to 3" in decision.message


# --- bounds and missing metrics ---------------------------------------------------------------


@pytest.mark.parametrize(("current", "expected"), [(0, 2), (1, 2), (6, 4), (50, 4)])
def test_replicas_outside_the_bounds_are_clamped_at_once(current: int, expected: int) -> None:
    params = params_with(min_replicas=2, max_replicas=4)
    pending = AutoscalerState(pending=PendingChange(from_replicas=3, to_replicas=4, since_ms=0, last_ms=0))
    for observation in (obs(0, 0), obs(1e6, 0), obs(0, 0, reporting=0)):
        decision = decide(params, current, observation, pending)
        assert (decision.replicas, decision.reason, decision.new_state) == (expected, "Clamped", AutoscalerState())
        assert f"{current} replicas is outside minReplicas 2 .. maxReplicas 4" in decision.message


def test_bounds_lowered_by_the_user_apply_at_the_next_tick() -> None:
    timeline = simulate(PARAMS, [(0, 1e6)], end_ms=400)
    assert timeline[-1].replicas == 5
    lowered = params_with(max_replicas=3)
    decision = decide(lowered, 5, obs(1e6, 450))
    assert (decision.replicas, decision.reason) == (3, "Clamped")


def test_without_max_replicas_there_is_no_autoscaling() -> None:
    params = ScalingParameters(max_batch_size=10, min_replicas=2, scale_up_delay=1, scale_down_delay=50)
    timeline = simulate(params, [(0, 1e6), (1000, 0.0)], end_ms=2000)
    assert changes(timeline) == []
    assert {t.reason for t in timeline} == {"WithinBounds"}


def test_no_metrics_holds_the_current_count() -> None:
    pending = AutoscalerState(pending=PendingChange(from_replicas=3, to_replicas=5, since_ms=0, last_ms=100))
    decision = decide(PARAMS, 3, obs(0, 150, reporting=0), pending)
    assert (decision.replicas, decision.reason, decision.new_state) == (3, "NoMetrics", AutoscalerState())
    assert "holding 3" in decision.message
    timeline = simulate(PARAMS, [(0, None)], end_ms=5000, start_replicas=3)
    assert changes(timeline) == []
    assert {t.reason for t in timeline} == {"NoMetrics"}


def test_a_metrics_gap_restarts_the_wait() -> None:
    trace = [(0, 1.0), (1000, load_for(3)), (1150, None), (1200, load_for(3))]
    assert changes(simulate(PARAMS, trace, end_ms=2000)) == [(1400, 3)]


def test_partial_reporting_uses_the_load_that_was_reported() -> None:
    state = decide(PARAMS, 2, obs(load_for(4), 0, reporting=1)).new_state
    assert decide(PARAMS, 2, obs(load_for(4), 200, reporting=1), state).replicas == 4


# --- state persistence --------------------------------------------------------------------------


def test_state_round_trips_through_its_dict_form() -> None:
    idle = AutoscalerState()
    assert idle.to_dict() == {}
    assert AutoscalerState.from_dict({}) == idle
    assert AutoscalerState.from_dict(None) == idle
    state = AutoscalerState(
        pending=PendingChange(from_replicas=2, to_replicas=5, since_ms=1_700_000_000_123, last_ms=1_700_000_000_456)
    )
    data = state.to_dict()
    assert data == {
        "pending": {"fromReplicas": 2, "toReplicas": 5, "sinceMs": 1_700_000_000_123, "lastMs": 1_700_000_000_456}
    }
    assert AutoscalerState.from_dict(json.loads(json.dumps(data))) == state
    assert AutoscalerState.from_dict({"pending": None}) == idle
    by_name = {"pending": {"from_replicas": 2, "to_replicas": 5, "since_ms": 1, "last_ms": 2}}
    assert AutoscalerState.from_dict(by_name).pending == PendingChange(
        from_replicas=2, to_replicas=5, since_ms=1, last_ms=2
    )


@pytest.mark.parametrize(
    "data",
    [
        {"unknown": 1},
        {"pending": {"fromReplicas": 2, "toReplicas": 2, "sinceMs": 0, "lastMs": 0}},
        {"pending": {"fromReplicas": 2, "toReplicas": 3, "sinceMs": 5, "lastMs": 4}},
        {"pending": {"fromReplicas": -1, "toReplicas": 3, "sinceMs": 0, "lastMs": 0}},
        {"pending": {"fromReplicas": 2, "toReplicas": 3, "sinceMs": "0", "lastMs": 0}},
        {"pending": {"fromReplicas": 2, "toReplicas": 3, "sinceMs": 0.5, "lastMs": 1}},
        {"pending": {"fromReplicas": 2, "toReplicas": 3, "sinceMs": 0}},
        {"pending": {"fromReplicas": True, "toReplicas": 3, "sinceMs": 0, "lastMs": 0}},
        {"pending": "soon"},
    ],
)
def test_a_corrupt_state_is_refused(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="validation error"):
        AutoscalerState.from_dict(data)


def test_state_is_immutable() -> None:
    state = AutoscalerState()
    with pytest.raises(ValueError, match="frozen"):
        state.pending = None  # type: ignore[misc]


def test_a_restart_mid_wait_loses_nothing() -> None:
    state = decide(PARAMS, 1, obs(load_for(3), 1000)).new_state
    persisted = json.dumps(decide(PARAMS, 1, obs(load_for(3), 1100), state).new_state.to_dict())
    # ... the operator restarts ...
    restored = AutoscalerState.from_dict(json.loads(persisted))
    assert decide(PARAMS, 1, obs(load_for(3), 1150), restored).reason == "Holding"
    assert decide(PARAMS, 1, obs(load_for(3), 1200), restored).replicas == 3


def test_persisting_every_tick_changes_nothing() -> None:
    trace = random_trace(random.Random(7), 20_000)
    in_memory = simulate(PARAMS, trace, end_ms=20_000, persist=False)
    assert in_memory == simulate(PARAMS, trace, end_ms=20_000, persist=True)
    assert len(changes(in_memory)) > 5


def test_decisions_are_pure() -> None:
    state = decide(PARAMS, 1, obs(load_for(3), 0)).new_state
    first: Decision = decide(PARAMS, 1, obs(load_for(3), 100), state)
    assert all(decide(PARAMS, 1, obs(load_for(3), 100), state) == first for _ in range(3))


# --- random traces ------------------------------------------------------------------------------


def random_trace(rng: random.Random, length_ms: int, max_load: float = 60.0) -> list[tuple[int, float | None]]:
    """Segments of random length: steady levels, noise, short spikes and dips, metrics gaps."""
    trace: list[tuple[int, float | None]] = []
    t = 0
    while t < length_ms:
        kind = rng.random()
        if kind < 0.08:
            trace.append((t, None))
        elif kind < 0.5:
            trace.append((t, float(rng.randint(0, int(max_load)))))
        else:
            trace.append((t, round(rng.uniform(0, max_load), 2)))
        t += rng.choice([1, 10, 30, 50, 120, 250, 400, 600, 900, 1500, 2500])
    return trace


def random_params(rng: random.Random) -> ScalingParameters:
    low = rng.randint(1, 10)
    high = None if rng.random() < 0.15 else rng.randint(low, min(50, low + rng.randint(0, 8)))
    return ScalingParameters(
        max_batch_size=rng.choice([1, 2, 4, 8, 16, 64, 256]),
        min_replicas=low,
        max_replicas=high,
        scale_up_delay=rng.choice([1, 20, 50, 99, 200, 500, 1000, rng.randint(1, 1000)]),
        scale_down_delay=rng.choice([50, 100, 333, 1000, 2000, rng.randint(50, 2000)]),
    )


@pytest.mark.parametrize("seed", range(300))
def test_random_traces_respect_bounds_and_delays(seed: int) -> None:
    rng = random.Random(seed)
    params = random_params(rng)
    config = AutoscalerConfig(target_utilization=rng.choice([0.5, 0.8, 1.0]))
    tick = rng.choice([10, 25, 50, 100])
    low, high = params.min_replicas, params.effective_max_replicas
    capacity_load = high * params.max_batch_size * config.target_utilization
    length = 6_000
    trace = random_trace(rng, length, max_load=capacity_load * 1.3)
    # A final steady segment long enough for two full waits: the replicas must settle on it.
    settle_load = round(rng.uniform(0, capacity_load * 1.3), 1)
    longest = max(params.scale_up_delay, params.scale_down_delay)
    end = length + 3 * (longest + tick)
    trace.append((length, settle_load))
    start = rng.randint(0, 15)
    timeline = simulate(
        params, trace, end_ms=end, tick_ms=tick, start_replicas=start, config=config, persist=seed % 3 == 0
    )

    def recommended(load: float) -> int:
        return params.clamp(replicas_for_load(load, params.max_batch_size, config.target_utilization))

    # Always within the bounds.
    assert all(low <= tick_.replicas <= high for tick_ in timeline)
    # Only the first decision may clamp; a change always carries a scaling reason.
    for i, tick_ in enumerate(timeline):
        if tick_.reason == "Clamped":
            assert i == 0
            assert not low <= start <= high
        elif tick_.replicas != tick_.before:
            assert tick_.reason == ("ScaleUp" if tick_.replicas > tick_.before else "ScaleDown")
    assert (timeline[0].reason == "Clamped") == (not low <= start <= high)
    # Every change was wanted continuously for its full delay, and goes exactly to the most cautious
    # recommendation of its window; two changes are never closer than the delay of the second.
    last_change: int | None = None
    for i, tick_ in enumerate(timeline):
        if tick_.reason not in ("ScaleUp", "ScaleDown"):
            continue
        up = tick_.reason == "ScaleUp"
        delay = params.scale_up_delay if up else params.scale_down_delay
        window: list[int] = []
        j = i
        while j >= 0:
            seen = timeline[j]
            if seen.load is None or seen.before != tick_.before:
                break
            wanted = recommended(seen.load)
            if (wanted > seen.before) != up or wanted == seen.before:
                break
            window.append(wanted)
            j -= 1
        since = timeline[i - len(window) + 1].t
        assert tick_.t - since >= delay, (seed, tick_)  # wanted for the whole delay...
        assert timeline[i - 1].t - since < delay, (seed, tick_)  # ... and not a tick longer
        assert tick_.replicas == (min(window) if up else max(window)), (seed, tick_, window)
        if last_change is not None:
            assert tick_.t - last_change >= delay
        last_change = tick_.t
    # A steady load is eventually followed.
    assert timeline[-1].replicas == recommended(settle_load), (seed, params, settle_load)
