"""The period of UTC days a usage or analytics query covers (dockyard_api.management.period)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from dockyard_api.management.period import utc_days
from dockyard_core.errors import InvalidError


def test_defaults_are_the_days_ending_today() -> None:
    since, until = utc_days(None, None, default_days=30, max_days=366)
    assert until == datetime.now(UTC).date()
    assert since == until - timedelta(days=29)


def test_a_given_period_is_kept() -> None:
    assert utc_days(date(2026, 1, 1), date(2026, 1, 14), default_days=14, max_days=14) == (
        date(2026, 1, 1),
        date(2026, 1, 14),
    )


@pytest.mark.parametrize(
    ("since", "until", "field"),
    [
        (date(2026, 1, 10), date(2026, 1, 1), "query.from"),
        (date(2026, 1, 1), date(2026, 1, 15), "query.from"),
        (None, date(1, 1, 5), "query.to"),
    ],
)
def test_bad_periods_name_the_field(since: date | None, until: date, field: str) -> None:
    with pytest.raises(InvalidError) as raised:
        utc_days(since, until, default_days=14, max_days=14)
    assert [d["field"] for d in raised.value.details] == [field]
