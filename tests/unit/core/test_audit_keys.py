"""An environment's audit record keeps the keys it listed, even when they were revoked just before the
environment's deletion (the facade revokes them; the operator's deletion handler writes the record last)."""

from __future__ import annotations

import json

from dockyard_core import audit


def test_revoked_keys_stay_in_the_usage_and_current_ones_update_their_entry() -> None:
    recorded = [{"id": "aaa", "name": "ci", "lastUsedAt": None}, {"id": "bbb", "name": "old"}]
    current = [{"id": "aaa", "name": "ci", "lastUsedAt": "2026-11-23T00:00:00+00:00"}, {"id": "ccc", "name": "new"}]
    merged = audit.merged_keys(recorded, current)
    assert [k["id"] for k in merged] == ["aaa", "bbb", "ccc"]
    assert merged[0]["lastUsedAt"] == "2026-11-23T00:00:00+00:00"
    assert audit.merged_keys([], []) == []


def test_recorded_keys_are_read_from_the_usage() -> None:
    data = {"usage.json": json.dumps({"apiKeys": [{"id": "aaa"}, "junk"], "deployments": 2})}
    assert audit.recorded_keys(data) == [{"id": "aaa"}]
    assert audit.recorded_keys(None) == []
    assert audit.recorded_keys({}) == []
    assert audit.recorded_keys({"usage.json": "not json"}) == []
    assert audit.recorded_keys({"usage.json": json.dumps({"apiKeys": "x"})}) == []
