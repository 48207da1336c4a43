"""Pure assessment of a deployment job: IN_PROGRESS, SUCCESS or FAILED, with a reason and a message.

Inputs are plain dicts as the API server returns them (Deployment, Pods) plus what the handler knows
about the nodes of the requested device type. SUCCESS means the workload really serves: the
Deployment has rolled out its current template and at least ``min_ready`` pods are Ready and
available. FAILED is terminal for the job and always explained.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dockyard_core.conditions import transition
from dockyard_core.resources.v1alpha1 import FAILED, PROGRESSING, READY, Condition, DockJob
from dockyard_operator.scheduling import MISSING_CLAIM, NodeFit, capacity_short, never_fits, not_capacity, unschedulable

IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
CRASH_REASONS = frozenset({"CrashLoopBackOff", "RunContainerError", "CreateContainerError"})
CONFIG_REASONS = frozenset({"CreateContainerConfigError"})
_MISSING_OBJECT = re.compile(r'(secret|configmap) "([^"]+)" not found', re.IGNORECASE)
_MISSING_KEY = re.compile(r"couldn't find key (\S+) in (Secret|ConfigMap) ([^\s]+)")
_MOUNT_VOLUME = re.compile(r'for volume "([^"]+)"')


@dataclass(frozen=True)
class Verdict:
    status: str  # IN_PROGRESS | SUCCESS | FAILED
    reason: str
    message: str


def _waiting(pods: Sequence[Mapping[str, Any]], reasons: frozenset[str]) -> tuple[str, str] | None:
    for pod in pods:
        for status in pod.get("status", {}).get("containerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in reasons:
                return waiting[
                    "reason"
                ], f"container {status.get('name')}: {waiting.get('message') or waiting['reason']}"
    return None


def _crash(pods: Sequence[Mapping[str, Any]]) -> str | None:
    found = _waiting(pods, CRASH_REASONS)
    if found is None:
        return None
    for pod in pods:
        for status in pod.get("status", {}).get("containerStatuses") or []:
            last = (status.get("lastState") or {}).get("terminated") or {}
            if status.get("restartCount", 0) and last:
                return (
                    f"container {status.get('name')} keeps crashing: restarted {status['restartCount']} times, "
                    f"last exit code {last.get('exitCode')} ({last.get('reason') or 'Error'})"
                    + (f": {last['message']}" if last.get("message") else "")
                )
    return found[1]


def _missing_config(pods: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """A container that cannot start because a Secret, a ConfigMap or a key of one is missing."""
    for pod in pods:
        statuses = [
            *(pod.get("status", {}).get("initContainerStatuses") or []),
            *(pod.get("status", {}).get("containerStatuses") or []),
        ]
        for status in statuses:
            waiting = (status.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") not in CONFIG_REASONS:
                continue
            text = waiting.get("message") or waiting["reason"]
            name = status.get("name")
            if found := _MISSING_OBJECT.search(text):
                kind = "Secret" if found.group(1).lower() == "secret" else "ConfigMap"
                return f"Missing{kind}", f'container {name} needs the {kind} "{found.group(2)}", which does not exist'
            if found := _MISSING_KEY.search(text):
                return (
                    f"Missing{found.group(2)}Key",
                    f"container {name} needs the key {found.group(1)} of {found.group(2)} {found.group(3)}, "
                    "which it does not have",
                )
            return "CreateContainerConfigError", f"container {name}: {text}"
    return None


MOUNT_STUCK_AFTER_SECONDS = 2.0
"""A scheduled pod whose containers have not started this long after it was scheduled may be stuck on
a volume: its FailedMount Events are worth a look (the kubelet reports them within a second)."""


def on_node_not_started(pod: Mapping[str, Any]) -> bool:
    """A pod scheduled on a node whose containers have not started (phase Pending): only its FailedMount
    Events tell a volume that cannot be mounted."""
    return (
        bool((pod.get("spec") or {}).get("nodeName")) and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
    )


def mount_pending(pods: Sequence[Mapping[str, Any]], now: datetime) -> list[str]:
    """Names of the pods that sit scheduled but not started (phase Pending on a node) for at least
    :data:`MOUNT_STUCK_AFTER_SECONDS`: those whose FailedMount Events the reconcile reads. A pod that
    runs needs no look, so a healthy rollout costs no Event list."""
    names = []
    for pod in pods:
        status = pod.get("status", {})
        if not on_node_not_started(pod):
            continue
        scheduled = next(
            (
                c
                for c in status.get("conditions") or []
                if c.get("type") == "PodScheduled" and c.get("status") == "True"
            ),
            None,
        )
        since = (scheduled or {}).get("lastTransitionTime")
        if (
            since
            and (now - datetime.fromisoformat(since.replace("Z", "+00:00"))).total_seconds() < MOUNT_STUCK_AFTER_SECONDS
        ):
            continue
        names.append(pod.get("metadata", {}).get("name"))
    return [n for n in names if n]


def _failed_mount(
    pods: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]
) -> tuple[str, str, bool] | None:
    """The kubelet's FailedMount Event of one of ``pods`` (v1 Events, as the API server returns them):
    (reason, message, permanent). A volume whose Secret, ConfigMap, key or claim does not exist is
    permanent (the scheduler does not check Secret and ConfigMap volume sources); any other mount
    failure (a slow attach, an unreachable NFS server, a CSI driver starting) may pass."""
    names = {p.get("metadata", {}).get("name") for p in pods if not p.get("metadata", {}).get("deletionTimestamp")}
    found: tuple[str, str, bool] | None = None
    for event in events:
        involved = event.get("involvedObject") or {}
        if event.get("reason") != "FailedMount" or involved.get("kind", "Pod") != "Pod":
            continue
        if involved.get("name") not in names:
            continue
        text = str(event.get("message") or "").strip()
        volume = _MOUNT_VOLUME.search(text)
        where = f'volume "{volume.group(1)}" of pod {involved.get("name")}' if volume else f"pod {involved.get('name')}"
        namespace = involved.get("namespace") or (event.get("metadata") or {}).get("namespace") or "its namespace"
        if missing := _MISSING_OBJECT.search(text):
            kind = "Secret" if missing.group(1).lower() == "secret" else "ConfigMap"
            return (
                f"Missing{kind}",
                f'{where} cannot be mounted: the {kind} "{missing.group(2)}" does not exist in namespace {namespace} '
                f"(kubelet: {text})",
                True,
            )
        if key := _MISSING_KEY.search(text):
            return (
                f"Missing{key.group(2)}Key",
                f"{where} cannot be mounted: {key.group(2)} {key.group(3)} has no key {key.group(1)} (kubelet: {text})",
                True,
            )
        if claim := MISSING_CLAIM.search(text):
            return (
                "MissingVolumeClaim",
                f'{where} cannot be mounted: the PersistentVolumeClaim "{claim.group(1)}" does not exist in '
                f"namespace {namespace} (kubelet: {text})",
                True,
            )
        found = found or ("FailedMount", f"{where} cannot be mounted (kubelet: {text})", False)
    return found


def _init_failure(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """An init container (the storage initializer) that keeps failing, with its last message."""
    for pod in pods:
        for status in pod.get("status", {}).get("initContainerStatuses") or []:
            waiting = (status.get("state") or {}).get("waiting") or {}
            last = (status.get("lastState") or {}).get("terminated") or {}
            if waiting.get("reason") in CRASH_REASONS and status.get("restartCount", 0) and last:
                detail = (last.get("message") or "").strip().splitlines()
                return (
                    f"init container {status.get('name')} keeps failing: restarted {status['restartCount']} times, "
                    f"last exit code {last.get('exitCode')}" + (f": {detail[-1]}" if detail else "")
                )
    return None


def pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _deployment_condition(deployment: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for cond in deployment.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return {}


def rolled_out(deployment: Mapping[str, Any] | None, min_ready: int) -> bool:
    """The Deployment's current template is rolled out with at least ``min_ready`` ready, available pods."""
    if deployment is None:
        return False
    status = deployment.get("status", {})
    if status.get("observedGeneration", 0) < deployment.get("metadata", {}).get("generation", 0):
        return False
    counts = (status.get(k, 0) or 0 for k in ("updatedReplicas", "readyReplicas", "availableReplicas"))
    available = _deployment_condition(deployment, "Available").get("status") == "True"
    return available and all(c >= min_ready for c in counts)


def assess(
    job: DockJob,
    deployment: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    *,
    min_ready: int,
    requests: Mapping[str, str],
    fit: NodeFit,
    now: datetime,
    unschedulable_deadline_seconds: float,
    node_autoscaling: bool = False,
    events: Sequence[Mapping[str, Any]] = (),
) -> Verdict:
    """The job's status now. A terminal job keeps its verdict.

    ``events`` are the FailedMount Events of the pods (see :func:`mount_pending`): a volume whose Secret,
    ConfigMap or claim does not exist FAILS the job at once (reason ``MissingSecret``,
    ``MissingConfigMap``, ``Missing<Kind>Key`` or ``MissingVolumeClaim``, naming the volume and the
    object); any other mount failure is shown while the job waits and FAILS it (``FailedMount``) at the
    unschedulable deadline, counted from the job's start.

    A replica that cannot be scheduled FAILS the job at once when the cause is not capacity (a missing
    claim, no node matching the selector unless ``node_autoscaling`` may add one, a taint every node of
    the type has); waiting for capacity fails at ``unschedulable_deadline_seconds``, and the message names
    the resource that is short ("free GPUs" only when GPUs are)."""
    if job.status != "IN_PROGRESS":
        return Verdict(job.status, job.reason, job.message)
    live = [p for p in pods if not p.get("metadata", {}).get("deletionTimestamp")]
    if reason := never_fits(requests, fit):
        return Verdict("FAILED", "NoFittingNode", reason)
    if pulled := _waiting(live, IMAGE_PULL_REASONS):
        return Verdict("FAILED", "ImagePullError", f"the image cannot be pulled ({pulled[0]}): {pulled[1]}")
    if missing := _missing_config(live):
        return Verdict("FAILED", missing[0], missing[1])
    mount = _failed_mount(live, events)
    if mount is not None and mount[2]:
        return Verdict("FAILED", mount[0], mount[1])
    if init := _init_failure(live):
        return Verdict("FAILED", "WeightDownloadFailed" if "storage-initializer" in init else "InitCrashLoop", init)
    if crash := _crash(live):
        return Verdict("FAILED", "CrashLoop", crash)
    progressing = _deployment_condition(deployment or {}, "Progressing")
    if progressing.get("reason") == "ProgressDeadlineExceeded":
        return Verdict("FAILED", "ProgressDeadlineExceeded", progressing.get("message") or "rollout stalled")
    ready_now = sum(1 for p in live if pod_ready(p))
    if rolled_out(deployment, min_ready) and ready_now >= min_ready:  # pods of this job's template
        return Verdict("SUCCESS", "Available", f"{ready_now} replica(s) ready and serving")
    if stuck := unschedulable(live):
        since, scheduler = stuck
        if cause := not_capacity(scheduler, fit, node_autoscaling=node_autoscaling):
            return Verdict("FAILED", cause[0], cause[1])
        start = max(filter(None, (since, job.start_time)), default=now)
        waited = (now - start).total_seconds()
        gpus = requests.get("nvidia.com/gpu", "0")
        short = capacity_short(scheduler)
        if not fit.nodes:
            what = f"no {fit.device_type} node"
        elif "nvidia.com/gpu" in short or not short:
            what = f"no {fit.device_type} node with {gpus} free GPUs"
        else:
            what = f"no {fit.device_type} node with enough free {', '.join(short)}"
        if waited >= unschedulable_deadline_seconds:
            return Verdict("FAILED", "Unschedulable", f"{what} for {waited:.0f}s: {scheduler}")
        return Verdict("IN_PROGRESS", "Unschedulable", f"waiting for {what} ({waited:.0f}s): {scheduler}")
    status = (deployment or {}).get("status", {})
    if mount is not None:
        waited = (now - (job.start_time or now)).total_seconds()
        if waited >= unschedulable_deadline_seconds:
            return Verdict("FAILED", mount[0], f"{mount[1]}; waited {waited:.0f}s")
        return Verdict("IN_PROGRESS", mount[0], f"waiting ({waited:.0f}s): {mount[1]}")
    return Verdict(
        "IN_PROGRESS",
        "RollingOut",
        f"{status.get('readyReplicas', 0) or 0} of {min_ready} required replica(s) ready",
    )


def seconds_to_deadline(
    job: DockJob,
    pods: Sequence[Mapping[str, Any]],
    *,
    now: datetime,
    unschedulable_deadline_seconds: float,
) -> float | None:
    """How long until the job's verdict can change with no new event: the unschedulable deadline of a
    job in flight with a replica that cannot be scheduled (None when no such deadline runs)."""
    if job.status != "IN_PROGRESS":
        return None
    stuck = unschedulable([p for p in pods if not p.get("metadata", {}).get("deletionTimestamp")])
    if stuck is None:
        return None
    start = max(filter(None, (stuck[0], job.start_time)), default=now)
    return max(0.0, unschedulable_deadline_seconds - (now - start).total_seconds())


def conditions_for(
    verdict: Verdict,
    ready: bool,
    ready_message: str,
    generation: int,
    now: datetime,
    previous: Sequence[Condition],
) -> list[Condition]:
    """Ready, Progressing and Failed, keeping lastTransitionTime when a status did not change."""
    before = [c.model_dump(mode="json", by_alias=True) for c in previous]

    def cond(kind: str, status: bool, reason: str, message: str) -> Condition:
        return Condition.model_validate(transition(before, kind, status, reason, message, now, generation))

    return [
        cond(READY, ready, "Available" if ready else "NotReady", ready_message),
        cond(PROGRESSING, verdict.status == "IN_PROGRESS", verdict.reason, verdict.message),
        cond(FAILED, verdict.status == "FAILED", verdict.reason if verdict.status == "FAILED" else "NoFailure",
             verdict.message if verdict.status == "FAILED" else ""),
    ]  # fmt: skip
