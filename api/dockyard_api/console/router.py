"""The console's pages and actions under ``/console/``: server-rendered (Jinja2), a little JavaScript.

The pages are by area — :mod:`.signin` (sign-in, sign-out, namespace switch, static files), :mod:`.apps`
(Apps, the draft, versions), :mod:`.environments` (environments and their API keys), :mod:`.models`
(Models and tools) — on what :mod:`.common` shares (the signed-in person's request, rendering, forms,
the error page). They call the management services as the signed-in person, never a router.
"""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import RedirectResponse

from dockyard_api.console import apps, canary, environments, evaluations, knowledge, models, signin, tooltests
from dockyard_api.console import session as sess
from dockyard_api.console.common import PREFIX, SignInRequired

router = APIRouter(prefix=PREFIX, include_in_schema=False)
for area in (signin, apps, environments, evaluations, canary, models, knowledge, tooltests):
    router.include_router(area.routes)


def install(app: FastAPI) -> None:
    """Mount the console on the facade (``/console/``)."""

    async def signin_required(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SignInRequired)
        target = f"{PREFIX}/signin" + (f"?reason={quote(exc.reason)}" if exc.reason else "")
        response = RedirectResponse(target, status_code=303)
        response.delete_cookie(sess.SESSION_COOKIE, path=sess.COOKIE_PATH)
        return response

    app.add_exception_handler(SignInRequired, signin_required)
    app.include_router(router)


def sealer_for(token_key: bytes) -> sess.Sealer:
    return sess.Sealer(token_key)
