"""The usage endpoints of the management API (``management/usage``: usage statistics and interventions) as
unit tests drive them: a SQLite conversation store, an RBAC stand-in and a test client acting as alice."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient

from dockyard_api.deps import get_authenticator, get_store, kube_user
from dockyard_api.errors import install_error_handlers
from dockyard_api.management.usage import router as usage
from dockyard_api.store import ConversationStore
from dockyard_core.errors import ForbiddenError
from dockyard_core.kubeclient import User


class FakeAuth:
    """RBAC stand-in: the SubjectAccessReview answer is set per test (the real one is tested e2e)."""

    def __init__(self) -> None:
        self.allowed = True
        self.asked: list[dict[str, Any]] = []

    async def require(self, user: User, **attrs: Any) -> None:
        self.asked.append(attrs)
        if not self.allowed:
            raise ForbiddenError(f'user "{user.username}" cannot get environments.dockyard.dev')


def sqlite_store(tmp_path: Path) -> Iterator[ConversationStore]:
    """A started conversation store on a SQLite file under ``tmp_path`` (for a fixture to ``yield from``)."""
    s = ConversationStore(f"sqlite:///{tmp_path / 'dockyard.db'}")
    asyncio.run(s.start())
    yield s
    asyncio.run(s.close())


def usage_client(store: ConversationStore | None, auth: FakeAuth) -> TestClient:
    """The usage router alone, as alice; without ``store`` the database is unavailable (503)."""
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(usage.router)
    if store is not None:
        app.dependency_overrides[get_store] = lambda: store
    app.dependency_overrides[kube_user] = lambda: User(username="alice", uid="1", groups=(), extra={})
    app.dependency_overrides[get_authenticator] = lambda: auth
    return TestClient(app)
