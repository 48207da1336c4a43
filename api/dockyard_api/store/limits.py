"""Rate limits and usage counters, counted inside the caller's transaction: a turn counts its request
against the Environment's ``spec.rateLimits`` when it takes its session, and its usage (requests, errors,
tokens per environment, API key and UTC day) when it is stored or aborted. Requests per minute are counted
per key in fixed one-minute windows; tokens per day per environment from the usage counters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection

from dockyard_api.store.records import RateLimits
from dockyard_api.store.statements import USAGE_COUNTERS, Statements
from dockyard_core.errors import RateLimitedError


def count_request(
    conn: Connection, sql: Statements, namespace: str, environment: str, key_id: str, rl: RateLimits, now: datetime
) -> RateLimitedError | None:
    """Count one request against ``rl`` in the caller's transaction; the refusal when over a limit (then
    counted as rate limited)."""
    refused: RateLimitedError | None = None
    if rl.tokens_per_day:
        used = conn.execute(
            sql.tokens_today, {"b_ns": namespace, "b_env": environment, "b_day": now.date()}
        ).scalar_one()
        if int(used) >= rl.tokens_per_day:
            midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), UTC)
            refused = RateLimitedError(
                f"environment {environment!r} has used {int(used)} tokens today, its limit is "
                f"{rl.tokens_per_day} (spec.rateLimits.tokensPerDay); it resets at 00:00 UTC",
                {"limit": "tokensPerDay", "value": rl.tokens_per_day, "used": int(used)},
                retry_after=int((midnight - now).total_seconds()) + 1,
            )
    if refused is None and rl.requests_per_minute:
        epoch = now.timestamp()
        row = {"namespace": namespace, "environment": environment, "key_id": key_id}
        counted = sql.write(
            conn, sql.hit, {**row, "minute": int(epoch // 60), "hits": 1, "b_limit": rl.requests_per_minute}
        ).scalar()
        if counted is None:
            refused = RateLimitedError(
                f"API key {key_id!r} has made {rl.requests_per_minute} requests this minute, the limit of "
                f"environment {environment!r} (spec.rateLimits.requestsPerMinute)",
                {"limit": "requestsPerMinute", "value": rl.requests_per_minute, "keyId": key_id},
                retry_after=60 - int(epoch % 60),
            )
    if refused is not None:
        count_usage(conn, sql, namespace, environment, key_id, now, rate_limited=1)
    return refused


def count_usage(
    conn: Connection, sql: Statements, namespace: str, environment: str, key_id: str, now: datetime, **counts: int
) -> None:
    """Add ``counts`` (of :data:`USAGE_COUNTERS`) to the environment's and key's counters of ``now``'s UTC day."""
    row = {"namespace": namespace, "environment": environment, "key_id": key_id, "day": now.date()}
    sql.write(conn, sql.count, {**row, "updated_at": now, **{n: counts.get(n, 0) for n in USAGE_COUNTERS}})
