"""Requests and answers of the widget's and the web client's token endpoints
(docs/web-client-and-widget.md, 'Tokens')."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dockyard_api.web.tokens import TokenKind

_CAMEL = ConfigDict(alias_generator=to_camel, validate_by_name=True, serialize_by_alias=True, extra="forbid")


class WidgetTokenRequest(BaseModel):
    model_config = _CAMEL

    app_id: Annotated[str, Field(min_length=1, max_length=253)]
    """The app of the page's snippet (data-app-id); must be the environment's app."""
    previous_token: Annotated[str | None, Field(max_length=4096)] = None
    """The token the widget held before (even expired): renewing it keeps the same anonymous end user."""
    end_user: Annotated[str | None, Field(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")] = None
    """Only with an API key (a site's server): the site's own user id, for identify()."""


class WebTokenRequest(BaseModel):
    model_config = _CAMEL

    previous_token: Annotated[str | None, Field(max_length=4096)] = None
    """The token the page held before (even expired): renewing it keeps the same anonymous end user."""


class IssuedToken(BaseModel):
    """A short-lived token for the deployed-app API (``Authorization: Bearer``), bound to one environment,
    app and end user."""

    model_config = _CAMEL

    token: str
    token_type: Annotated[str, Field(description="always Bearer")] = "Bearer"
    expires_at: Annotated[int, Field(description="when it expires (Unix seconds)")]
    expires_in: Annotated[int, Field(description="its lifetime in seconds")]
    end_user: Annotated[str, Field(description="anon-<random>, user:<the site's id> or k8s:<username>")]
    app_id: str
    kind: TokenKind
    signed_in_as: Annotated[
        str | None, Field(description="web client with signIn: the Kubernetes user (absent otherwise)")
    ] = None
