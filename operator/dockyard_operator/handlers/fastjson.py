"""kopf's watch streams decoded with orjson instead of the standard library's ``json``.

Profiling the operator during a rollout of 200 ModelDeployments (py-spy on the operator process,
docs/benchmarks.md) put a fifth of its CPU time in ``json.loads`` of kopf's watch events
(``kopf._cogs.clients.api.stream``: one call per event line of every watched kind: ModelDeployments,
Deployments, Pods, …). orjson decodes the same text to the same dicts and lists several times faster.

kopf reads the module through its global name ``json``; :func:`install` points that name at
:class:`_Json`, whose ``loads`` is orjson's, falling back to the standard library for what orjson
refuses (integers beyond 64 bits: Kubernetes sends none in the objects Dockyard watches, but a
refused line must never break a watch). kopf is pinned (pyproject.toml), and
``tests/unit/operator/test_fastjson.py`` fails if the name it replaces is gone.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
from kopf._cogs.clients import api as kopf_api


class _Json:
    """The part of the ``json`` module that kopf's client module uses, with orjson's ``loads``."""

    JSONDecodeError = json.JSONDecodeError
    dumps = staticmethod(json.dumps)

    @staticmethod
    def loads(text: str | bytes) -> Any:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            return json.loads(text)


def install() -> None:
    """Make kopf's API client decode with orjson (idempotent)."""
    if not hasattr(kopf_api, "json"):
        raise RuntimeError("kopf._cogs.clients.api no longer reads the json module by that name")
    setattr(kopf_api, "json", _Json)  # noqa: B010 - kopf's module global, replaced on purpose


def installed() -> bool:
    return getattr(kopf_api, "json", None) is _Json
