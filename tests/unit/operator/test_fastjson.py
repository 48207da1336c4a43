"""kopf's watch events decoded with orjson (operator/dockyard_operator/handlers/fastjson.py)."""

from __future__ import annotations

import json

from kopf._cogs.clients import api as kopf_api

import dockyard_operator.handlers  # noqa: F401  (installs it, as the operator does)
from dockyard_operator.handlers import fastjson


def test_importing_the_handlers_points_kopfs_client_at_orjson() -> None:
    assert fastjson.installed()
    assert kopf_api.json.loads is fastjson._Json.loads


def test_a_watch_event_line_decodes_to_what_the_standard_library_gives() -> None:
    line = (
        '{"type":"MODIFIED","object":{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"model-x",'
        '"namespace":"default","resourceVersion":"123","labels":{"a":"b"},'
        '"annotations":{"k":"caf\\u00e9 \\ud83d\\ude80"}},'
        '"spec":{"replicas":3,"ratio":0.25,"paused":false,"x":null,"list":[1,"two",{"three":3}]}}}'
    )
    assert kopf_api.json.loads(line) == json.loads(line)
    assert kopf_api.json.loads(line.encode()) == json.loads(line)


def test_what_orjson_refuses_falls_back_to_the_standard_library() -> None:
    big = '{"n": 123456789012345678901234567890, "f": NaN}'
    decoded = kopf_api.json.loads(big)
    assert decoded["n"] == 123456789012345678901234567890
    assert decoded["f"] != decoded["f"]  # NaN


def test_installing_twice_changes_nothing() -> None:
    fastjson.install()
    fastjson.install()
    assert fastjson.installed()
