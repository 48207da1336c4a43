"""The audit record an Environment leaves behind: a ConfigMap with its history (the audit log) and
usage statistics, kept current by the operator while the environment lives and never owned by it,
plus a deletion stamp (who and when) written by whoever saw the deletion (facade or operator)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from dockyard_core.resources.v1alpha1 import APP_LABEL, AUDIT_LABEL, ENVIRONMENT_LABEL

DELETION_MANAGER = "dockyard-deletion"
"""Field manager of the deletion stamp (apart from the operator's, so neither overwrites the other)."""


def audit_record_name(env_meta: Mapping[str, Any]) -> str:
    return f"{env_meta['name']}-audit-{env_meta['uid'][:8]}"


def audit_record(env: Mapping[str, Any], keys: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The ConfigMap that outlives an environment: its history (audit log) and usage statistics,
    kept current while it lives; never owned by it."""
    meta, spec, st = env["metadata"], env.get("spec") or {}, env.get("status") or {}
    usage = {
        "apiKeys": list(keys),
        "deployments": len(st.get("history") or []),
        "createdAt": meta.get("creationTimestamp"),
    }
    record = _audit_stub(meta, spec.get("appRef", ""))
    record["data"] = {
        "environment.json": json.dumps({"name": meta["name"], "spec": spec}, indent=2, default=str),
        "history.json": json.dumps(st.get("history") or [], indent=2, default=str),
        "usage.json": json.dumps(usage, indent=2, default=str),
    }
    return record


def merged_keys(recorded: Iterable[Mapping[str, Any]], current: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The keys an audit record lists: those it already lists (a key revoked just before the environment's
    deletion is still part of its usage) and the current ones, which update an entry of the same id."""
    merged: dict[str, dict[str, Any]] = {str(k.get("id")): dict(k) for k in recorded}
    merged.update({str(k.get("id")): dict(k) for k in current})
    return list(merged.values())


def recorded_keys(config_map_data: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """The keys an existing audit record lists in its usage (none when it has no readable usage)."""
    try:
        usage = json.loads((config_map_data or {}).get("usage.json") or "{}")
    except ValueError:
        return []
    keys = usage.get("apiKeys") if isinstance(usage, dict) else None
    return [k for k in keys if isinstance(k, dict)] if isinstance(keys, list) else []


def deletion_record(
    env_meta: Mapping[str, Any], app: str, deleted_at: datetime, deleted_by: str | None
) -> dict[str, Any]:
    """The deletion stamp of the audit record (its own key, written by its own field manager, so the
    record's other keys and this one never overwrite each other)."""
    record = _audit_stub(env_meta, app)
    stamp = {"deletedAt": deleted_at.isoformat(), "deletedBy": deleted_by}
    record["data"] = {"deletion.json": json.dumps(stamp, indent=2)}
    return record


def _audit_stub(meta: Mapping[str, Any], app: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": audit_record_name(meta),
            "namespace": meta["namespace"],
            "labels": {
                AUDIT_LABEL: "true",
                ENVIRONMENT_LABEL: meta["name"],
                APP_LABEL: app,
                "app.kubernetes.io/managed-by": "dockyard",
            },
        },
    }
