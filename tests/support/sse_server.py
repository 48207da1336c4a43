"""A small real HTTP server that speaks Contract 2's deployed-app call (JSON and SSE), for the client's
and the ``dockyard chat`` command's tests while the facade's execute API lives in another branch."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KEY = "dky_abcdefghijkl_s3cr3t-value-for-tests"
PATH = "/e/team/demo-draft/v1/apps/{app}/execute"


@dataclass
class Recorded:
    bodies: list[dict[str, Any]] = field(default_factory=list)
    sessions: dict[str, list[str]] = field(default_factory=dict)


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": None}}


def _answer(body: dict[str, Any], recorded: Recorded) -> dict[str, Any]:
    session = body.get("session_id") or f"s-{uuid.uuid4().hex[:8]}"
    history = recorded.sessions.setdefault(session, [])
    history.append(body["message"])
    return {
        "response": f"echo {body['message']} (turn {len(history)})",
        "session_id": session,
        "agent": "triage",
        "tools_used": ["weather"],
        "tokens": {"input": 12, "output": 7},
        "message_id": uuid.uuid4().hex,
    }


class Handler(BaseHTTPRequestHandler):
    recorded: Recorded

    def log_message(self, *_: Any) -> None:  # quiet
        pass

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            self._json(401, _error("unauthenticated", "the API key is not valid"))
            return
        parts = self.path.split("/")
        if len(parts) != 8 or parts[5] != "apps" or parts[7] != "execute":
            self._json(404, _error("not_found", f"no route {self.path}"))
            return
        app = parts[6]
        body = json.loads(raw)
        self.recorded.bodies.append(body)
        if app == "missing":
            self._json(404, _error("not_found", "app 'missing' is not deployed in this environment"))
            return
        if app == "busy":
            self._json(429, _error("rate_limited", "30 requests per minute"), {"Retry-After": "7"})
            return
        stream = body.get("stream") or "text/event-stream" in (self.headers.get("Accept") or "")
        if not stream:
            self._json(200, _answer(body, self.recorded))
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("X-Accel-Buffering", "no")
        self.end_headers()

        def event(name: str, data: Any) -> None:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

        self.wfile.write(b": ping\n\n")
        event("agent", {"agent": "triage"})
        if app == "broken":
            event("error", _error("upstream_error", "the model endpoint answered 502"))
            return
        event("tool_call", {"id": "c1", "name": "weather", "arguments": {"city": "Oslo"}})
        event("tool_result", {"id": "c1", "name": "weather", "ok": True, "content": "4 C, rain"})
        answer = _answer(body, self.recorded)
        words = answer["response"].split(" ")
        for i, word in enumerate(words):
            event("delta", {"text": word + (" " if i < len(words) - 1 else "")})
        event("done", answer)


@contextmanager
def sse_server() -> Iterator[tuple[str, Recorded]]:
    recorded = Recorded()
    handler = type("BoundHandler", (Handler,), {"recorded": recorded})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", recorded
    finally:
        server.shutdown()
        server.server_close()
