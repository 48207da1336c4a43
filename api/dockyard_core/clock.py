"""Time as Dockyard writes it: one ``now()`` for status fields and one text form for the API's times."""

from __future__ import annotations

from datetime import UTC, datetime


def now() -> datetime:
    """The current time in UTC to the second (the precision of Kubernetes' time fields)."""
    return datetime.now(UTC).replace(microsecond=0)


def utcnow() -> datetime:
    """The current time in UTC, with microseconds (session files, expiry arithmetic)."""
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    """ISO 8601 in UTC with a ``Z``, e.g. 2026-11-23T10:00:00Z (microseconds kept when ``moment`` has them)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def kube_time(moment: datetime) -> str:
    """A Kubernetes ``metav1.Time``: RFC 3339 in UTC to the second, e.g. 2026-11-23T10:00:00Z."""
    return iso(moment.replace(microsecond=0))
