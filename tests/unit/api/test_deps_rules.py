"""The facade's dependency rules (issue #26, 'deps.py complete'): what start-up builds is read through
``dockyard_api.deps`` only, path parameter types are defined once, and no module retypes a DNS-name
pattern that core has."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from fastapi.params import Path as PathParam

from dockyard_api import params
from dockyard_core.resources.v1alpha1.common import (
    DNS_LABEL_MAX_LENGTH,
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_MAX_LENGTH,
    DNS_SUBDOMAIN_PATTERN,
)

API = Path(__file__).resolve().parents[3] / "api" / "dockyard_api"


def _sources() -> dict[str, str]:
    return {p.relative_to(API).as_posix(): p.read_text(encoding="utf-8") for p in sorted(API.rglob("*.py"))}


def test_app_state_is_read_in_deps_only() -> None:
    # request.app.state.x, getattr(request.app.state, ...), scope["app"].state.x: all through deps.AppState
    # (other objects' own .state, e.g. a multipart parser's, are not the application's)
    state = re.compile(r"(\bapp|\])\.state\b")
    found = [
        f"{name}:{number}: {line.strip()}"
        for name, text in _sources().items()
        if name != "deps.py"
        for number, line in enumerate(text.splitlines(), 1)
        if state.search(line)
    ]
    assert found == [], "read the application's state through dockyard_api.deps (a typed dependency):\n" + "\n".join(
        found
    )


# A loose matcher of the /e/{namespace}/{environment}/v1/ prefix, not a name check: the route's own path
# parameters validate the names (a name it lets through is refused there).
NOT_A_NAME_CHECK = {"web/cors.py": ["_V1_PATH"]}


def test_no_dns_name_pattern_is_retyped_outside_core() -> None:
    retyped = []
    for name, text in _sources().items():
        allowed = NOT_A_NAME_CHECK.get(name, [])
        tree = ast.parse(text)
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in allowed for t in node.targets):
                skip.update(id(inner) for inner in ast.walk(node))
        for node in ast.walk(tree):
            if id(node) in skip or not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if "[-a-z0-9" in node.value or "[a-z0-9]([" in node.value:
                retyped.append(f"{name}:{node.lineno}: {node.value!r}")
    assert retyped == [], "use dockyard_core's DNS_LABEL_PATTERN / DNS_SUBDOMAIN_PATTERN:\n" + "\n".join(retyped)


def test_path_parameter_types_are_defined_in_params_only() -> None:
    # a path parameter type is an Annotated[..., Path(...)] alias at module level, or one written inline in a
    # route's signature: only params.py has them
    defined = []
    for name, text in _sources().items():
        if name == "params.py":
            continue
        tree = ast.parse(text)
        for node in tree.body:
            source = ast.unparse(node)
            if isinstance(node, ast.Assign | ast.AnnAssign) and "Annotated[" in source and "Path(" in source:
                defined.append(f"{name}:{node.lineno}: {source[:80]}")
        for arg in ast.walk(tree):
            if isinstance(arg, ast.arg) and arg.annotation is not None and "Path(" in ast.unparse(arg.annotation):
                defined.append(f"{name}:{arg.lineno}: {arg.arg}: {ast.unparse(arg.annotation)[:80]}")
    assert defined == [], "define path parameter types in dockyard_api/params.py:\n" + "\n".join(defined)


def _path(alias: object) -> PathParam:
    found = [m for m in getattr(alias, "__metadata__", ()) if isinstance(m, PathParam)]
    assert len(found) == 1
    return found[0]


def _constraint(info: PathParam, attribute: str) -> object:
    for m in info.metadata:
        if hasattr(m, attribute):
            return getattr(m, attribute)
    return None


def test_name_parameters_use_cores_patterns_and_limits() -> None:
    labels = (params.NamespaceParam, params.AppName)
    subdomains = (params.EnvName, params.AppId, params.ModelId, params.ToolId)
    for alias in labels:
        info = _path(alias)
        assert (_constraint(info, "pattern"), _constraint(info, "max_length")) == (
            DNS_LABEL_PATTERN,
            DNS_LABEL_MAX_LENGTH,
        )
    for alias in subdomains:
        info = _path(alias)
        assert (_constraint(info, "pattern"), _constraint(info, "max_length")) == (
            DNS_SUBDOMAIN_PATTERN,
            DNS_SUBDOMAIN_MAX_LENGTH,
        )
