"""The execute request and answer (docs/deployed-app-api.md, 'Request' and 'Answer')."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

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


class GuardrailAction(BaseModel):
    """What a guardrail policy or the PII protection did to a text of the turn (never the value it acted on)."""

    policy: str = Field(description="the policy's name (spec.guardrails.policies[].name), or pii")
    stage: str = Field(description="input, output, toolArguments or toolResults")
    action: str = Field(description="block, redact or record")
    reason: str = Field(description="which rule matched (denied term #2, EMAIL_ADDRESS x1, guard model: ...)")
    tool: str | None = Field(default=None, description="the tool (toolArguments and toolResults only)")


class Source(BaseModel):
    """A passage a knowledge-base search of the turn returned (docs/knowledge-bases.md): where it is, not its text."""

    knowledgeBase: str = Field(description="the knowledge base (KnowledgeBase spec.name)")
    version: str = Field(description="its version the app version pins")
    document: str = Field(description="the document's name")
    title: str = Field(description="the document's title")
    source: str = Field(description="where the document came from (its file name)")
    chunk: int = Field(description="the chunk's ordinal in the document")
    headingPath: list[str] = Field(description="the headings above the passage")
    page: int | None = Field(description="the PDF page, null for other documents")
    start: int = Field(description="offset of the passage in the document's text")
    end: int = Field(description="end offset")
    score: float = Field(description="the search's score (RRF for hybrid search)")


class ExecuteAnswer(BaseModel):
    """The answer: the reply, the session, the agent that answered, the tools used, tokens, the stored reply's id."""

    response: str = Field(description="the answer")
    session_id: str = Field(description="the conversation, to send with the next message")
    agent: str = Field(description="the agent that answered")
    tools_used: list[str] = Field(description="the tools called during the turn, each named once")
    tokens: Tokens
    message_id: str = Field(description="id of the stored reply")
    guardrails: list[GuardrailAction] = Field(
        default_factory=list,
        description="what the guardrails and the PII protection did, in order (docs/guardrails.md); empty: nothing",
    )
    sources: list[Source] = Field(
        default_factory=list,
        description="the knowledge-base passages the turn's searches returned (docs/knowledge-bases.md); empty: none",
    )
