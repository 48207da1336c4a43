"""The conversation store's values: a stored message, a turn in progress, an environment's rate limits,
and the usage counters with their report."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

SESSION_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
"""Session ids a client may choose: 1 to 128 letters, digits and ``. _ : @ -``."""


@dataclass(frozen=True)
class StoredMessage:
    role: str
    """user or assistant."""
    content: str
    id: str = ""
    agent: str | None = None
    tools_used: tuple[str, ...] = ()
    created_at: datetime | None = None


@dataclass(frozen=True)
class Turn:
    """A turn in progress on a session: the session is held until finish_turn or abort_turn."""

    session_id: str
    version: str
    """The app version the session is pinned to (the one ACTIVE when it started)."""
    history: list[StoredMessage]
    """Earlier messages, oldest first, bounded (history_messages, history_max_chars)."""
    created: bool
    """True when this turn created the session."""
    namespace: str
    environment: str
    app: str
    user_id: str | None
    key_id: str
    token: str = field(repr=False)
    session_pk: int = field(repr=False)
    started: float = field(default_factory=time.monotonic, repr=False, compare=False)
    """When the turn took the session (``time.monotonic()``): its latency is measured from here."""


@dataclass(frozen=True)
class RateLimits:
    """Environment ``spec.rateLimits``: None means no limit."""

    requests_per_minute: int | None = None
    tokens_per_day: int | None = None

    @classmethod
    def of(cls, limits: Any) -> RateLimits:
        """From the spec's dict (camelCase), a pydantic model with the same attributes, or None."""
        if limits is None:
            return cls()
        if isinstance(limits, RateLimits):
            return limits
        if isinstance(limits, Mapping):
            return cls(limits.get("requestsPerMinute"), limits.get("tokensPerDay"))
        return cls(getattr(limits, "requests_per_minute", None), getattr(limits, "tokens_per_day", None))


@dataclass
class Counters:
    requests: int = 0
    errors: int = 0
    rate_limited: int = 0
    tokens_in: int = 0
    tokens_out: int = 0

    def add(self, other: Counters) -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.rate_limited += other.rate_limited
        self.tokens_in += other.tokens_in
        self.tokens_out += other.tokens_out

    def view(self) -> dict[str, int]:
        return {
            "requests": self.requests,
            "errors": self.errors,
            "rateLimited": self.rate_limited,
            "tokensIn": self.tokens_in,
            "tokensOut": self.tokens_out,
        }


@dataclass
class UsageReport:
    """Usage of one environment over [since, until] (UTC days, both included)."""

    namespace: str
    environment: str
    since: date
    until: date
    totals: Counters
    days: dict[date, Counters]
    keys: dict[str, Counters]

    def view(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "environment": self.environment,
            "from": self.since.isoformat(),
            "to": self.until.isoformat(),
            "totals": self.totals.view(),
            "days": [{"day": d.isoformat(), **c.view()} for d, c in sorted(self.days.items())],
            "keys": [{"keyId": k, **c.view()} for k, c in sorted(self.keys.items())],
        }


@dataclass(frozen=True)
class StoredIntervention:
    """One guardrail or PII intervention as stored with its turn (never the value it matched)."""

    at: datetime
    app: str
    version: str
    session_id: str
    message_id: str | None
    """The stored reply's id; None when the turn failed and stored nothing."""
    policy: str
    stage: str
    action: str
    reason: str
    tool: str = ""

    def view(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "at": self.at.isoformat().replace("+00:00", "Z"),
            "app": self.app,
            "version": self.version,
            "sessionId": self.session_id,
            "messageId": self.message_id,
            "policy": self.policy,
            "stage": self.stage,
            "action": self.action,
            "reason": self.reason,
        }
        if self.tool:
            body["tool"] = self.tool
        return body
