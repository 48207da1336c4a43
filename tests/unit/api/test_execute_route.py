"""The execute call's shorter way in (:class:`dockyard_api.runtime.router.ExecuteRoute`): a request FastAPI would take
as it comes skips FastAPI's dependency solving; every other request is FastAPI's to answer.

Checked on a route of the execute call's shape (the same path, parameter types, body model and ``caller``
dependency signature) whose endpoint and dependency record what they are given: each request below is sent to the
route as it is and to the same route with FastAPI's handler forced (a dependency override, which the shorter way
leaves to FastAPI); the answers and the recorded arguments must be equal, and the valid requests must have taken the
shorter way. The facade's own execute route is checked to be an ExecuteRoute whose shorter way is used."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Annotated, Any

import pytest
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from fastapi.testclient import TestClient

from dockyard_api.app import ENVIRONMENT_PREFIX, create_app
from dockyard_api.params import AppId, EnvName, NamespaceParam
from dockyard_api.runtime import router as execute_router
from dockyard_api.runtime.router import ExecuteRoute
from dockyard_api.runtime.schemas import ExecuteBody


async def caller_of(
    request: Request,
    namespace: NamespaceParam,
    environment: EnvName,
    authorization: Annotated[str | None, Header()] = None,
) -> tuple[str, str, str | None]:
    """The ``caller`` dependency's signature (dockyard_api.deps.app_caller's), recording what it is given."""
    if authorization == "Bearer wrong":
        raise HTTPException(401, "refused")
    return namespace, environment, authorization


def build(force_fastapi: bool) -> tuple[FastAPI, list[Any]]:
    seen: list[Any] = []

    router = APIRouter(route_class=ExecuteRoute)

    @router.post("/v1/apps/{app_id}/execute")
    async def endpoint(
        app_id: AppId,
        body: ExecuteBody,
        caller: Annotated[tuple[str, str, str | None], Depends(caller_of)],
        request: Request,
    ) -> Response:
        seen.append((app_id, body.model_dump(), caller, request.url.path))
        return JSONResponse({"app": app_id, "message": body.message})

    app = FastAPI()
    app.include_router(router, prefix=ENVIRONMENT_PREFIX)
    if force_fastapi:
        app.dependency_overrides[len] = len  # any override: the shorter way leaves the request to FastAPI
    return app, seen


def body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


JSON = {"content-type": "application/json", "authorization": "Bearer dk_123"}
VALID = [
    ("/e/team-a/bot-draft/v1/apps/bot/execute", JSON, body(message="Hello!")),
    ("/e/team-a/bot-draft/v1/apps/bot/execute", JSON, body(message="Hi", session_id="s-1", metadata={"user_id": "u"})),
    ("/e/team-a/bot.v2/v1/apps/my.bot/execute", JSON, body(message="x", stream=True, metadata=None)),
    ("/e/n/e/v1/apps/a/execute", {"content-type": "Application/JSON; charset=utf-8"}, body(message="é ✓")),
    ("/e/n/e/v1/apps/a/execute", {**JSON, "authorization": "Bearer wrong"}, body(message="who?")),  # 401
    ("/e/n/e/v1/apps/a/execute", JSON, b'{"message": "dup", "message": "last"}'),
]
DECLINED = [  # FastAPI takes these (the shorter way does not: fewer kinds of JSON, one content type)
    ("/e/n/e/v1/apps/a/execute", {"content-type": "application/merge-patch+json"}, body(message="+json")),
    ("/e/n/e/v1/apps/a/execute", JSON, "\ufeff".encode() + body(message="BOM")),
    ("/e/n/e/v1/apps/a/execute", JSON, json.dumps({"message": "hi"}).encode("utf-16")),
]
INVALID = [
    ("/e/Team/bot-draft/v1/apps/bot/execute", JSON, body(message="Hello!")),  # not a DNS label
    ("/e/team/bot_draft/v1/apps/bot/execute", JSON, body(message="Hello!")),
    ("/e/team/bot/v1/apps/-bot/execute", JSON, body(message="Hello!")),
    ("/e/" + "n" * 64 + "/bot/v1/apps/bot/execute", JSON, body(message="Hello!")),  # too long
    ("/e/n/e/v1/apps/a/execute", {}, body(message="no content type")),
    ("/e/n/e/v1/apps/a/execute", {"content-type": "text/plain"}, body(message="text")),
    ("/e/n/e/v1/apps/a/execute", JSON, b""),
    ("/e/n/e/v1/apps/a/execute", JSON, b"{"),
    ("/e/n/e/v1/apps/a/execute", JSON, b'{"message": NaN}'),
    ("/e/n/e/v1/apps/a/execute", JSON, body(message="")),
    ("/e/n/e/v1/apps/a/execute", JSON, body(message=1)),
    ("/e/n/e/v1/apps/a/execute", JSON, body(message="x", extra=True)),
    ("/e/n/e/v1/apps/a/execute", JSON, body(message="x", stream="yes")),
    ("/e/n/e/v1/apps/a/execute", JSON, body(message="x", metadata={"user_id": ""})),
    ("/e/n/e/v1/apps/a/execute", JSON, b'["message"]'),
    ("/e/n/e/v1/apps/a/execute", JSON, b'{"message": "\\ud800"}'),  # a lone surrogate: json takes it, orjson not
    ("/e/n/e/v1/apps/a/execute", JSON, b'{"message": "x", "session_id": 123456789012345678901234567890}'),
]


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each request the shorter way was asked about took it (True) or went to FastAPI's handler."""
    answers: list[bool] = []
    real = execute_router._valid_as_it_comes

    async def counted(request: Request) -> Any:
        found = await real(request)
        answers.append(found is not None)
        return found

    monkeypatch.setattr(execute_router, "_valid_as_it_comes", counted)
    return answers


@pytest.mark.parametrize(("path", "headers", "content"), VALID + DECLINED + INVALID)
def test_the_same_answer_and_arguments_as_fastapi(
    path: str, headers: dict[str, str], content: bytes, taken: list[bool]
) -> None:
    answers = []
    for force in (False, True):
        app, seen = build(force)
        with TestClient(app, raise_server_exceptions=False) as client:
            response = client.post(path, headers=headers, content=content)
        answers.append((response.status_code, response.content, seen))
    assert answers[0] == answers[1]
    assert taken == [(path, headers, content) in VALID]  # only the route with no override asks
    status, _, seen = answers[0]
    if (path, headers, content) in VALID + DECLINED:
        assert status == 200 or headers["authorization"] == "Bearer wrong"
        assert bool(seen) == (status == 200)
    else:
        assert status in (422, 500)  # 500: FastAPI's own 422 handler cannot write NaN or a lone surrogate
        assert not seen


def test_the_facades_execute_route_takes_the_shorter_way(taken: list[bool]) -> None:
    app = create_app()  # not started (no cluster): the requests fail after the route took them; which way counts
    routes = [r for r in execute_router.router.routes if getattr(r, "path", "") == "/v1/apps/{app_id}/execute"]
    assert len(routes) == 1
    assert isinstance(routes[0], ExecuteRoute)
    client = TestClient(app, raise_server_exceptions=False)  # not entered: no lifespan, no cluster
    client.post("/e/team/bot-draft/v1/apps/bot/execute", headers=JSON, content=body(message="Hello!"))
    client.post("/e/team/bot-draft/v1/apps/bot/execute", headers=JSON, content=body(text="Hello!"))
    assert taken == [True, False]


@pytest.mark.parametrize("force", [False, True])
def test_a_client_gone_mid_body_gets_fastapis_answer(force: bool) -> None:
    """The body's read fails (the client disconnected): FastAPI's handler answers, the endpoint is not called."""
    app, seen = build(force)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/e/n/e/v1/apps/a/execute",
        "raw_path": b"/e/n/e/v1/apps/a/execute",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"host", b"test")],
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
    }
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    assert sent[0]["type"] == "http.response.start"
    assert sent[0]["status"] == 400
    assert not seen
