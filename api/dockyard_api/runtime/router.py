"""``POST {api_base_url}/v1/apps/{app_id}/execute``: call a deployed app.

``{api_base_url}`` is the environment's base URL (``/e/<namespace>/<environment>``); the caller holds an
API key of that environment (``Authorization: Bearer``). A blocking call answers JSON; with
``"stream": true`` (or ``Accept: text/event-stream``) the turn is streamed as Server-Sent Events. See
docs/deployed-app-api.md.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import ValidationError

from dockyard_api.deps import AppCaller, AppId, app_state, store_of
from dockyard_api.public.schemas import ERROR_MEANINGS, ErrorBody
from dockyard_api.runtime.schemas import ExecuteAnswer, ExecuteBody
from dockyard_core.guardrails import header_value
from dockyard_core.interventions import Intervention
from dockyard_core.resources.v1alpha1.common import (
    DNS_LABEL_MAX_LENGTH,
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_MAX_LENGTH,
    DNS_SUBDOMAIN_PATTERN,
)

_LABEL = re.compile(DNS_LABEL_PATTERN)
_SUBDOMAIN = re.compile(DNS_SUBDOMAIN_PATTERN)


class ExecuteRoute(APIRoute):
    """The execute call's route: FastAPI's own handler, with a shorter way in front of it for a request that is
    valid as it comes (the path's names, a JSON body that is an :class:`ExecuteBody`): parsed, authenticated by
    the ``caller`` dependency (:func:`~dockyard_api.deps.app_caller`) and handed to the endpoint (:func:`execute`)
    without FastAPI's per-request dependency solving, which cost a turn about a tenth of the facade's CPU
    (docs/benchmarks.md, "The execute call without FastAPI's dependency solving"). Anything else (a name or body
    FastAPI would refuse, another content type, overridden dependencies) goes to FastAPI's handler, so every
    refusal is FastAPI's, word for word; a valid request gets the same arguments either way
    (tests/unit/api/test_execute_route.py)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        standard = super().get_route_handler()
        endpoint = self.endpoint
        authenticate = next(d.call for d in self.dependant.dependencies if d.name == "caller")
        assert authenticate is not None

        async def handler(request: Request) -> Response:
            overridden = getattr(request.scope.get("app"), "dependency_overrides", None)
            arguments = None if overridden else await _valid_as_it_comes(request)
            if arguments is None:
                return await standard(request)
            namespace, environment, app_id, body = arguments
            caller = await authenticate(
                request=request,
                namespace=namespace,
                environment=environment,
                authorization=request.headers.get("authorization"),
            )
            response: Response = await endpoint(app_id=app_id, body=body, caller=caller, request=request)
            return response

        return handler


async def _valid_as_it_comes(request: Request) -> tuple[str, str, str, ExecuteBody] | None:
    """The path's names and the body, where FastAPI would take them as they are; None for anything else (which
    FastAPI's handler then answers)."""
    params = request.path_params
    namespace, environment, app_id = params.get("namespace"), params.get("environment"), params.get("app_id")
    if not (
        isinstance(namespace, str)
        and isinstance(environment, str)
        and isinstance(app_id, str)
        and len(namespace) <= DNS_LABEL_MAX_LENGTH
        and len(environment) <= DNS_SUBDOMAIN_MAX_LENGTH
        and len(app_id) <= DNS_SUBDOMAIN_MAX_LENGTH
        and _LABEL.fullmatch(namespace)
        and _SUBDOMAIN.fullmatch(environment)
        and _SUBDOMAIN.fullmatch(app_id)
    ):
        return None
    content_type = request.headers.get("content-type")
    if content_type is None or content_type.partition(";")[0].strip().lower() != "application/json":
        return None
    try:
        raw = await request.body()  # kept by the request: FastAPI's handler reads the same bytes
    except Exception:  # a client gone mid-body: FastAPI's handler answers it (its 400), as it would have
        return None
    try:
        body = ExecuteBody.model_validate(orjson.loads(raw))  # what FastAPI validates, from what json.loads gives
    except (orjson.JSONDecodeError, ValidationError):
        return None
    return namespace, environment, app_id, body


router = APIRouter(tags=["deployed apps"], route_class=ExecuteRoute)
GUARDRAILS_HEADER = "X-Dockyard-Guardrails"
"""What the guardrails did to the turn, ``<action>=<stage>:<policy>`` each (docs/guardrails.md)."""

EXAMPLE = {
    "response": "It is 12 °C and cloudy in Oslo.",
    "session_id": "session-1",
    "agent": "weather",
    "tools_used": ["weather"],
    "tokens": {"input": 412, "output": 37},
    "message_id": "msg_3f0c5e0b9a7d4d3c8b1e2f6a7c9d0e1f",
    "guardrails": [],
}
SSE_EXAMPLE = (
    'event: agent\ndata: {"agent":"weather"}\n\n'
    'event: tool_call\ndata: {"id":"call_1","name":"weather","arguments":"{\\"city\\":\\"Oslo\\"}"}\n\n'
    'event: tool_result\ndata: {"id":"call_1","name":"weather","ok":true,"content":"{\\"celsius\\":12}"}\n\n'
    'event: delta\ndata: {"text":"It is 12 °C"}\n\n'
    'event: done\ndata: {"response":"It is 12 °C and cloudy in Oslo.","session_id":"session-1",...}\n\n'
)
MEANINGS = {
    **ERROR_MEANINGS,
    401: "no API key (Authorization: Bearer), or an unknown or revoked one",
    403: "an API key of another environment",
    404: "an app id that is not this environment's app, or a session of another user",
    409: "a turn is already running on this session",
    422: "a body that is not valid: missing or empty message, unknown fields, wrong types",
    429: "over a rate limit of the environment; Retry-After says when to retry",
    502: "the model endpoint answered an error or something that is not a chat completion",
    503: "no model endpoint serves the agent's model, the app has no runnable agent, or the database is away",
    504: "the turn did not finish within its deadline (a slow model endpoint)",
}


@router.post(
    "/v1/apps/{app_id}/execute",
    summary="Call a deployed app: send a message, get the agent's answer",
    response_model=ExecuteAnswer,
    responses={
        200: {
            "description": "The answer (also when a guardrail blocked the turn: its block message); with streaming, "
            "Server-Sent Events ending with a done (or error) event",
            "headers": {
                GUARDRAILS_HEADER: {
                    "description": "when a guardrail or the PII protection acted: <action>=<stage>:<policy>, "
                    "comma-separated (blocking answers only; the done event carries guardrails)",
                    "schema": {"type": "string"},
                }
            },
            "content": {
                "application/json": {"example": EXAMPLE},
                "text/event-stream": {"schema": {"type": "string"}, "example": SSE_EXAMPLE},
            },
        },
        **{code: {"model": ErrorBody, "description": MEANINGS[code]} for code in (401, 403, 404, 409, 422, 429)},
        **{code: {"model": ErrorBody, "description": MEANINGS[code]} for code in (502, 503, 504)},
    },
)
async def execute(app_id: AppId, body: ExecuteBody, caller: AppCaller, request: Request) -> Response:
    # the runtime, the store and the settings read from the application's state, not as three dependencies: the
    # hot path (each dependency FastAPI resolves costs a turn about 6 µs in a loop; docs/benchmarks.md)
    store, state = store_of(request), app_state(request)
    runtime, settings = state.runtime, state.settings
    prepared = await runtime.prepare(
        store,
        caller,
        app_id,
        message=body.message,
        session_id=body.session_id,
        user_id=body.metadata.user_id if body.metadata else None,
    )
    streaming = body.stream or "text/event-stream" in request.headers.get("accept", "")
    if not streaming:
        answer = await runtime.complete(store, prepared)
        # the ExecuteAnswer's JSON, serialised once with orjson (the hot path: bench.execute measures it)
        acted = answer["guardrails"]
        headers = {GUARDRAILS_HEADER: header_value([Intervention(**i) for i in acted])} if acted else None
        return Response(orjson.dumps(answer), media_type="application/json", headers=headers)

    async def events() -> AsyncIterator[bytes]:
        async for event, data in runtime.events(store, prepared, ping_seconds=settings.execute_ping_seconds):
            if event == "ping":
                yield b": ping\n\n"
            else:
                yield b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "X-Session-Id": prepared.turn.session_id},
    )
