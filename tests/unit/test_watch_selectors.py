"""The operator's watches of Deployments and Pods carry a label selector (kopf's handler filters are
client-side): it must select exactly what the handlers' ``labels=`` filter accepts."""

from __future__ import annotations

import kopf

from dockyard_operator.handlers.deployments import MANAGED
from dockyard_operator.handlers.lifecycle import WORKLOAD_SELECTOR


def test_the_watch_selector_is_the_handlers_filter() -> None:
    selector = {}
    for term in WORKLOAD_SELECTOR.split(","):
        key, _, value = term.partition("=")
        selector[key] = value or kopf.PRESENT
    assert selector == MANAGED
