"""Small real HTTP servers on 127.0.0.1 that tests point Dockyard at (they stop by themselves)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class EngineLoad:
    """The load a fake vLLM engine reports on /metrics; tests change it while the server runs."""

    running: float = 0.0
    waiting: float = 0.0

    def page(self) -> str:
        return (
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="m"}} {self.running}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{model_name="m"}} {self.waiting}\n'
        )


@dataclass
class FakeServer:
    url: str
    load: EngineLoad


@contextmanager
def http_server(load: EngineLoad | None = None) -> Iterator[FakeServer]:
    """Answers /metrics with ``load`` (vLLM's exposition format) and anything else with 200 OK."""
    engine = load or EngineLoad()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = (engine.page() if self.path == "/metrics" else "ok\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield FakeServer(f"http://127.0.0.1:{server.server_address[1]}", engine)
    finally:
        server.shutdown()
        server.server_close()
