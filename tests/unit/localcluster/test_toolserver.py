"""The demo/test tool server: the same answer at ``/`` (an image tool's Service base URL) and ``/time``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import httpx
import pytest

from dockyard_localcluster import toolserver


@pytest.fixture
def tool() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), toolserver.Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("path", ["/", "/time"])
def test_post_answers_the_time_in_the_zone_at_both_routes(tool: str, path: str) -> None:
    resp = httpx.post(tool + path, json={"timezone": "Asia/Tokyo"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["timezone"] == "Asia/Tokyo"
    assert body["utcOffset"] == "+0900"


def test_get_answers_utc_and_other_routes_and_bad_zones_are_json_errors(tool: str) -> None:
    assert httpx.get(tool + "/").json()["timezone"] == "UTC"
    missing = httpx.post(tool + "/nope", json={})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    bad = httpx.post(tool + "/", json={"timezone": "Mars/Olympus"})
    assert bad.status_code == 400
    assert "Mars/Olympus" in bad.json()["error"]["message"]
