"""Evaluation runs (docs/promotion.md, "Runs"): an app owner runs a version's suite (``spec.evaluations``)
against an environment; the runtime answers each case (:mod:`dockyard_api.runtime.evaluation`) in the
background, and the run is kept with its per-case results in the conversation store
(:mod:`dockyard_api.store.evaluations`). When it ends, its summary (no chat text) goes to the version's
``status.evaluations`` (the App's for the draft), written by Dockyard itself, where the checklist's Testing
items and the environments' promotion gates read it, with an Event on the Environment.

Who may: the caller must be allowed to ``get`` the Environment (read as the caller: RBAC) and to ``create``
the virtual subresource ``environments/evaluations`` (a SubjectAccessReview; the chart's editor and admin
roles grant it). One run at a time per environment; a run is bounded by its cases (at most 500), the
suite's concurrency and the runtime's turn deadline.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from datetime import UTC, datetime
from typing import Any

from dockyard_api.auth import Authenticator
from dockyard_api.events import record_event
from dockyard_api.management.base import CallerService
from dockyard_api.management.evaluations.schemas import (
    CaseDiff,
    EvaluationRunList,
    EvaluationRunView,
    EvaluationStart,
)
from dockyard_api.runtime.evaluation import EvaluationRunner, Plan
from dockyard_api.runtime.service import AppRuntime
from dockyard_api.store import ConversationStore, EvaluationRuns, StoredRun
from dockyard_core import evaluations, tracing
from dockyard_core.errors import ConflictError, DockyardError, InvalidError, NotFoundError
from dockyard_core.repository import Repositories
from dockyard_core.resources.v1alpha1 import Environment
from dockyard_core.resources.v1alpha1.app import AppContent, AppVersion

log = logging.getLogger(__name__)

ATTEMPTS = 5
_RUNNING: set[asyncio.Task[None]] = set()
"""The runs of this replica in progress (kept referenced until they end)."""


def run_view(run: StoredRun, previous: StoredRun | None = None) -> EvaluationRunView:
    return EvaluationRunView(
        id=run.id,
        environment=run.environment,
        app=run.app,
        version=run.version,
        shadow=run.shadow,
        state=run.phase,
        started_by=run.started_by,
        started_at=run.started_at,
        finished_at=run.finished_at,
        total=run.total,
        done=run.done,
        passed=run.passed,
        pass_rate=round(run.passed / run.total, 4) if run.total else 0.0,
        error=run.error,
        results=run.results,
        previous_run=previous.id if previous is not None else None,
        diff=diff(previous, run) if previous is not None else [],
    )


def diff(before: StoredRun, after: StoredRun) -> list[CaseDiff]:
    """Each case's change from ``before`` to ``after``: fixed, broke, still-failing, still-passing, new,
    removed (in ``after``'s case order, the removed ones last)."""
    old = {str(r["case"]): bool(r.get("passed")) for r in before.results}
    out: list[CaseDiff] = []
    for r in after.results:
        name, now = str(r["case"]), bool(r.get("passed"))
        if name not in old:
            change = "new"
        elif old[name] == now:
            change = "still-passing" if now else "still-failing"
        else:
            change = "fixed" if now else "broke"
        out.append(CaseDiff(case=name, change=change))
    seen = {str(r["case"]) for r in after.results}
    out += [CaseDiff(case=name, change="removed") for name in old if name not in seen]
    return out


class EvaluationService(CallerService):
    """Evaluation runs of one caller."""

    def __init__(self, repos: Repositories, auth: Authenticator, runtime: AppRuntime, store: ConversationStore) -> None:
        super().__init__(repos, auth)
        self.runtime = runtime
        self.runs = EvaluationRuns(store)

    async def start(self, namespace: str, environment: str, body: EvaluationStart) -> EvaluationRunView:
        """Start a run in the background: its id and state (running); poll :meth:`get` for progress."""
        env = await self.environment(namespace, environment)
        await self.auth.require(
            self.user, verb="create", namespace=namespace, resource="environments", subresource="evaluations"
        )
        name = env.metadata.name or environment
        active = env.status.active_version or env.spec.app_version or "draft"
        version = body.version or active
        content, generation = await self._content(namespace, env, version)
        suite = content.evaluations
        if suite is None:
            raise ConflictError(
                f"version {version} of app {env.spec.app_ref!r} has no evaluation suite: add spec.evaluations "
                "(cases with a message and expectations) to the App and create a version",
                {"field": "spec.evaluations", "version": version},
            )
        raw = suite.model_dump(mode="json", by_alias=True, exclude_none=True)
        problems = evaluations.compile_problems(raw)
        if problems:
            raise InvalidError(
                f"the evaluation suite of version {version} does not compile: "
                + "; ".join(str(p) for p in problems[:3]),
                [{"field": p.field, "message": p.message} for p in problems],
            )
        cases = list(raw["cases"])
        if body.cases is not None:
            known = {c["name"] for c in cases}
            unknown = [
                {"field": f"body.cases[{i}]", "message": f"no case {c} in the suite"}
                for i, c in enumerate(body.cases)
                if c not in known
            ]
            if unknown:
                raise InvalidError(f"unknown case(s): {unknown[0]['message']}", unknown)
            cases = [c for c in cases if c["name"] in set(body.cases)]
        running = [r for r in await self.runs.list(namespace, name, limit=20) if r.phase == "running"]
        if running:
            raise ConflictError(
                f"evaluation run {running[0].id} of version {running[0].version} is still running in {name}: "
                "wait for it to end (GET .../evaluations/{run})",
                {"run": running[0].id},
            )
        run_id = uuid.uuid4().hex[:16]
        concurrency = int(raw.get("concurrency") or 4)
        waves = math.ceil(len(cases) / concurrency)
        bound = waves * (self.runtime.settings.turn_timeout_seconds * 2 + 5) + 60
        plan = Plan(
            run_id, namespace, name, env.spec.app_ref, version, cases, raw.get("judgeModel"), concurrency, generation
        )
        await self.runs.create(
            run_id=run_id,
            namespace=namespace,
            environment=name,
            app=env.spec.app_ref,
            version=version,
            shadow=version != active,
            by=self.user.username,
            total=len(cases),
            bound_seconds=bound,
        )
        task = asyncio.create_task(self._execute(plan, env, shadow=version != active, bound=bound))
        _RUNNING.add(task)
        task.add_done_callback(_RUNNING.discard)
        return run_view(await self.runs.get(namespace, name, run_id))

    async def get(self, namespace: str, environment: str, run_id: str) -> EvaluationRunView:
        env = await self.environment(namespace, environment)
        run = await self.runs.get(namespace, env.metadata.name or environment, run_id)
        return run_view(run, await self.runs.previous(run))

    async def list(self, namespace: str, environment: str, limit: int = 20) -> EvaluationRunList:
        """The environment's newest runs (without their per-case results), newest first."""
        env = await self.environment(namespace, environment)
        found = await self.runs.list(namespace, env.metadata.name or environment, limit)
        views = [run_view(r).model_copy(update={"results": []}) for r in found]
        return EvaluationRunList(items=views)

    async def wait(self, namespace: str, environment: str, run_id: str, timeout: float) -> EvaluationRunView:
        """The run once it is no longer running, or as it is after ``timeout`` seconds (for the CLI)."""
        env = await self.environment(namespace, environment)
        name = env.metadata.name or environment
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            run = await self.runs.get(namespace, name, run_id)
            if run.phase != "running" or asyncio.get_running_loop().time() >= deadline:
                return run_view(run, await self.runs.previous(run))
            await asyncio.sleep(0.5)

    async def _content(self, namespace: str, env: Environment, version: str) -> tuple[AppContent, int]:
        """The version's content, and for the draft the App's generation (0 for a version: immutable)."""
        if version == "draft":
            app = await self.repos.apps.get(namespace, env.spec.app_ref)
            return app.spec, int(app.metadata.generation or 0)
        found = await self.repos.app_versions.find(namespace, AppVersion.object_name(env.spec.app_ref, version))
        if found is None:
            raise NotFoundError(
                f"app {env.spec.app_ref!r} has no version {version}",
                [{"field": "body.version", "message": f"no AppVersion {env.spec.app_ref}-{version}"}],
            )
        return found.spec, 0

    async def _execute(self, plan: Plan, env: Environment, *, shadow: bool, bound: float) -> None:
        tracing.detach()  # the run's turns are traces of their own, not parts of the request that started it
        results: list[dict[str, Any]] = []

        async def progress(so_far: list[dict[str, Any]]) -> None:
            nonlocal results
            results = so_far
            await self.runs.progress(plan.run_id, so_far)

        try:
            async with asyncio.timeout(bound):
                results = await EvaluationRunner(self.runtime).run(plan, progress)
        except Exception as exc:
            log.warning("evaluation run %s ended with an error: %r", plan.run_id, exc)
            why = exc.message if isinstance(exc, DockyardError) else f"{type(exc).__name__}: {exc}"
            await self.runs.finish(plan.run_id, "error", results, why or "timed out")
            return
        phase = "passed" if all(r["passed"] for r in results) else "failed"
        await self.runs.finish(plan.run_id, phase, results)
        entry = evaluations.summary(
            run=plan.run_id,
            environment=plan.environment,
            shadow=shadow,
            version=plan.version,
            finished_at=datetime.now(UTC).replace(microsecond=0),
            by=self.user.username,
            results=results,
        )
        try:
            await self._record(plan, entry)
        except DockyardError as exc:
            log.warning("evaluation run %s: the summary could not be recorded: %s", plan.run_id, exc.message)
        failed = evaluations.describe_failures(entry)
        message = (
            f"evaluation run {plan.run_id} of version {plan.version} in {plan.environment} by {entry['by']}: "
            f"{entry['passed']}/{entry['total']} cases passed" + (f"; {failed}" if failed else "")
        )
        reason, kind = ("EvaluationPassed", "Normal") if phase == "passed" else ("EvaluationFailed", "Warning")
        await record_event(self.repos.kube, env.to_manifest(), reason=reason, message=message[:1000], type_=kind)

    async def _record(self, plan: Plan, entry: dict[str, Any]) -> None:
        """Add ``entry`` to the status.evaluations of the AppVersion (the App for the draft), as Dockyard,
        guarded by the resourceVersion read."""
        draft = plan.version == "draft"
        repo = self.dockyard.apps if draft else self.dockyard.app_versions
        name = plan.app if draft else AppVersion.object_name(plan.app, plan.version)
        for _ in range(ATTEMPTS):
            holder = await repo.objects.get(plan.namespace, name)
            current = (holder.get("status") or {}).get("evaluations") or []
            try:
                await repo.objects.merge(
                    plan.namespace,
                    name,
                    {"status": {"evaluations": evaluations.with_summary(current, entry)}},
                    resource_version=holder["metadata"]["resourceVersion"],
                    sub="status",
                )
                return
            except ConflictError:
                continue
        raise ConflictError(f"the evaluation run could not be recorded on {name}: it kept changing")
