"""``POST {api_base_url}/v1/apps/{app_id}/execute``: call a deployed app.

``{api_base_url}`` is the environment's base URL (``/e/<namespace>/<environment>``); the caller holds an
API key of that environment (``Authorization: Bearer``). A blocking call answers JSON; with
``"stream": true`` (or ``Accept: text/event-stream``) the turn is streamed as Server-Sent Events. See
docs/deployed-app-api.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from dockyard_api.deps import AppCaller, AppId, ConversationDb, RuntimeDep, Settings
from dockyard_api.public.schemas import ERROR_MEANINGS, ErrorBody

router = APIRouter(tags=["deployed apps"])

MAX_MESSAGE_CHARS = 32_768


class ExecuteMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: StrictStr | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="the end user; a session belongs to the user who started it (ignored for widget tokens, "
        "which name their user)",
    )


class ExecuteBody(BaseModel):
    """The request: message, session_id, metadata.user_id (and ``stream``)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"message": "Hello!", "session_id": "session-1", "metadata": {"user_id": "user-1"}},
                {"message": "What is the weather in Oslo?", "stream": True},
            ]
        },
    )

    message: StrictStr = Field(
        min_length=1, max_length=MAX_MESSAGE_CHARS, description="the user's message (1 to 32,768 characters)"
    )
    session_id: StrictStr | None = Field(
        default=None,
        max_length=128,
        description="the conversation: absent, the server starts one and returns its id; an id that does not "
        "exist yet starts a session with that id",
    )
    metadata: ExecuteMetadata | None = Field(default=None, description="who the end user is")
    stream: StrictBool = Field(
        default=False, description="answer with Server-Sent Events (as does Accept: text/event-stream)"
    )


class Tokens(BaseModel):
    input: int = Field(description="prompt tokens of every model call of the turn")
    output: int = Field(description="generated tokens of every model call of the turn")


class ExecuteAnswer(BaseModel):
    """The answer: the reply, the session, the agent that answered, the tools used, tokens, the stored reply's id."""

    response: str = Field(description="the answer")
    session_id: str = Field(description="the conversation, to send with the next message")
    agent: str = Field(description="the agent that answered")
    tools_used: list[str] = Field(description="the tools called during the turn, each named once")
    tokens: Tokens
    message_id: str = Field(description="id of the stored reply")


EXAMPLE = {
    "response": "It is 12 °C and cloudy in Oslo.",
    "session_id": "session-1",
    "agent": "weather",
    "tools_used": ["weather"],
    "tokens": {"input": 412, "output": 37},
    "message_id": "msg_3f0c5e0b9a7d4d3c8b1e2f6a7c9d0e1f",
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
            "description": "The answer; with streaming, Server-Sent Events ending with a done (or error) event",
            "content": {
                "application/json": {"example": EXAMPLE},
                "text/event-stream": {"schema": {"type": "string"}, "example": SSE_EXAMPLE},
            },
        },
        **{code: {"model": ErrorBody, "description": MEANINGS[code]} for code in (401, 403, 404, 409, 422, 429)},
        **{code: {"model": ErrorBody, "description": MEANINGS[code]} for code in (502, 503, 504)},
    },
)
async def execute(
    app_id: AppId,
    body: ExecuteBody,
    caller: AppCaller,
    request: Request,
    runtime: RuntimeDep,
    store: ConversationDb,
    settings: Settings,
) -> Response:
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
        return Response(orjson.dumps(answer), media_type="application/json")

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
