"""The order of the facade's routes (dockyard_api/app.py): a request is matched against them in turn, so the
deployed app's execute call, the most frequent, comes first. That is safe only while no other route's path can
be an execute call's, and the execute route's path can be no other route's: checked here on every documented
route and on the web client's and console's paths."""

from __future__ import annotations

import re

from starlette.routing import Match, compile_path

from dockyard_api.app import create_app

EXECUTE = "/e/{namespace}/{environment}/v1/apps/{app_id}/execute"


def sample(template: str) -> str:
    """A concrete path of a route's template: each parameter a plain segment (a path parameter two)."""
    return re.sub(r"\{[^}:]+(:[^}]+)?\}", lambda m: "x/y" if m.group(1) == ":path" else "x", template)


def test_execute_comes_first_and_shares_no_path_with_any_other_route() -> None:
    app = create_app()  # no lifespan: the routes need no cluster
    execute_path = sample(EXECUTE)
    execute_scope = {"type": "http", "method": "POST", "path": execute_path, "root_path": ""}
    routers = [r for r in app.router.routes if hasattr(r, "original_router")]  # FastAPI's docs routes come before
    assert routers[0].matches(execute_scope)[0] == Match.FULL  # the first router is the execute call's
    templates = set(app.openapi()["paths"]) | {
        "/e/{namespace}/{environment}/web", "/e/{namespace}/{environment}/v1/loader.js",
        "/e/{namespace}/{environment}/v1/widget/token", "/console/{path:path}",
    }  # fmt: skip
    assert EXECUTE in templates
    execute_regex = compile_path(EXECUTE)[0]
    for template in templates - {EXECUTE}:
        assert not compile_path(template)[0].match(execute_path), template
        assert not execute_regex.match(sample(template)), template
