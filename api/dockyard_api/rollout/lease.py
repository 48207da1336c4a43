"""A coordination.k8s.io Lease that makes ONE facade replica the SLO watcher: the state is in the Kubernetes
API (who holds it, until when), never in a replica's memory, so a replica that dies is replaced by another
within ``duration`` seconds."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from pydantic import TypeAdapter

from dockyard_core.kubeclient import AsyncKube, KubeError

log = logging.getLogger("dockyard.rollout.lease")
_TIME = TypeAdapter(datetime)


def _micro(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class Lease:
    def __init__(self, kube: AsyncKube, namespace: str, name: str, holder: str, duration: float = 15.0) -> None:
        self.kube = kube
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.name = name
        self.holder = holder
        self.duration = duration

    async def hold(self) -> bool:
        """Take or renew the Lease: whether this replica holds it now (False on any conflict or error)."""
        now = datetime.now(UTC)
        spec = {"holderIdentity": self.holder, "leaseDurationSeconds": int(self.duration), "renewTime": _micro(now)}
        try:
            found = await self.kube.get_or_none(f"{self.path}/{self.name}")
            if found is None:
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": self.name},
                        "spec": {**spec, "acquireTime": _micro(now)}}  # fmt: skip
                await self.kube.request("POST", self.path, json=body)
                return True
            held = found.get("spec") or {}
            mine = held.get("holderIdentity") == self.holder
            renewed = held.get("renewTime")
            expired = (
                renewed is None
                or _TIME.validate_python(renewed)
                + timedelta(seconds=float(held.get("leaseDurationSeconds") or self.duration))
                < now
            )
            if not mine and not expired:
                return False
            if not mine:
                spec["acquireTime"] = _micro(now)
                spec["leaseTransitions"] = int(held.get("leaseTransitions") or 0) + 1
            found["spec"] = {**held, **spec}
            await self.kube.request("PUT", f"{self.path}/{self.name}", json=found)  # resourceVersion-guarded
            return True
        except KubeError as exc:
            if exc.status not in (409, 422):
                log.warning("the SLO watcher's Lease %s: %s", self.name, exc)
            return False
        except OSError as exc:
            log.warning("the SLO watcher's Lease %s: %s", self.name, exc)
            return False
