"""What the reconciles of both workload kinds (ModelDeployment, ToolDeployment) share: the children
applied with their owner reference and hash, the dock job (started, finished, its Event), the status
write (once per job transition, guarded by the resourceVersion) and when to look again.

Each kind's reconcile (:mod:`.modeldeployment`, :mod:`.tooldeployment`) is run by the object's
:class:`~dockyard_operator.workqueue.WorkQueue` whenever a watch event may change its outcome (the object
itself, its Deployment or Pods, its Model or Tool) and when the reconcile asked to be re-run (a deadline,
the periodic re-check). Each call reads the current state (the object, and kopf's in-memory indexes of
Models, Tools, Deployments, Pods and Nodes, which kopf rebuilds from the API after a restart), computes
what should exist with the pure builders, applies it only where it differs, assesses the dock job with
:func:`~dockyard_operator.assess.assess`, and patches the status only when it changed, guarded by the
object's resourceVersion.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dockyard_core.clock import now, utcnow
from dockyard_core.resources.v1alpha1 import DOCK_STATUS_ID_LABEL, DockJob, JobType
from dockyard_operator import monitoring
from dockyard_operator.assess import Verdict, mount_pending, on_node_not_started, seconds_to_deadline
from dockyard_operator.builders.common import APPLIED_HASH_ANNOTATION, TEMPLATE_HASH_ANNOTATION, hash_of
from dockyard_operator.context import Body, Context
from dockyard_operator.kube import Denied, Gone, owner_reference
from dockyard_operator.workqueue import Event, Outcome


def dump(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def owned(objects: Sequence[dict[str, Any]], owner_kind: str, meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Children with the controller owner reference and the hash of the whole set."""
    applied = hash_of(objects)
    out = []
    for obj in objects:
        obj = {**obj, "metadata": {**obj["metadata"]}}
        obj["metadata"]["ownerReferences"] = [owner_reference(owner_kind, dict(meta))]
        obj["metadata"]["annotations"] = {**obj["metadata"].get("annotations", {}), APPLIED_HASH_ANNOTATION: applied}
        out.append(obj)
    return out


async def apply_if_changed(ctx: Context, objects: list[dict[str, Any]], current: dict[str, Any] | None) -> bool:
    """Server-side apply unless the live Deployment says the same set was applied already.

    The Deployment is applied last: an operator killed half-way leaves no Deployment with the new
    hash, so the next reconcile applies the whole set again (server-side apply is idempotent)."""
    applied = objects[0]["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
    if current is not None and current["metadata"].get("annotations", {}).get(APPLIED_HASH_ANNOTATION) == applied:
        return False
    for obj in objects:
        await ctx.kube.apply(obj)
    return True


def created_at(body: Body) -> datetime | None:
    stamp = body["metadata"].get("creationTimestamp")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")) if isinstance(stamp, str) else None


def job_for(
    current: DockJob | None,
    requested: str | None,
    template_hash: str,
    generation: int,
    job_type: JobType,
    created: datetime | None = None,
) -> tuple[DockJob, bool]:
    """The job this reconcile works on, and whether it is new.

    A new job starts when the facade asked for one (a new dock-status-id label), or when the
    workload changed (template hash) — e.g. a kubectl edit of the spec. An object's first job started
    when the object was created (``created``): its status may be written only when it ends
    (:func:`held_back`), and each reconcile until then rebuilds the same job.
    """
    same_request = current is not None and (not requested or requested == current.dock_status_id)
    if current is not None and same_request and current.template_hash == template_hash:
        return current, False
    job_id = requested if requested and (current is None or requested != current.dock_status_id) else None
    job = DockJob(
        dock_status_id=job_id or str(uuid.uuid4()),
        job_type=job_type,
        action="DEPLOY",
        status="IN_PROGRESS",
        reason="Deploying",
        message="deployment started",
        start_time=created if current is None and created is not None else now(),
        generation=generation,
        template_hash=template_hash,
    )
    return job, True


def finish(job: DockJob, verdict: Verdict) -> DockJob:
    if (job.status, job.reason, job.message) == (verdict.status, verdict.reason, verdict.message):
        return job
    done = verdict.status != "IN_PROGRESS"
    return job.model_copy(
        update={
            "status": verdict.status,
            "reason": verdict.reason,
            "message": verdict.message,
            "completion_time": now() if done else None,
        }
    )


def job_events(
    body: Body, before: DockJob | None, after: DockJob, new: bool, success_events: bool = False
) -> tuple[Event, ...]:
    """The job's Event (the handler posts it) and its metrics. A failed job gets a Warning with the
    failure; a successful one a Normal ``Deployed`` only with ``success_events``: its record is the
    status (job, Ready condition with its transition time), the log line and the jobs metric, and an
    Event is one more write to the API server per rollout."""
    events: list[Event] = []
    if new:
        monitoring.job_started(body, after.dock_status_id, after.job_type, after.action)
    if after.status == "IN_PROGRESS" or (before is not None and not new and before.status == after.status):
        return tuple(events)
    monitoring.job_finished(
        body,
        dock_status_id=after.dock_status_id,
        job_type=after.job_type,
        action=after.action,
        status=after.status,
        reason=after.reason,
        device_type=(body.get("spec") or {}).get("deviceType"),
        start=after.start_time,
        end=after.completion_time,
    )
    if after.status == "SUCCESS":
        if success_events:
            events.append(Event("Normal", "Deployed", f"dock job {after.dock_status_id}: {after.message}"))
    else:
        events.append(Event("Warning", after.reason, f"dock job {after.dock_status_id} FAILED: {after.message}"))
    return tuple(events)


def in_flight(before: DockJob | None, job: DockJob) -> bool:
    """The same job, still IN_PROGRESS for the same reason: its status is not written again (one status
    write per job transition). What changes meanwhile (replica counts, conditions, the message's
    counts and seconds) is written with the next transition; a new reason (e.g. RollingOut to
    Unschedulable) is a transition."""
    return (
        before is not None
        and before.dock_status_id == job.dock_status_id
        and before.status == job.status == "IN_PROGRESS"
        and before.reason == job.reason
    )


PROGRESSING = frozenset({"Deploying", "RollingOut"})
"""The reasons of a job that runs as it should (the IN_PROGRESS status it may hold back)."""
ROLLOUT_BATCH_SECONDS = 1.0
"""The batch window of a job rolling out as it should (workqueue.Outcome.batch_window) once its pods run:
its status is held back or unchanged until it ends, so waiting a second for its related events (a Pod
Ready, then its Deployment's ready and available replicas) costs nothing visible."""
STARTUP_BATCH_SECONDS = 3.0
"""The batch window of a job rolling out as it should while a pod of it has not started yet: its Deployment,
ReplicaSet and Pods are created, scheduled and started by three controllers, whose events spread over
seconds when many rollouts start at once. Nothing but a failure can be concluded before a pod runs, and a
failure (a pull error, a refusal by the scheduler) is reported three seconds later at most."""


def rollout_batch_window(job: DockJob, pods: Sequence[Mapping[str, Any]]) -> float | None:
    """The batch window of the job's next reconcile (None: the work queue's default): wider while the rollout
    starts (:data:`STARTUP_BATCH_SECONDS`) than once every pod runs (:data:`ROLLOUT_BATCH_SECONDS`), so the
    reconciles of a rollout count its stages, not its watch events."""
    if job.status != "IN_PROGRESS" or job.reason not in PROGRESSING:
        return None
    started = bool(pods) and all((p.get("status") or {}).get("phase", "Pending") != "Pending" for p in pods)
    return ROLLOUT_BATCH_SECONDS if started else STARTUP_BATCH_SECONDS


def held_back(
    body: Body,
    before: DockJob | None,
    job: DockJob,
    requested: str | None,
    settle_seconds: float,
    at: datetime | None = None,
) -> float:
    """Seconds the status of a new object's first job is still held back (0: write it when it changes).

    The facade labels what it creates with the job's id, and answers for the job from that label until
    the status has it, so the IN_PROGRESS write of a rollout that goes as it should and ends within the
    settle window (``settle_seconds`` after the object's creation) would tell nobody anything: the
    status is written once, when the job ends. A rollout still in flight at the end of the window gets
    its IN_PROGRESS status then, and one that waits for something (a replica that cannot be scheduled,
    a volume that cannot be mounted: any reason but :data:`PROGRESSING`) gets it at once. Derived from
    the object alone (its creationTimestamp and the absence of a job in its status), so a restarted
    operator holds back exactly the same writes."""
    if before is not None or job.status != "IN_PROGRESS" or job.reason not in PROGRESSING:
        return 0.0
    if requested != job.dock_status_id:
        return 0.0
    created = created_at(body)
    if created is None:
        return 0.0
    return max(0.0, settle_seconds - ((at or utcnow()) - created).total_seconds())


def changed(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    return any(current.get(k) != v for k, v in desired.items())


async def write_status(
    ctx: Context,
    body: Body,
    plural: str,
    status: dict[str, Any],
    job: DockJob,
    before: DockJob | None,
    new_job: bool,
    requested: str | None,
    hold: float = 0.0,
) -> tuple[Body | None, tuple[str, ...], tuple[Event, ...]]:
    """Write the job label (a new job the facade did not label) and the status, when they changed and
    the status is not held back (``hold`` seconds left, :func:`held_back`).

    Returns the object as the API server has it after the last write (None when nothing was written)
    and the resourceVersions the writes replaced, so the work queue can use the written object until
    the watch delivers it; and the Events the write calls for."""
    meta = body["metadata"]
    version = meta["resourceVersion"]
    passed = [version]
    if new_job and requested != job.dock_status_id:
        # The lookup of a dockStatusId is one labelled list: keep the label in step with the job.
        labels = {DOCK_STATUS_ID_LABEL: job.dock_status_id}
        labelled = await ctx.kube.patch_object(
            plural, meta["namespace"], meta["name"], {"metadata": {"labels": labels}}, version
        )
        version = labelled["metadata"]["resourceVersion"]
        passed.append(version)
    elif hold > 0 or not changed(body.get("status") or {}, status) or in_flight(before, job):
        return None, (), ()
    written = await ctx.kube.patch_status(plural, meta["namespace"], meta["name"], status, version)
    return written, tuple(passed), job_events(body, before, job, new_job, ctx.settings.success_events)


def outcome_of(
    ctx: Context,
    job: DockJob,
    pods: Sequence[Mapping[str, Any]],
    written: tuple[Body | None, tuple[str, ...], tuple[Event, ...]],
    hold: float = 0.0,
) -> Outcome:
    """When to look again with no event: at the unschedulable deadline of a job in flight or the end
    of its status' hold (:func:`held_back`); after the observe interval while a pod sits on a node without
    starting (only a look at its Events tells a volume that cannot be mounted) or the job waits for
    something else; and a job rolling out as it should (``Deploying``, ``RollingOut``) no sooner than the
    end of its hold, else the settled interval: the watch events of its Deployment and Pods bring every
    change of its verdict (Ready, a crash, a pull error, the progress deadline), so periodic looks would
    only cost reconciles, more of them the longer a model takes to load. The settled interval is the
    safety net afterwards."""
    settings = ctx.settings
    if job.status == "IN_PROGRESS":
        deadline = seconds_to_deadline(
            job, pods, now=now(), unschedulable_deadline_seconds=settings.unschedulable_deadline_seconds
        )
        if deadline is not None:  # a second past the deadline: the assessment's clock has whole seconds
            after = min(settings.observe_interval_seconds, deadline + 1.0)
        elif job.reason in PROGRESSING and (mounts_watched(ctx) or not _starting(pods)):
            after = hold + 0.1 if hold > 0 else settings.settled_interval_seconds
        else:
            after = settings.observe_interval_seconds
        if hold > 0:
            after = min(after, hold + 0.1)
    else:
        after = settings.settled_interval_seconds
    return Outcome(
        requeue_after=after,
        written=written[0],
        passed=written[1],
        events=written[2],
        batch_window=rollout_batch_window(job, pods),
    )


def _starting(pods: Sequence[Mapping[str, Any]]) -> bool:
    """A pod scheduled on a node that has not started (Pending): whether its volumes mount only its
    Events tell (assess.mount_pending), so the job is looked at while one exists."""
    return any(on_node_not_started(p) and not (p.get("metadata") or {}).get("deletionTimestamp") for p in pods)


def counts(deployment: dict[str, Any] | None) -> tuple[int, int]:
    status = (deployment or {}).get("status", {})
    return int(status.get("replicas", 0) or 0), int(status.get("readyReplicas", 0) or 0)


def mounts_watched(ctx: Context) -> bool:
    """Whether the FailedMount Events of the workloads' Pods are watched (workloads.FailedMounts)."""
    return ctx.workloads is not None and ctx.workloads.mounts.synced


async def mount_events(ctx: Context, namespace: str, pods: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The FailedMount Events of the pods that sit scheduled but not started (the scheduler does not check
    Secret and ConfigMap volumes; only the kubelet's Events say why such a pod never starts): from the watch
    of them when it runs, else one list call, only while such a pod has waited
    :data:`~dockyard_operator.assess.MOUNT_STUCK_AFTER_SECONDS` (assess.mount_pending)."""
    if ctx.workloads is not None and mounts_watched(ctx):
        starting = {(p.get("metadata") or {}).get("name", "") for p in pods if on_node_not_started(p)}
        return ctx.workloads.mounts.events_of(namespace, starting) if starting else []
    waiting = set(mount_pending(pods, now()))
    if not waiting:
        return []
    try:
        items = await ctx.kube.list_objects("events", namespace, fields="involvedObject.kind=Pod,reason=FailedMount")
    except (Denied, Gone):  # no right to read Events (or the namespace is going): the deadline decides
        return []
    return [e for e in items if (e.get("involvedObject") or {}).get("name") in waiting]


def is_template(obj: dict[str, Any] | None, job: DockJob) -> bool:
    if obj is None:
        return False
    return bool(obj.get("metadata", {}).get("annotations", {}).get(TEMPLATE_HASH_ANNOTATION) == job.template_hash)
