"""A real OpenID Connect provider for the tests: ``tests/support/oidc_provider`` (zitadel/oidc's provider
library ``pkg/op`` with its example server's in-memory storage and login form), built with ``go build``
from its pinned Go modules on first use into ``~/.cache/dockyard/oidc-provider-<hash of its sources>/``,
and run on a free loopback port with the clients a test registers.

Its users (the zitadel example's): ``test-user@127.0.0.1`` and ``test-user2``, password ``verysecure``.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin

import httpx

from tests.support.gobuild import cache_home, go_build
from tests.support.runners import free_port

SOURCE = Path(__file__).resolve().parent / "oidc_provider"
USER = "test-user@127.0.0.1"
"""The example user's login name (issuer host 127.0.0.1); its ID token's sub is ``id1``."""
USER_SUB = "id1"
USER_EMAIL = "test-user@zitadel.ch"
"""The example user's verified email (userinfo answers it)."""
PASSWORD = "verysecure"


def provider_binary() -> Path:
    """The provider's binary, built once per version of its sources (``DOCKYARD_OIDC_PROVIDER`` overrides)."""
    given = os.environ.get("DOCKYARD_OIDC_PROVIDER")
    if given:
        return Path(given)
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum", "main.go"):
        digest.update((SOURCE / name).read_bytes())
    target = cache_home() / f"oidc-provider-{digest.hexdigest()[:16]}" / "oidc-provider"
    if not target.exists():
        go_build(SOURCE, ["."], target, what="the OIDC provider of the tests", timeout=1800)
    return target


@dataclass(frozen=True)
class Provider:
    issuer: str
    """What the provider names itself in discovery and ID tokens."""
    url: str
    """Where it listens (http://127.0.0.1:<port>)."""
    log: Path


@contextmanager
def run_provider(
    logs: Path, clients: list[tuple[str, str, list[str]]], *, issuer_host: str = "127.0.0.1"
) -> Iterator[Provider]:
    """The provider with ``clients`` (id, secret ("" for a public client), redirect URIs); ``issuer_host``:
    the host its issuer names (another than 127.0.0.1, where it listens, to see a relying party refuse it)."""
    port = free_port()
    issuer = f"http://{issuer_host}:{port}" if issuer_host != "127.0.0.1" else None
    args = [str(provider_binary()), "-addr", f"127.0.0.1:{port}"]
    for client_id, secret, uris in clients:
        args += ["-client", f"{client_id}:{secret}:{','.join(uris)}"]
    if issuer:
        args += ["-issuer", issuer]
    log = logs / f"oidc-provider-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                if process.poll() is not None:
                    raise AssertionError(f"the OIDC provider exited {process.returncode}: {log.read_text()[-2000:]}")
                try:
                    if httpx.get(f"{url}/.well-known/openid-configuration", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise AssertionError("the OIDC provider did not answer within 30s")
                time.sleep(0.05)
            yield Provider(issuer or url, url, log)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class _Form(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action = ""
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form":
            self.action = a.get("action") or ""
        elif tag == "input" and a.get("name"):
            self.fields[str(a["name"])] = a.get("value") or ""


def sign_in_over_http(
    http: httpx.Client, login_url: str, *, user: str = USER, password: str = PASSWORD
) -> httpx.Response:
    """What a browser does: the facade's login sends it to the provider's form, which is filled in and
    posted; redirects are followed up to the facade's callback, whose answer is returned (not followed)."""
    answer = http.get(login_url)
    while answer.status_code in (301, 302, 303, 307, 308):
        answer = http.get(urljoin(str(answer.url), answer.headers["location"]))
    assert answer.status_code == 200, (answer.status_code, answer.text[:500])
    assert "password" in answer.text, answer.text[:500]
    form = _Form()
    form.feed(answer.text)
    answer = http.post(
        urljoin(str(answer.url), form.action), data={**form.fields, "username": user, "password": password}
    )
    while answer.status_code in (301, 302, 303, 307, 308) and "/oidc/callback" not in str(answer.url):
        answer = http.get(urljoin(str(answer.url), answer.headers["location"]))
    return answer


def handed_token(callback: httpx.Response) -> str:
    """The web token the facade's callback hands to the page in the URL fragment."""
    assert callback.status_code == 303, (callback.status_code, callback.text[:500])
    found = re.search(r"#dockyard-sign-in=([^&]+)$", callback.headers["location"])
    assert found, callback.headers["location"]
    return found.group(1)
