"""Status conditions (Ready, Progressing, Failed) as Kubernetes conventions want them.

One rule for every kind: a condition's ``lastTransitionTime`` changes only when its status changes.
Conditions are built in their wire form (the dicts a status merge patch carries); the operator's
typed callers validate the result into :class:`~dockyard_core.resources.v1alpha1.Condition`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from dockyard_core.clock import kube_time


def transition(
    previous: Iterable[Mapping[str, Any]] | None,
    kind: str,
    true: bool,
    reason: str,
    message: str,
    at: datetime,
    generation: int | None = None,
) -> dict[str, Any]:
    """Condition ``kind`` as it is ``at`` now; it keeps the lastTransitionTime of the same condition in
    ``previous`` when its status did not change."""
    status = "True" if true else "False"
    old = next((c for c in previous or () if c.get("type") == kind), None) or {}
    since = old.get("lastTransitionTime") if old.get("status") == status else None
    if isinstance(since, datetime):
        since = kube_time(since)
    cond: dict[str, Any] = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or kube_time(at),
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    return cond


def true_reason(conditions: Iterable[Mapping[str, Any]] | None, kind: str) -> str | None:
    """The reason of condition ``kind`` when it is True, else None."""
    for cond in conditions or ():
        if cond.get("type") == kind and cond.get("status") == "True":
            return str(cond.get("reason"))
    return None
