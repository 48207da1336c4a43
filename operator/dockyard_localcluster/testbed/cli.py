"""``python -m dockyard_localcluster testbed up|down|status``."""

from __future__ import annotations

import json
import sys

from dockyard_localcluster.cluster import ClusterError
from dockyard_localcluster.testbed.bed import TestBed, TestBedError
from dockyard_localcluster.testbed.host import HostError


def main(action: str) -> int:
    bed = TestBed()
    try:
        if action == "up":
            bed.up()
            print(f"export KUBECONFIG={bed.kubeconfig}")
        elif action == "down":
            bed.down()
        else:
            status = bed.status()
            print(json.dumps(status, indent=2))
            return 0 if status["api_ready"] else 1
    except (TestBedError, HostError, ClusterError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
