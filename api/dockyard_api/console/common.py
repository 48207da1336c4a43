"""What every console page shares: the signed-in person's request (:class:`Ctx`), rendering, redirects
with a one-time flash message, CSRF-checked forms, and the error page.

Every page acts as the signed-in Kubernetes user exactly like the management API does (TokenReview of
the session's token, then impersonation and SubjectAccessReviews), by calling the same management
services (:attr:`Ctx.services`, a :class:`~dockyard_api.management.services.Management`). A page shows
the services' answers as the API answers them (``View.wire()``: the JSON as dicts, which the templates
and :mod:`.views` read). A refused action is shown in words next to the form that asked for it.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import jinja2
from fastapi import Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from dockyard_api import __version__
from dockyard_api.console import guardrails, views
from dockyard_api.console import session as sess
from dockyard_api.deps import app_state, management_of
from dockyard_api.management.services import Management
from dockyard_core.errors import DockyardError, UnauthenticatedError

PREFIX = "/console"
STATIC = resources.files("dockyard_api.console") / "static"
TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("dockyard_api.console", "templates"),
    autoescape=jinja2.select_autoescape(("html",)),
    trim_blocks=True,
    lstrip_blocks=True,
)
TEMPLATES.globals["version"] = __version__
TEMPLATES.filters["size"] = views.human_size
TEMPLATES.filters["guardrail_rows"] = guardrails.policy_rows


class SignInRequired(Exception):
    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Ctx:
    """One request of a signed-in person."""

    request: Request
    session: sess.Session
    username: str
    namespace: str
    flash: dict[str, Any]
    services: Management
    """The management services acting as this person."""

    @property
    def base(self) -> str:
        return f"{PREFIX}/ns/{self.namespace}"


def sealer(request: Request) -> sess.Sealer:
    return app_state(request).console_sealer


def secure(request: Request) -> bool:
    return sess.over_tls(request.url.scheme, request.headers.get("x-forwarded-proto"))


async def context(request: Request, namespace: str | None = None) -> Ctx:
    """The signed-in person's request (:class:`SignInRequired` without a session that still works)."""
    session = sealer(request).open_session(request.cookies.get(sess.SESSION_COOKIE))
    if session is None:
        raise SignInRequired()
    state = app_state(request)
    try:
        user = await state.authenticator.user(f"Bearer {session.token}")
    except UnauthenticatedError as exc:
        raise SignInRequired(f"Your session ended: {exc.message}. Sign in again.") from exc
    flash = sealer(request).open(request.cookies.get(sess.FLASH_COOKIE), sess.FLASH_SECONDS) or {}
    return Ctx(request, session, user.username, namespace or session.namespace, flash, management_of(state, user))


def render(ctx: Ctx | None, name: str, status_code: int = 200, **values: Any) -> HTMLResponse:
    common: dict[str, Any] = {"ctx": ctx, "csrf": ctx.session.csrf if ctx else "", "flash": {}}
    if ctx is not None:
        common.update(base=ctx.base, namespace=ctx.namespace, username=ctx.username, flash=ctx.flash)
    page = TEMPLATES.get_template(name).render(**common, **values)
    response = HTMLResponse(page, status_code=status_code, headers=page_headers())
    if ctx is not None and ctx.flash:
        response.delete_cookie(sess.FLASH_COOKIE, path=sess.COOKIE_PATH)  # a flash is shown once
    return response


def page_headers() -> dict[str, str]:
    return {
        "Cache-Control": "no-store",
        "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
        "script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",
    }


def redirect(ctx: Ctx, url: str, flash: dict[str, Any] | None = None) -> RedirectResponse:
    response = RedirectResponse(url, status_code=303)
    if flash:
        response.set_cookie(
            sess.FLASH_COOKIE,
            sealer(ctx.request).seal(flash),
            **sess.cookie_options(secure(ctx.request), sess.FLASH_SECONDS),
        )
    return response


def page(handler: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
    """A page handler: an error it does not handle itself is shown in words on an error page."""

    @functools.wraps(handler)
    async def wrapped(*args: Any, **kwargs: Any) -> Response:
        try:
            return await handler(*args, **kwargs)
        except DockyardError as error:
            if isinstance(error, UnauthenticatedError):
                raise SignInRequired(error.message) from error
            request: Request = kwargs["request"]
            try:
                ctx: Ctx | None = await context(request, kwargs.get("namespace"))
            except DockyardError:  # the API server itself is away: the page says so without a session
                ctx = None
            return render(ctx, "error.html", error.status_code, error=error)

    return wrapped


async def form(ctx: Ctx) -> dict[str, Any]:
    """The POSTed form, once its CSRF token matched the session's."""
    sent = await ctx.request.form()
    if not sess.csrf_ok(ctx.session.csrf, str(sent.get("csrf") or "")):
        raise CsrfError()
    return {k: sent.getlist(k) if k in ("agent", "tool") else sent.get(k) for k in sent}


class CsrfError(DockyardError):
    status_code = 403
    code = "csrf"

    def __init__(self) -> None:
        super().__init__(
            "This form expired or was sent from another site (its CSRF token does not match your session). "
            "Reload the page and try again."
        )
