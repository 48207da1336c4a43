"""The conversation store as tests drive it: a request admitted against the rate limits, a request
counted in the usage statistics, both through the turn calls the execute endpoint makes
(``start_turn``/``finish_turn``/``abort_turn``), and a session's stored messages read from the database."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from dockyard_api.store import ConversationStore, StoredMessage
from dockyard_api.store.schema import messages, sessions


async def admitted(store: ConversationStore, *, namespace: str, environment: str, key_id: str, limits: Any) -> None:
    """Count one request against ``limits`` as the execute endpoint does (``start_turn`` with the limits, on
    a new session); RateLimitedError (429) when over one. The turn is aborted at once: nothing stored, no
    usage counted but a refusal's."""
    turn = await store.start_turn(
        namespace=namespace, environment=environment, app="app", session_id=None, user_id=None, version="1.0.0",
        key_id=key_id, limits=limits,
    )  # fmt: skip
    await store.abort_turn(turn, error="admitted only")


async def counted_request(
    store: ConversationStore,
    *,
    namespace: str,
    environment: str,
    key_id: str,
    ok: bool,
    tokens_in: int,
    tokens_out: int,
    limits: Any = None,
) -> None:
    """One request counted in the usage statistics as the execute endpoint counts it: a turn on a new session
    (checked against ``limits``), stored with its usage when ``ok``, else aborted with it (an error)."""
    turn = await store.start_turn(
        namespace=namespace, environment=environment, app="app", session_id=None, user_id=None, version="1.0.0",
        key_id=key_id, limits=limits,
    )  # fmt: skip
    if ok:
        await store.finish_turn(
            turn, user_message="q", reply="a", agent="agent", tools_used=[], tokens_in=tokens_in,
            tokens_out=tokens_out, usage=True,
        )  # fmt: skip
    else:
        await store.abort_turn(turn, error="failed", usage=(tokens_in, tokens_out))


async def stored_messages(
    store: ConversationStore, *, namespace: str, environment: str, session_id: str
) -> list[StoredMessage]:
    """Every stored message of a session, oldest first, read from the database."""
    query = (
        select(messages)
        .join(sessions, messages.c.session_pk == sessions.c.pk)
        .where(
            sessions.c.namespace == namespace,
            sessions.c.environment == environment,
            sessions.c.session_id == session_id,
        )
        .order_by(messages.c.seq)
    )
    rows = await store.run(lambda conn: conn.execute(query).all())
    return [StoredMessage(r.role, r.content, r.id, r.agent, tuple(r.tools_used or ()), r.created_at) for r in rows]
