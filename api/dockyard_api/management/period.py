"""The period of UTC days a statistics query covers (the usage and analytics services).

``utc_days(since, until, default_days=..., max_days=...)``: ``until`` defaults to today (UTC) and ``since``
to the ``default_days`` days ending ``until``; a period with ``since`` after ``until``, or longer than
``max_days`` days, is an :class:`~dockyard_core.errors.InvalidError` naming the query field (``from``, ``to``).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from dockyard_core.errors import InvalidError


def utc_days(since: date | None, until: date | None, *, default_days: int, max_days: int) -> tuple[date, date]:
    """The checked period [since, until], its defaults filled in."""
    until = until or datetime.now(UTC).date()
    if since is None:
        if until < date.min + timedelta(days=default_days - 1):
            raise InvalidError(
                "to is too early",
                [{"field": "query.to", "message": f"before year 1 plus {default_days - 1} days"}],
            )
        since = until - timedelta(days=default_days - 1)
    if since > until:
        raise InvalidError("from must not be after to", [{"field": "query.from", "message": "after to"}])
    if (until - since).days >= max_days:
        raise InvalidError(f"at most {max_days} days at once", [{"field": "query.from", "message": "range too long"}])
    return since, until
