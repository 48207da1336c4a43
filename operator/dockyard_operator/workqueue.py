"""A per-object work queue: event-driven reconciliation without kopf timers (and so without a finalizer).

kopf hands the operator every watch event; for one ModelDeployment they come in bursts: its creation,
its own label and status writes, its Deployment's status updates, its Pods' scheduling and readiness.
The queue turns them into reconciles the way controller-runtime's work queue does:

- at most one reconcile of an object runs at a time, with the newest body known;
- a reconcile starts a short batch window after its trigger, and triggers that arrive meanwhile or
  while it runs cause exactly one more run (they coalesce): a Pod turning Ready, its ReplicaSet and
  its Deployment reporting it arrive within milliseconds and cost one reconcile, not three;
- a reconcile says when it wants to run again without an event (a deadline, the periodic re-check),
  and any earlier trigger supersedes that;
- a reconcile that fails is retried with an exponential backoff;
- at most ``max_concurrent`` reconciles run at once (controller-runtime's MaxConcurrentReconciles),
  first come first served: when 1,500 objects arrive together, the first ones can finish (their
  status written) while the later ones wait, instead of each API call of every object queueing behind
  those of all the others.

What the queue keeps is a cache of what the API says plus pending triggers: after a restart the first
list (the operator's own of ModelDeployments, kopf's initial listing of ToolDeployments) triggers every
object again, so nothing here must survive a restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dockyard_operator import monitoring

Body = Mapping[str, Any]
ObjectKey = tuple[str, str]
"""(namespace, name) of a queued object."""

logger = logging.getLogger(__name__)

BACKOFF_SECONDS = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event about the reconciled object, for the kopf handler to post."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


PostEvent = Callable[[Mapping[str, Any], Event], None]
"""How a kopf-free part of the operator hands an Event about an object (its body) to the handlers'
poster (:func:`dockyard_operator.handlers.events.post_event`)."""


def log_event(body: Mapping[str, Any], event: Event) -> None:
    """A poster without kopf (unit tests, tools): the Event is only logged."""
    meta = body.get("metadata") or {}
    level = logging.INFO if event.type == "Normal" else logging.WARNING
    logger.log(level, "%s/%s: %s: %s", meta.get("namespace"), meta.get("name"), event.reason, event.message)


@dataclass(frozen=True)
class Outcome:
    """What a reconcile reports back to the queue (and the Events its handler posts)."""

    requeue_after: float | None = None
    """Run again after this many seconds unless an event comes first (None: only on events)."""
    written: Body | None = None
    """The object as the API server returned it after this reconcile's last write, if it wrote."""
    passed: tuple[str, ...] = ()
    """The resourceVersions this reconcile's writes replaced (the body it read, then each write)."""
    result: str = "success"
    """For the metrics: success, or why nothing was done (conflict: the object changed meanwhile; gone)."""
    events: tuple[Event, ...] = ()
    """Events about the object: the reconciles stay free of kopf, the handler posts them."""
    batch_window: float | None = None
    """How long the object's next run waits for more triggers (None: the queue's own window). A job rolling
    out as it should waits longer: a new object's first second (its Deployment created and updated, its
    Pod created, scheduled and started) or a Pod turning Ready and its Deployment reporting it, events
    that arrive up to a second apart on a busy control plane, then cost one reconcile, not two or three."""


Reconcile = Callable[[Body], Awaitable[Outcome]]


def key_of(body: Body) -> ObjectKey:
    meta = body["metadata"]
    return meta.get("namespace") or "", meta["name"]


def version_of(body: Body) -> str | None:
    version: str | None = body["metadata"].get("resourceVersion")
    return version


class WorkQueue:
    """Coalescing, per-object serialised reconciles of one kind of object."""

    def __init__(self, kind: str, reconcile: Reconcile, batch_window: float = 0.1, max_concurrent: int = 32) -> None:
        self.kind = kind
        self._reconcile = reconcile
        self.batch_window = batch_window
        self._slots = asyncio.Semaphore(max_concurrent)
        self._bodies: dict[ObjectKey, Body] = {}
        self._written: dict[ObjectKey, tuple[frozenset[str], Body]] = {}
        self._pending: set[ObjectKey] = set()
        self._running: dict[ObjectKey, asyncio.Task[None]] = {}
        self._timers: dict[ObjectKey, asyncio.TimerHandle] = {}
        self._failures: dict[ObjectKey, int] = {}
        self._locks: dict[ObjectKey, asyncio.Lock] = {}
        self._active = 0
        self._windows: dict[ObjectKey, float] = {}
        """Per-object batch windows asked for by the last reconcile (Outcome.batch_window)."""
        self._reconciling: set[ObjectKey] = set()
        self._seen_during: set[ObjectKey] = set()
        """Objects whose watch event arrived while their reconcile ran (observe)."""
        self._since: dict[ObjectKey, tuple[float, str]] = {}
        """When each pending object was first triggered, and by what (the queue-wait and cause metrics)."""
        monitoring.register_queue(self)

    def depth(self) -> int:
        """Objects triggered whose reconcile has not started yet."""
        return len(self._pending)

    def running(self) -> int:
        """Reconciles running now."""
        return self._active

    # --- what the watch says ---------------------------------------------------------------------

    def observe(self, body: Body) -> None:
        """A watch event of the object (anything but its deletion): remember it and reconcile, unless it is
        the version the last reconcile's own write returned (that reconcile already acted on it)."""
        key = key_of(body)
        self._bodies[key] = body
        if key in self._reconciling:
            # the reconcile's own write may arrive before the reconcile returns what it wrote: decide then
            self._seen_during.add(key)
            return
        written = self._written.get(key)
        if written is not None and body["metadata"].get("resourceVersion") == version_of(written[1]):
            return
        self.trigger(key, "object")

    def _news_since_reconcile(self, key: ObjectKey) -> None:
        """A watch event arrived while the object's reconcile ran: news unless it is a version that
        reconcile read or wrote."""
        seen, written = self._bodies.get(key), self._written.get(key)
        if seen is None:
            return
        version = seen["metadata"].get("resourceVersion")
        if written is not None and (version in written[0] or version == version_of(written[1])):
            return
        self.trigger(key, "object")

    def forget(self, body: Body) -> None:
        """The object is gone: drop what is known about it (a running reconcile finishes, then stops)."""
        key = key_of(body)
        self._bodies.pop(key, None)
        self._written.pop(key, None)
        self._pending.discard(key)
        self._since.pop(key, None)
        self._failures.pop(key, None)
        self._windows.pop(key, None)
        self._locks.pop(key, None)
        self._seen_during.discard(key)
        if (timer := self._timers.pop(key, None)) is not None:
            timer.cancel()

    def body(self, key: ObjectKey) -> Body | None:
        """The newest known state of the object: the watch's, or what our own last write returned
        while the watch has not delivered that write yet."""
        seen = self._bodies.get(key)
        written = self._written.get(key)
        if seen is None or written is None:
            return seen
        passed, body = written
        if seen["metadata"].get("resourceVersion") in passed:
            return body  # the watch still shows a version our write chain replaced
        del self._written[key]  # the watch has caught up (our write, or a newer change)
        return seen

    def keys(self, namespace: str | None = None) -> list[ObjectKey]:
        return [k for k in self._bodies if namespace is None or k[0] == namespace]

    def lock(self, key: ObjectKey) -> asyncio.Lock:
        """Held during each reconcile of the object; other writers of the object (the autoscaler) share it."""
        return self._locks.setdefault(key, asyncio.Lock())

    # --- triggers --------------------------------------------------------------------------------

    def trigger(self, key: ObjectKey, cause: str = "related") -> None:
        """Reconcile the object soon (once, however many triggers arrive meanwhile). ``cause`` names what
        queued it, for the metrics (monitoring.RECONCILE_CAUSES)."""
        if key not in self._bodies:
            return  # not (yet) listed, or gone: its own event will come, or nothing is to be done
        if key not in self._pending:
            self._since[key] = (time.monotonic(), cause)
        self._pending.add(key)
        if key not in self._running:
            self._running[key] = asyncio.get_running_loop().create_task(self._run(key), name=f"{self.kind} {key}")

    def trigger_all(self, keys: Iterable[ObjectKey], cause: str = "related") -> None:
        for key in keys:
            self.trigger(key, cause)

    def _after(self, key: ObjectKey, delay: float, cause: str = "timer") -> None:
        if (timer := self._timers.pop(key, None)) is not None:
            timer.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(delay, self._timer_fired, key, cause)

    def _timer_fired(self, key: ObjectKey, cause: str) -> None:
        self._timers.pop(key, None)
        self.trigger(key, cause)

    async def _run(self, key: ObjectKey) -> None:
        try:
            while key in self._pending:
                if (window := self._windows.get(key, self.batch_window)) > 0:
                    await asyncio.sleep(window)  # triggers meanwhile join this run
                if (timer := self._timers.pop(key, None)) is not None:
                    timer.cancel()
                try:
                    async with self._slots, self.lock(key):
                        self._pending.discard(key)  # triggers until now (also while it waited) are served by this run
                        started = time.monotonic()
                        since, cause = self._since.pop(key, (started, "related"))
                        monitoring.waited(self.kind, started - since, cause)
                        body = self.body(key)  # the newest known
                        if body is None:
                            return  # gone meanwhile
                        self._active += 1
                        self._reconciling.add(key)
                        try:
                            outcome = await self._reconcile(body)
                        except Exception:
                            monitoring.reconciled(self.kind, "error", time.monotonic() - started)
                            self._seen_during.discard(key)  # the retry reads the newest
                            raise
                        finally:
                            self._active -= 1
                            self._reconciling.discard(key)
                        monitoring.reconciled(self.kind, outcome.result, time.monotonic() - started)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    failures = self._failures.get(key, 0)
                    self._failures[key] = failures + 1
                    delay = BACKOFF_SECONDS[min(failures, len(BACKOFF_SECONDS) - 1)]
                    logger.exception("reconciling %s %s/%s failed; retrying in %ss", self.kind, *key, delay)
                    if key in self._bodies:
                        self._after(key, delay, "retry")
                    continue
                self._failures.pop(key, None)
                if key not in self._bodies:
                    return  # deleted while it was reconciled
                if outcome.written is not None:
                    self._written[key] = (frozenset(outcome.passed), outcome.written)
                if key in self._seen_during:
                    self._seen_during.discard(key)
                    self._news_since_reconcile(key)
                if outcome.requeue_after is not None:
                    self._after(key, outcome.requeue_after)
                if outcome.batch_window is None:
                    self._windows.pop(key, None)
                else:
                    self._windows[key] = outcome.batch_window
        finally:
            self._running.pop(key, None)

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
