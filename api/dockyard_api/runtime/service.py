"""The runtime of the facade: one object (``AppState.runtime`` of :mod:`dockyard_api.deps`) that runs turns of
deployed apps.

A turn, in order: the environment (404 when gone) and its app (404 for another app id); then ONE store
transaction counts the request against the rate limits (429) and takes the session for the turn
(creating it pinned to the active version; 404 for another user's session, 409 while another turn runs
on it); the app content of the session's version; the agent loop under the whole-turn deadline; then
ONE store transaction keeps the user message and the reply and counts the usage (or, for a failed turn,
releases the session and counts the error, keeping nothing of the turn). Two transactions per turn.

Guardrails and PII protection (:mod:`~dockyard_api.runtime.guard`, docs/guardrails.md) screen the message,
the tool calls and the answer when the version has guardrails or the environment PII settings; what they
did (their interventions) is stored with the turn, in the same transaction, and reported in the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dockyard_api import metrics
from dockyard_api.auth import EnvironmentCaller
from dockyard_api.cache import Informer
from dockyard_api.runtime import tracing
from dockyard_api.runtime.agent import AgentRunner, Blocked, Emit, TurnResult
from dockyard_api.runtime.canary import Figures, live_answer
from dockyard_api.runtime.config import AppLookup, EnvironmentView, RunnableContent, TurnWorld
from dockyard_api.runtime.endpoints import MODEL_DEPLOYMENT_LABEL, EndpointMode, EndpointResolver
from dockyard_api.runtime.errors import AppNotRunnableError, ModelTimeoutError
from dockyard_api.runtime.guard import TurnGuard
from dockyard_api.runtime.model import ModelClient, Usage
from dockyard_api.runtime.retrieval import KnowledgeSearch, turn_sources
from dockyard_api.runtime.tools import Limits, McpClient
from dockyard_core import logs
from dockyard_core.errors import DockyardError, NotFoundError, RateLimitedError
from dockyard_core.interventions import Intervention
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.pii import pii_key

log = logging.getLogger(__name__)

KINDS = ("environments", "apps", "appversions", "modeldeployments", "tools", "tooldeployments", "knowledgebases")


class Store(Protocol):
    """The part of Contract 3's ConversationStore that a turn uses."""

    async def start_turn(
        self,
        *,
        namespace: str,
        environment: str,
        app: str,
        session_id: str | None,
        user_id: str | None,
        version: str,
        key_id: str,
        limits: Any = None,
        version_for: Callable[[str], str] | None = None,
    ) -> Any: ...

    async def finish_turn(
        self,
        turn: Any,
        *,
        user_message: str,
        reply: str,
        agent: str,
        tools_used: list[str],
        tokens_in: int,
        tokens_out: int,
        usage: bool = False,
        interventions: Sequence[Intervention] = (),
    ) -> str: ...

    async def abort_turn(
        self,
        turn: Any,
        *,
        error: str,
        usage: tuple[int, int] | None = None,
        interventions: Sequence[Intervention] = (),
    ) -> None: ...


SigningKey = Callable[[str, str], Awaitable[bytes]]
"""The widget signing key of (namespace, environment): what PII placeholders are derived from."""


ADMISSION_HOLD_SECONDS = 0.05
"""The longest a turn's preparation keeps its place in :class:`Admission` (a normal one takes a few ms)."""


@dataclass(frozen=True)
class RuntimeSettings:
    endpoint_mode: EndpointMode = "cluster"
    max_steps: int = 6
    turn_timeout_seconds: float = 120.0
    tool_timeout_seconds: float = 20.0
    tool_max_bytes: int = 64 * 1024
    model_connections: int = 256
    knowledge_index: str = ""
    """The knowledge index's URL (docs/knowledge-bases.md); empty: agents get no knowledge-base search."""
    turns_preparing: int = 4
    """Turns that prepare at once (:class:`Admission`); the others wait in arrival order."""


class Admission:
    """At most ``size`` turns of a facade prepare at once (environment, rate limits, session: the local work
    and the store's transaction before the model is asked); the others wait their turn in arrival order.

    A turn's preparation awaits the store, so without this a burst of turns (callers in step, a widget page's
    users answered at once) interleaves: each one's work is spread over the whole burst's, and they all reach
    their model late, together. Admitted a few at a time, the first reach their model after their own work, the
    median one after half the burst's. With 32 callers in step the p50 the facade adds fell from 7 to 9 ms to
    3 to 5 ms, its throughput from 0.91 to 0.93 of the direct calls to 0.94 to 0.97 (docs/benchmarks.md, "Turns admitted
    a few at a time"). The model calls themselves are never held back.

    A turn holds its place for at most ``hold_seconds`` (a preparation takes a millisecond or a few): when the
    store stalls, the turns behind it go on after that, instead of waiting for the stalled ones' timeouts one
    group after another. One semaphore per event loop (asyncio's wakes its waiters in order, and belongs to the
    loop it first waits on)."""

    def __init__(self, size: int, hold_seconds: float = ADMISSION_HOLD_SECONDS) -> None:
        self.size = size
        self.hold_seconds = hold_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gate = asyncio.Semaphore(size)

    @contextlib.asynccontextmanager
    async def __call__(self) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._loop, self._gate = loop, asyncio.Semaphore(self.size)
        gate = self._gate
        await gate.acquire()
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                gate.release()

        timer = loop.call_later(self.hold_seconds, release)
        try:
            yield
        finally:
            timer.cancel()
            release()


@dataclass
class Prepared:
    """A turn that has its session: what runs next."""

    caller: EnvironmentCaller
    env: EnvironmentView
    turn: Any
    message: str
    evaluation: bool = False
    """A case of an evaluation run (docs/promotion.md): no traffic, so neither the metrics nor the per-version
    figures count it."""


def answer_body(
    result: TurnResult,
    session_id: str,
    message_id: str,
    interventions: Sequence[Intervention] = (),
    sources: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The execute answer (docs/deployed-app-api.md, 'Answer'): the JSON of
    :class:`~dockyard_api.runtime.schemas.ExecuteAnswer`, built as a dict and serialised once with orjson
    (the blocking answer, and the stream's done event)."""
    return {
        "response": result.response,
        "session_id": session_id,
        "agent": result.agent,
        "tools_used": list(result.tools_used),
        "tokens": {"input": result.usage.tokens_in, "output": result.usage.tokens_out},
        "message_id": message_id,
        "guardrails": [i.as_json() for i in interventions],
        "sources": list(sources),
    }


class AppRuntime:
    def __init__(self, kube: AsyncKube, settings: RuntimeSettings, signing_key: SigningKey | None = None) -> None:
        self.settings = settings
        self.signing_key = signing_key
        self._fallback_key = secrets.token_bytes(32)
        self.kube = kube
        self.informers = {plural: Informer(kube, plural) for plural in KINDS}
        pods = None
        if settings.endpoint_mode == "local":
            pods = Informer(kube, "pods", label_selector=MODEL_DEPLOYMENT_LABEL, index_label=MODEL_DEPLOYMENT_LABEL)
            self.informers["pods"] = pods
        resolver = EndpointResolver(settings.endpoint_mode, self.informers["modeldeployments"], pods)
        self.lookup = AppLookup(kube, self.informers, resolver)
        if settings.knowledge_index:
            self.lookup.knowledge = KnowledgeSearch(settings.knowledge_index)
        self.models = ModelClient(max_connections=settings.model_connections)
        self.mcp = McpClient()
        self.runner = AgentRunner(self.models, max_steps=settings.max_steps)
        self.limits = Limits(settings.tool_timeout_seconds, settings.tool_max_bytes)
        self.figures = Figures(None)
        """Where finished turns are reported per version (the facade gives it the store's recorder)."""
        self.admission = Admission(settings.turns_preparing)

    def start(self) -> None:
        for informer in self.informers.values():
            informer.start()

    async def aclose(self) -> None:
        for informer in self.informers.values():
            await informer.stop()
        await self.models.aclose()
        if self.lookup.knowledge is not None:
            await self.lookup.knowledge.aclose()

    # --- a turn ------------------------------------------------------------------------------------

    async def prepare(
        self,
        store: Store,
        caller: EnvironmentCaller,
        app_id: str,
        *,
        message: str,
        session_id: str | None,
        user_id: str | None,
    ) -> Prepared:
        """Everything that can refuse the request with a plain HTTP error, before any answer is sent; a few turns
        at a time (:class:`Admission`)."""
        async with self.admission():
            env = await self.lookup.environment(caller.namespace, caller.environment)
            if app_id != env.app:
                raise NotFoundError(
                    f"app {app_id!r} is not deployed in environment {env.name!r} (its app is {env.app!r})",
                    {"appId": app_id},
                )
            owner = caller.end_user if caller.end_user is not None else user_id
            split = {"version_for": env.canary.chooser(env.active_version)} if env.canary is not None else {}
            try:
                turn = await store.start_turn(
                    namespace=env.namespace,
                    environment=env.name,
                    app=env.app,
                    session_id=session_id,
                    user_id=owner,
                    version=env.active_version,
                    key_id=caller.key_id,
                    limits=env.rate_limits,  # counted in the same transaction; 429 before 404 and 409
                    **split,  # a canary: a new session's version by its id (docs/promotion.md)
                )
            except RateLimitedError as exc:
                limit = exc.details.get("limit") if isinstance(exc.details, dict) else None
                metrics.rate_limited(env.namespace, env.name, str(limit or "unknown"))
                raise
            return Prepared(caller, env, turn, message)

    async def complete(
        self, store: Store, prepared: Prepared, *, emit: Emit | None = None, stream: bool = False
    ) -> dict[str, Any]:
        """Run the prepared turn and store it: the answer body. Any failure releases the session, keeps
        nothing of the turn, counts an error and is raised (a :class:`DockyardError` for every expected one)."""
        usage = Usage()
        env, turn = prepared.env, prepared.turn
        count: Any = _UNCOUNTED if prepared.evaluation else metrics  # an evaluation run's turn is no traffic
        figures: Any = _UNCOUNTED if prepared.evaluation else self.figures
        started = time.monotonic()
        sources = turn_sources()  # what the turn's knowledge-base searches return (docs/knowledge-bases.md)
        guard: TurnGuard | None = None
        traced = tracing.turn(env, turn.version, turn.session_id)  # None when tracing is off
        try:
            content = await self.lookup.content(env.namespace, env.app, turn.version)
            guard = await self._guard(prepared, content, usage)
            if guard is not None:  # what this request's task logs from here is redacted as the store keeps it
                logs.pii_for_this_task(guard.pii, key=guard.key, session=guard.session)
            stored, message = prepared.message, prepared.message
            try:
                if guard is not None:
                    stored, message = await guard.input(prepared.message)
            except Blocked as blocked:  # the model is not asked; the answer is the block message
                stored = blocked.stored if blocked.stored is not None else stored
                result, reply = TurnResult(blocked.message, "", blocked=True, usage=usage), blocked.message
            else:
                result = await self._run(prepared, content, usage, emit, stream, guard, message)
                reply = result.response
                if guard is not None and not result.blocked:
                    result.response, reply, result.blocked = await guard.output(result.response)
            if guard is not None and stream and emit is not None and (result.blocked or guard.holds_output):
                await emit("delta", {"text": result.response})  # held back until screened
            interventions = guard.interventions if guard is not None else []
            message_id = await store.finish_turn(
                turn,
                user_message=stored,
                reply=reply,
                agent=result.agent,
                tools_used=result.tools_used,
                tokens_in=usage.tokens_in,
                tokens_out=usage.tokens_out,
                usage=True,  # the request and its tokens are counted in the transaction that stores the turn
                interventions=interventions,
            )
        except BaseException as exc:
            outcome = exc.code if isinstance(exc, DockyardError) else "error"
            tracing.turn_failed(traced, outcome)
            count.execute_outcome(env.namespace, env.name, outcome, time.monotonic() - started)
            figures.turn(
                namespace=env.namespace, environment=env.name, version=turn.version,
                seconds=time.monotonic() - started, tokens=(usage.tokens_in, usage.tokens_out), live=env.live,
                outcome="cancelled" if isinstance(exc, asyncio.CancelledError) else outcome,
            )  # fmt: skip
            count.tokens(env.namespace, env.name, usage.tokens_in, usage.tokens_out)
            acted = guard.interventions if guard is not None else []
            with contextlib.suppress(Exception):  # releases the session and counts the error in one transaction
                await asyncio.shield(
                    store.abort_turn(
                        turn, error=_why(exc), usage=(usage.tokens_in, usage.tokens_out), interventions=acted
                    )
                )
            raise
        seconds = time.monotonic() - started
        count.execute_outcome(env.namespace, env.name, "ok", seconds)
        count.tokens(env.namespace, env.name, usage.tokens_in, usage.tokens_out)
        figures.turn(
            namespace=env.namespace, environment=env.name, version=turn.version, seconds=seconds, outcome="ok",
            tokens=(usage.tokens_in, usage.tokens_out), live=env.live, message_id=message_id,
            answer=live_answer(result, seconds) if env.live is not None else None,
        )  # fmt: skip
        body = answer_body(result, turn.session_id, message_id, interventions, sources)
        if traced is not None:  # its attributes; the text only redacted by the environment's PII settings
            pii, key = (guard.pii, guard.key) if guard is not None else (None, b"")
            tracing.turn_done(traced, body, pii, key, prepared.message, result.response)
        return body

    async def _guard(self, prepared: Prepared, content: RunnableContent, usage: Usage) -> TurnGuard | None:
        """The turn's guard: None when the version has no guardrails and the environment no PII settings."""
        env = prepared.env
        if content.guardrails_error is not None:
            problems = content.guardrails_error.problems
            raise AppNotRunnableError(
                f"the guardrails of version {content.version} of app {env.app!r} do not compile: "
                + "; ".join(str(p) for p in problems),
                [{"field": p.field, "message": p.message} for p in problems],
            )
        if env.pii_error:
            raise AppNotRunnableError(
                f"the PII settings of environment {env.name!r} do not compile: {env.pii_error}", {"field": "spec.pii"}
            )
        if content.guardrails is None and env.pii is None:
            return None
        key = b""
        if env.pii is not None:
            base = await self.signing_key(env.namespace, env.name) if self.signing_key else self._fallback_key
            key = pii_key(base)
        session = str(prepared.turn.session_id)
        return TurnGuard(env, session, content.guardrails, env.pii, key, self.lookup, self.models, usage)

    async def _run(
        self,
        prepared: Prepared,
        content: RunnableContent,
        usage: Usage,
        emit: Emit | None,
        stream: bool,
        guard: TurnGuard | None,
        message: str,
    ) -> TurnResult:
        if not content.agents:
            raise AppNotRunnableError(
                f"version {content.version} of app {prepared.env.app!r} has no agents: add one to answer messages",
                {"app": prepared.env.app, "version": content.version},
            )
        world = TurnWorld(self.lookup, self.models, self.mcp, prepared.env, content, self.limits)
        agents = list(self.lookup.agents(prepared.env, content))  # the environment's configuration filled in
        history = [{"role": m.role, "content": m.content} for m in prepared.turn.history]
        if guard is not None:
            history = guard.history(history)
        deadline = self.settings.turn_timeout_seconds
        stream_deltas = stream and not (guard is not None and guard.holds_output)
        tool_guard = guard if guard is not None and guard.guards_tools else None
        try:
            async with asyncio.timeout(deadline):
                return await self.runner.run(
                    agents, world, history, message, emit=emit, stream=stream_deltas, usage=usage, guard=tool_guard
                )
        except TimeoutError:
            raise ModelTimeoutError(
                f"the turn did not finish within its deadline of {deadline:g}s (model calls: {usage.calls})",
                {"deadlineSeconds": deadline},
            ) from None

    async def events(
        self, store: Store, prepared: Prepared, *, ping_seconds: float = 15.0
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """The turn as a stream of (event, data): agent, tool_call, tool_result, delta, then done or error;
        ("ping", {}) whenever nothing happened for ``ping_seconds``."""
        queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()

        async def emit(event: str, data: dict[str, Any]) -> None:
            queue.put_nowait((event, data))

        async def produce() -> None:
            try:
                body = await self.complete(store, prepared, emit=emit, stream=True)
                queue.put_nowait(("done", body))
            except DockyardError as exc:
                queue.put_nowait(("error", _error_event(exc.code, exc.message, exc.details, exc.status_code)))
            except Exception as exc:
                log.exception("turn failed")
                queue.put_nowait(("error", _error_event("internal_error", _why(exc), None, 500)))
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(produce())
        try:
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), ping_seconds)
                except TimeoutError:
                    yield ("ping", {})
                    continue
                if item is None:
                    break
                yield item
        finally:
            if not task.done():  # the client went away: the turn stops, nothing of it is kept
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def _error_event(code: str, message: str, details: Any, status: int) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details}, "status": status}


class _Uncounted:
    """What an evaluation run's turn reports to instead of the metrics and the per-version figures."""

    def execute_outcome(self, *_: Any) -> None: ...

    def tokens(self, *_: Any) -> None: ...

    def turn(self, **_: Any) -> None: ...


_UNCOUNTED = _Uncounted()


def _why(exc: BaseException) -> str:
    if isinstance(exc, DockyardError):
        return exc.message
    if isinstance(exc, asyncio.CancelledError):
        return "the client went away"
    return f"{exc.__class__.__name__}: {exc}"
