"""The real-node test bed for a pytest session, and snapshots of the host's network state.

:func:`running_testbed` reuses a test bed that is up, else brings one up and takes it down again at
the end (unless ``DOCKYARD_KEEP_TESTBED`` is set). Bringing one up needs root.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dockyard_localcluster.testbed import TestBed

SYSCTLS = (
    "net/ipv4/ip_forward",
    "net/ipv6/conf/all/forwarding",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/bridge/bridge-nf-call-arptables",
    "net/netfilter/nf_conntrack_max",
    "vm/overcommit_memory",
    "kernel/panic",
    "kernel/panic_on_oops",
)
"""The host sysctls kubelet, kube-proxy and the CNI plugins touch (or would, outside the namespace)."""

COMMANDS = {
    "iptables": ["iptables-save"],
    "ip6tables": ["ip6tables-save"],
    "route": ["ip", "route", "show", "table", "all"],
    "route6": ["ip", "-6", "route", "show", "table", "all"],
    "rule": ["ip", "rule"],
    "rule6": ["ip", "-6", "rule"],
    "link": ["ip", "-o", "link"],
    "addr": ["ip", "-o", "addr"],
}


def _normalise(key: str, text: str) -> str:
    if key in ("iptables", "ip6tables"):
        # comments carry a timestamp; chain counters move with the host's own traffic
        lines = [re.sub(r"\[\d+:\d+\]", "[-]", line) for line in text.splitlines() if not line.startswith("#")]
        return "\n".join(lines)
    if key == "link":
        return "\n".join(re.sub(r"\s+link/\S+ .*$", "", line) for line in text.splitlines())
    return text.strip()


def host_network_snapshot() -> dict[str, str]:
    """The host namespace's iptables, routes, rules, links and the sysctls above (read only: no packet
    is sent anywhere)."""
    snap = {}
    for key, cmd in COMMANDS.items():
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        snap[key] = _normalise(key, proc.stdout) if proc.returncode == 0 else f"<exit {proc.returncode}>"
    for name in SYSCTLS:
        path = Path("/proc/sys") / name
        snap[f"sysctl {name}"] = path.read_text().strip() if path.exists() else "<absent>"
    return snap


def route_to(address: str) -> str:
    """The host's route lookup for ``address`` (``ip route get``: a lookup, no packet is sent)."""
    out = subprocess.run(["ip", "route", "get", address], capture_output=True, text=True, check=False).stdout
    return out.split(" uid ")[0].strip()


@dataclass
class SessionTestBed:
    bed: TestBed
    started_here: bool


@contextmanager
def running_testbed() -> Iterator[SessionTestBed]:
    bed = TestBed()
    started_here = not bed.is_running()
    try:
        bed.up()
    except BaseException:
        if started_here:
            bed.down()  # nothing half-made stays behind; the logs stay in bed.last_logs
        raise
    try:
        yield SessionTestBed(bed, started_here)
    finally:
        if started_here and not os.environ.get("DOCKYARD_KEEP_TESTBED"):
            bed.down()
