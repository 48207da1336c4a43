"""Debian's Chromium driven by Playwright, and web sites of other origins on loopback, for the browser
tests (tests/browser) and the in-cluster suite's widget check.

Chromium is the distribution's (``/usr/bin/chromium``, installed by ``.ci/run`` and the README's set-up);
Playwright never downloads a browser here. Host pages of "other sites" are served from other loopback
addresses (127.0.0.2, 127.0.0.3), which browsers treat as other origins than the facade's 127.0.0.1.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

CHROMIUM = os.environ.get("DOCKYARD_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextmanager
def chromium() -> Iterator[Browser]:
    """One headless Chromium, closed at the end. Playwright's sync API keeps an event loop running in
    this thread while it lives: later asyncio.run() calls in the same thread need it closed."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Site:
    """A web site on its own loopback origin: ``pages`` maps a path to its HTML."""

    origin: str
    pages: dict[str, str]

    def url(self, path: str = "/") -> str:
        return self.origin + path


@contextmanager
def serve_site(host: str) -> Iterator[Site]:
    site = Site("", {})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            page = site.pages.get(self.path.split("?")[0])
            body = (page or "not found").encode()
            self.send_response(200 if page else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer((host, 0), Handler)
    site.origin = f"http://{host}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
