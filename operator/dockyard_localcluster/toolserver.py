"""A small real HTTP tool for the ``make run`` demo: the current time in a time zone.

``POST /time`` with ``{"timezone": "Europe/Paris"}`` answers ``{"timezone", "time", "utcOffset"}``; an
unknown zone is a 400 with a JSON error. ``GET /time`` (no body) answers for UTC, so the operator's
reachability check and a browser both get an answer. ``/`` answers the same as ``/time``: an image
tool (the test image ``tool``, a ToolDeployment) is called at its Service's base URL.
:data:`PARAMETERS` is the tool's JSON Schema (``Tool.spec.parameters``): the time zones are an enum,
so a grammar-constrained tool call can only name one that exists.

Run: ``python -m dockyard_localcluster toolserver --port 18090`` (``make run`` starts it).
"""

from __future__ import annotations

import json
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

ZONES = ("UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo")
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"timezone": {"type": "string", "enum": list(ZONES), "description": "IANA time zone"}},
    "required": ["timezone"],
    "additionalProperties": False,
}
DESCRIPTION = "The current date and time in a time zone."
ROUTES = ("/", "/time")


def time_in(zone: str) -> dict[str, str]:
    now = datetime.now(ZoneInfo(zone))
    return {"timezone": zone, "time": now.isoformat(timespec="seconds"), "utcOffset": now.strftime("%z")}


class Handler(BaseHTTPRequestHandler):
    server_version = "dockyard-demo-tool/1"

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: str, message: str) -> None:
        self._send(status, {"error": {"code": code, "message": message, "details": None}})

    def do_GET(self) -> None:
        if self.path.split("?")[0] not in ROUTES:
            self._error(404, "not_found", f"no route {self.path}; POST /time")
            return
        self._send(200, time_in("UTC"))

    def do_POST(self) -> None:
        if self.path.split("?")[0] not in ROUTES:
            self._error(404, "not_found", f"no route {self.path}; POST /time")
            return
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._error(400, "invalid_json", "the body is not JSON")
            return
        zone = body.get("timezone", "UTC") if isinstance(body, dict) else None
        if not isinstance(zone, str):
            self._error(400, "invalid", "timezone must be a string")
            return
        try:
            self._send(200, time_in(zone))
        except (ZoneInfoNotFoundError, ValueError):
            self._error(400, "invalid", f"unknown time zone {zone!r}; one of {', '.join(ZONES)}")

    def log_message(self, format: str, *args: Any) -> None:
        return


def serve(port: int, host: str = "127.0.0.1") -> None:
    server = ThreadingHTTPServer((host, port), Handler)
    try:
        server.serve_forever()
    finally:
        server.server_close()
