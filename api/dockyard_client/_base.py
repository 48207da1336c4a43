"""What the sync and the async client share: the facade URL split into root, namespace and environment,
the authentication headers of each kind of call, and the decoding of answers (an error answer raises its
:mod:`dockyard_client.errors` exception; an ``error`` event of a stream raises :class:`StreamError`)."""

from __future__ import annotations

from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from dockyard_client import __version__
from dockyard_client._calls import Call, Calls
from dockyard_client.errors import ConfigurationError, StreamError, error_of
from dockyard_client.sse import ServerSentEvent

M = TypeVar("M", bound=BaseModel)
REQUEST_ID_HEADER = "X-Request-Id"


def items_of(model: type[M], body: Any) -> list[M]:
    return [model.model_validate(item) for item in (body or {}).get("items", [])]


def split_url(url: str) -> tuple[str, str | None, str | None]:
    """A facade URL, or an environment's base URL ``<facade>/e/<namespace>/<environment>``, split into the
    facade's root and the namespace and environment it names (None when it names none)."""
    url = url.rstrip("/")
    head, sep, tail = url.rpartition("/e/")
    if sep:
        parts = tail.split("/")
        if len(parts) == 2 and all(parts):
            return head, parts[0], parts[1]
    return url, None, None


class ClientBase:
    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        token: str | None = None,
        namespace: str | None = None,
        environment: str | None = None,
    ) -> None:
        root, ns, env = split_url(url)
        self.url = root
        self.api_key = api_key
        self.token = token
        self.calls = Calls(namespace or ns, environment or env)
        self.last_request_id: str | None = None
        """The facade's request id of the latest answer (``X-Request-Id``): quote it in a bug report."""

    @property
    def namespace(self) -> str | None:
        return self.calls.namespace

    @property
    def environment(self) -> str | None:
        return self.calls.environment

    def _headers(self, call: Call) -> dict[str, str]:
        headers = {"User-Agent": f"dockyard-client/{__version__}", **call.headers}
        if call.auth in ("api-key", "bearer-key"):
            if not self.api_key:
                raise ConfigurationError("an API key of the environment is needed (--api-key or DOCKYARD_API_KEY)")
            if call.auth == "api-key":
                headers["x-api-key"] = self.api_key
            else:
                headers["Authorization"] = f"Bearer {self.api_key}"
        elif call.auth == "kube":
            if not self.token:
                raise ConfigurationError(
                    "the management API needs a Kubernetes bearer token (--token, DOCKYARD_TOKEN, or a kubeconfig "
                    "whose user has a token)"
                )
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _request_args(self, call: Call) -> dict[str, Any]:
        args: dict[str, Any] = {"headers": self._headers(call)}
        for name in ("json", "params", "data", "files"):
            value = getattr(call, name)
            if value is not None:
                args[name] = value
        return args

    def _answer(self, response: httpx.Response) -> Any:
        self.last_request_id = response.headers.get(REQUEST_ID_HEADER)
        if response.status_code >= 400:
            raise error_of(response)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()


def stream_event(event: ServerSentEvent, status: int, headers: httpx.Headers) -> ServerSentEvent:
    if event.event == "error":
        raise StreamError(status, event.data if isinstance(event.data, dict) else {"error": {}}, headers)
    return event
