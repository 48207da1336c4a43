"""The web client page and the widget's loader script, held in memory with their ETag and gzip form."""

from __future__ import annotations

import gzip
import hashlib
import html
from importlib import resources

from fastapi import Request
from fastapi.responses import Response

from dockyard_api import __version__
from dockyard_api.web.service import BrowserConfig

STATIC = resources.files("dockyard_api.web") / "static"
LOADER_MAX_AGE = 300
"""Seconds a browser or CDN may reuse loader.js without asking (then it revalidates with its ETag)."""


class Asset:
    """A static text asset held in memory with its ETag and gzip form."""

    def __init__(self, name: str, media_type: str) -> None:
        text = (STATIC / name).read_text(encoding="utf-8").replace("__DOCKYARD_VERSION__", __version__)
        self.body = text.encode()
        self.gzipped = gzip.compress(self.body, compresslevel=9, mtime=0)
        self.etag = '"' + hashlib.sha256(self.body).hexdigest()[:20] + '"'
        self.media_type = media_type

    def response(self, request: Request, headers: dict[str, str]) -> Response:
        headers = {**headers, "ETag": self.etag, "Vary": "Accept-Encoding"}
        if self.etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
            return Response(status_code=304, headers=headers)
        if "gzip" in request.headers.get("accept-encoding", ""):
            return Response(self.gzipped, media_type=self.media_type, headers={**headers, "Content-Encoding": "gzip"})
        return Response(self.body, media_type=self.media_type, headers=headers)


LOADER = Asset("loader.js", "text/javascript; charset=utf-8")
PAGE = (STATIC / "page.html").read_text(encoding="utf-8")


def page_html(config: BrowserConfig) -> str:
    """The web client page of an environment: its app's name and title, and the versioned loader script."""
    esc = html.escape
    return (
        PAGE.replace("{{title}}", esc(f"{config.app} · {config.display_name}"))
        .replace("{{app}}", esc(config.app))
        .replace("{{loader}}", f"../v1/loader.js?v={LOADER.etag.strip(chr(34))}")
    )
