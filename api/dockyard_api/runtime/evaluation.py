"""Evaluation runs through the runtime (docs/promotion.md, "Runs").

Each case is one turn through :meth:`AppRuntime.complete`, the path every deployed-app call takes (the
environment's configuration, the version's agents and tools, its guardrails and the environment's PII
protection), with two differences that make the run a shadow of the environment: the turn's version is the
one under evaluation (the environment's active version, or one not deployed there yet), and its session
lives in :class:`ShadowStore`, in memory: nothing of the run touches the environment's sessions, usage
counters, rate limits or active version, and the runtime's per-version figures skip it (``evaluation``).
A case's earlier conversation is the session's history. A rubric is judged by the suite's judge model
(a ModelDeployment, by object or display name) with an answer constrained to :data:`RUBRIC_SCHEMA`, like a
guard model's verdict (:mod:`dockyard_api.runtime.guard`).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dockyard_api.auth import EnvironmentCaller
from dockyard_api.runtime.agent import AgentSpec
from dockyard_api.runtime.service import AppRuntime, Prepared
from dockyard_core.errors import DockyardError
from dockyard_core.evaluations import CaseResult, Outcome, judge
from dockyard_core.interventions import Intervention

RUBRIC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["pass", "fail"]},
        "reason": {"type": "string", "maxLength": 160},
    },
    "required": ["verdict", "reason"],
}
RUBRIC_SYSTEM = (
    "You grade one answer of an AI assistant against a rubric. Answer ONLY a JSON object "
    '{"verdict": "pass" or "fail", "reason": "<why, briefly>"}. Pass an answer that meets the rubric; fail '
    "any other.\nRubric: "
)
RUBRIC_MAX_TOKENS = 200
SEEN_SECONDS = 5.0


@dataclass(frozen=True)
class ShadowMessage:
    role: str
    content: str


@dataclass(frozen=True)
class ShadowTurn:
    """A case's turn: the attributes of :class:`dockyard_api.store.records.Turn` the runtime reads."""

    session_id: str
    version: str
    history: list[ShadowMessage]
    namespace: str
    environment: str
    app: str
    created: bool = True
    user_id: str | None = None
    key_id: str = "evaluation"


@dataclass
class ShadowStore:
    """The runtime's store for one case: holds the turn in memory and writes nothing anywhere."""

    turn: ShadowTurn
    interventions: list[Intervention] = field(default_factory=list)

    async def start_turn(self, **_: Any) -> ShadowTurn:
        return self.turn

    async def finish_turn(self, turn: Any, *, interventions: Sequence[Intervention] = (), **_: Any) -> str:
        self.interventions = list(interventions)
        return "eval-" + uuid.uuid4().hex[:12]

    async def abort_turn(self, turn: Any, *, interventions: Sequence[Intervention] = (), **_: Any) -> None:
        self.interventions = list(interventions)


@dataclass(frozen=True)
class Plan:
    """A run: the version whose suite runs, in which environment's configuration."""

    run_id: str
    namespace: str
    environment: str
    app: str
    version: str
    cases: list[dict[str, Any]]
    judge_model: str | None = None
    concurrency: int = 4
    draft_generation: int = 0
    """For the draft: the App's metadata.generation the caller read (the run waits, up to
    :data:`SEEN_SECONDS`, for the runtime's informer to hold it, so the run answers with the draft the caller
    saw, not an older one)."""


def rubric_request(params: dict[str, Any], rubric: str, message: str, answer: str) -> dict[str, Any]:
    body = {k: v for k, v in params.items() if k not in ("max_tokens", "stop")}
    return {
        **body,
        "messages": [
            {"role": "system", "content": RUBRIC_SYSTEM + rubric},
            {"role": "user", "content": f"The user wrote:\n{message}\n\nThe assistant answered:\n{answer}"},
        ],
        "response_format": {"type": "json_object", "schema": RUBRIC_SCHEMA},
        "max_tokens": RUBRIC_MAX_TOKENS,
    }


def parse_rubric(content: str) -> tuple[bool, str]:
    """The judge's verdict; anything but one is a fail."""
    try:
        answer = json.loads(content, strict=False)
    except ValueError:
        return False, "the judge's answer is not a verdict"
    if not isinstance(answer, dict) or answer.get("verdict") not in ("pass", "fail"):
        return False, "the judge's answer is not a verdict"
    return answer["verdict"] == "pass", " ".join(str(answer.get("reason") or "no reason given").split())[:200]


class EvaluationRunner:
    """Runs a :class:`Plan`'s cases through ``runtime`` and judges each."""

    def __init__(self, runtime: AppRuntime) -> None:
        self.runtime = runtime

    async def run(
        self, plan: Plan, on_result: Callable[[list[dict[str, Any]]], Awaitable[None]] | None = None
    ) -> list[dict[str, Any]]:
        """Every case's result (the JSON of :class:`~dockyard_core.evaluations.CaseResult`), in case order;
        ``on_result`` gets the results so far after each case."""
        await self._draft_seen(plan)
        env = await self.runtime.lookup.environment(plan.namespace, plan.environment)
        view = replace(env, active_version=plan.version)
        gate = asyncio.Semaphore(max(1, plan.concurrency))
        done: dict[int, dict[str, Any]] = {}
        lock = asyncio.Lock()

        async def one(index: int, case: Mapping[str, Any]) -> None:
            async with gate:
                result = await self.case(plan, view, case)
            async with lock:
                done[index] = result.as_json()
                if on_result is not None:
                    await on_result([done[i] for i in sorted(done)])

        await asyncio.gather(*(one(i, c) for i, c in enumerate(plan.cases)))
        return [done[i] for i in sorted(done)]

    async def _draft_seen(self, plan: Plan) -> None:
        if plan.version != "draft" or not plan.draft_generation:
            return
        apps = self.runtime.lookup.informers["apps"]
        deadline = time.monotonic() + SEEN_SECONDS
        while time.monotonic() < deadline:
            app = await apps.get(plan.namespace, plan.app)
            if int(((app or {}).get("metadata") or {}).get("generation") or 0) >= plan.draft_generation:
                return
            await asyncio.sleep(0.05)

    async def case(self, plan: Plan, view: Any, case: Mapping[str, Any]) -> CaseResult:
        history = [ShadowMessage(str(m["role"]), str(m["content"])) for m in case.get("conversation") or ()]
        turn = ShadowTurn(
            f"eval-{plan.run_id[:8]}-{case['name']}", plan.version, history, plan.namespace, plan.environment, plan.app
        )
        store = ShadowStore(turn)
        caller = EnvironmentCaller(plan.namespace, plan.environment, plan.app, "evaluation")
        prepared = Prepared(caller, view, turn, str(case["message"]), evaluation=True)
        expect = dict(case.get("expect") or {})
        started = time.monotonic()
        error, body = "", None
        try:
            body = await self.runtime.complete(store, prepared)
        except DockyardError as exc:
            error = f"{exc.code}: {exc.message}"
        except Exception as exc:  # a failure the runtime did not expect is a failed case, not a failed run
            error = f"internal_error: {exc!r}"[:512]
        latency = round((time.monotonic() - started) * 1000)
        blocked = any(i.action == "block" for i in store.interventions)
        outcome = Outcome(
            response=str((body or {}).get("response") or ""),
            agent=str((body or {}).get("agent") or ""),
            tools_used=tuple((body or {}).get("tools_used") or ()),
            error=error,
            blocked=blocked,
            latency_ms=latency,
        )
        if expect.get("rubric") and not error and plan.judge_model:
            outcome = replace(outcome, rubric=await self.rubric(plan, str(expect["rubric"]), case, outcome.response))
        return CaseResult(str(case["name"]), str(case.get("category") or "keyFlow"), outcome, judge(expect, outcome))

    async def rubric(self, plan: Plan, rubric: str, case: Mapping[str, Any], answer: str) -> tuple[bool, str]:
        try:
            target = await self.runtime.lookup.model_target(
                plan.namespace, AgentSpec(name="evaluation judge", model=plan.judge_model)
            )
            completion = await self.runtime.models.complete(
                target.base_url, rubric_request(target.params, rubric, str(case["message"]), answer), what=target.what
            )
        except DockyardError as exc:
            return False, f"the judge model could not be asked: {exc.message}"[:200]
        return parse_rubric(completion.content)
