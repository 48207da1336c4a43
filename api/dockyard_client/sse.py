"""Server-sent events (the streamed deployed-app call): an incremental parser of the event stream.

It follows the WHATWG rules: ``event:`` names the event, ``data:`` lines are joined with newlines,
``id:`` and ``retry:`` are kept, lines starting with ``:`` are comments (the facade's ``: ping``), and a
blank line dispatches the event. Data is decoded as JSON when it is JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ServerSentEvent:
    event: str
    data: Any
    id: str | None = None
    raw: str = field(default="", repr=False)


class SSEParser:
    """Feed it lines (without their line ending); it returns an event when a blank line ends one."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self.comments = 0
        """How many comment lines (``: ping``) were seen."""

    def feed(self, line: str) -> ServerSentEvent | None:
        line = line.rstrip("\r\n")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            self.comments += 1
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None  # retry: and unknown fields are ignored

    def close(self) -> ServerSentEvent | None:
        """The end of the stream; an event without its blank line is discarded, as the standard says."""
        self._event, self._data = "", []
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if not self._data:
            self._event = ""
            return None
        raw = "\n".join(self._data)
        try:
            data: Any = json.loads(raw)
        except ValueError:
            data = raw
        event = ServerSentEvent(self._event or "message", data, self._id, raw)
        self._event, self._data = "", []
        return event
