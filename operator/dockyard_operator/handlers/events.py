"""Posting the Events that the kopf-free parts of the operator return or hand over (reconciles, the
import job, the autoscaler): the one place they become Kubernetes Events through kopf."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

import kopf

from dockyard_operator.workqueue import Event


def post_event(body: Mapping[str, Any], event: Event) -> None:
    """Post one Event about ``body`` (kopf reads apiVersion, kind and metadata of any mapping)."""
    post = kopf.info if event.type == "Normal" else kopf.warn
    post(cast(kopf.Body, body), reason=event.reason, message=event.message)


def post_events(body: Mapping[str, Any], events: Iterable[Event]) -> None:
    for event in events:
        post_event(body, event)
