"""A tiny fake Kubernetes API server on loopback, for fast unit tests of the facade's routers.

It speaks the HTTP the facade's clients speak (paths, JSON bodies, merge patches, list selectors,
TokenReviews and SubjectAccessReviews), keeps objects in a dict, and records every request. It is
not a Kubernetes: no admission, no schema, no garbage collection. The e2e suite runs the real one.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml

from dockyard_core.mergepatch import merge_patch


@dataclass
class FakeKube:
    """The state of the fake: objects by path, known tokens, and what was asked."""

    url: str = ""
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=lambda: {"alice-token": "alice"})
    denied: set[tuple[str, str]] = field(default_factory=set)
    """(username, "<resource>/<subresource>") pairs a SubjectAccessReview refuses."""
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    counter: int = 0

    # -- helpers for tests --
    def put(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` at ``path`` (a collection path + name), filling in uid and resourceVersion."""
        with self.lock:
            return self._store(path, obj)

    def get(self, path: str) -> dict[str, Any] | None:
        return self.objects.get(path)

    def _store(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.counter += 1
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"))
        parts = path.strip("/").split("/")
        if "namespaces" in parts:
            meta.setdefault("namespace", parts[parts.index("namespaces") + 1])
        meta["name"] = parts[-1]
        meta["resourceVersion"] = str(self.counter)
        self.objects[path] = obj
        return obj

    # -- request handling --
    def handle(self, method: str, raw_path: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
        parsed = urlparse(raw_path)
        path, query = parsed.path.rstrip("/"), parse_qs(parsed.query)
        self.requests.append((method, raw_path, body))
        if path.endswith("/tokenreviews"):
            user = self.tokens.get(body["spec"]["token"])
            status = {"authenticated": True, "user": {"username": user, "groups": ["tests"]}} if user else {}
            return 201, {**body, "status": status}
        if path.endswith("/subjectaccessreviews"):
            attrs = body["spec"]["resourceAttributes"]
            what = f"{attrs['resource']}/{attrs.get('subresource', '')}".rstrip("/")
            return 201, {**body, "status": {"allowed": (body["spec"]["user"], what) not in self.denied}}
        with self.lock:
            if method == "GET":
                if path in self.objects:
                    return 200, self.objects[path]
                items = [o for p, o in self.objects.items() if p.rsplit("/", 1)[0] == path]
                if not items and not _is_collection(path):
                    return 404, _status(404, "NotFound", f"{path} not found")
                return 200, {"kind": "List", "items": [o for o in items if _selected(o, query)]}
            if method == "POST":
                name = body["metadata"]["name"]
                target = f"{path}/{name}"
                if target in self.objects:
                    return 409, _status(409, "AlreadyExists", f'"{name}" already exists')
                return 201, self._store(target, json.loads(json.dumps(body)))
            if method == "PATCH" and path.endswith("/status"):  # the status subresource of the object
                path = path.removesuffix("/status")
            if path not in self.objects:
                return 404, _status(404, "NotFound", f"{path} not found")
            if method == "PATCH":
                return 200, self._store(path, merge_patch(self.objects[path], body))
            if method == "DELETE":
                return 200, self.objects.pop(path)
        return 405, _status(405, "MethodNotAllowed", method)


def _is_collection(path: str) -> bool:
    parts = path.strip("/").split("/")
    return "namespaces" in parts and len(parts) - parts.index("namespaces") == 3


def _selected(obj: dict[str, Any], query: dict[str, list[str]]) -> bool:
    for selector in query.get("fieldSelector", []):
        for term in selector.split(","):
            key, _, value = term.partition("=")
            current: Any = obj
            for part in key.split("."):
                current = (current or {}).get(part) if isinstance(current, dict) else None
            if str(current) != value:
                return False
    labels = obj.get("metadata", {}).get("labels") or {}
    for selector in query.get("labelSelector", []):
        for term in selector.split(","):
            key, eq, value = term.partition("=")
            if (eq and labels.get(key) != value) or (not eq and key not in labels):
                return False
    return True


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": message}  # fmt: skip


@contextmanager
def fake_kube(tmp_path: Path) -> Iterator[tuple[FakeKube, str]]:
    """The fake on a free loopback port, and a kubeconfig file naming it."""
    state = FakeKube()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            code, answer = state.handle(self.command, self.path, body, dict(self.headers))
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _serve

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    kubeconfig = tmp_path / "fake-kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": state.url}}],
                "users": [{"name": "facade", "user": {"token": "facade-token"}}],
                "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "facade"}}],
                "current-context": "fake",
            }
        )
    )
    try:
        yield state, str(kubeconfig)
    finally:
        server.shutdown()
        server.server_close()
