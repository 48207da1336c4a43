"""The test bed's footprint on the machine: its network namespace, the holder process that owns the
daemons' private mount namespace, its cgroups, and daemons recorded by PID.

Everything created here is found again by name or recorded PID and removed by :func:`teardown`; the
host's own network namespace is never given an address, a route, an iptables rule or a sysctl.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from dockyard_localcluster.testbed.config import (
    CGROUP_CONTROLLERS,
    NODE_IP,
    SYSCTL_OVERRIDES,
    VETH,
    VETH_PEER,
    Layout,
)

CGROUP_FS = Path("/sys/fs/cgroup")
RUN_CONTAINERD = Path("/run/containerd")
RUN_NETNS = Path("/run/netns")


class HostError(RuntimeError):
    """A namespace, cgroup or process of the test bed could not be set up."""


def _run(args: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise HostError(f"{' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


# -- processes -------------------------------------------------------------------------------------
def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks (field 22 of /proc/<pid>/stat); None if it is gone or
    a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def record(layout: Layout, name: str, pid: int) -> None:
    layout.pids.mkdir(parents=True, exist_ok=True)
    (layout.pids / f"{name}.json").write_text(json.dumps({"pid": pid, "start": _start_time(pid)}))


def recorded_pid(layout: Layout, name: str) -> int | None:
    """The PID recorded for ``name`` if that very process (same start time) still runs."""
    try:
        data = json.loads((layout.pids / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    pid = int(data["pid"])
    _reap(pid)
    start = _start_time(pid)
    return pid if start is not None and start == data.get("start") else None


def recorded_names(layout: Layout) -> list[str]:
    return sorted(p.stem for p in layout.pids.glob("*.json")) if layout.pids.is_dir() else []


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if _start_time(pid) is None:
            return True
        time.sleep(0.1)
    return False


def stop(layout: Layout, name: str, timeout: float = 10.0) -> None:
    """SIGTERM the recorded process, SIGKILL it after ``timeout``, forget it."""
    pid = recorded_pid(layout, name)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not _wait_gone(pid, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 5.0)
    (layout.pids / f"{name}.json").unlink(missing_ok=True)


def spawn(layout: Layout, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Start ``argv`` detached (own session, output to logs/<name>.log) and record its PID."""
    layout.logs.mkdir(parents=True, exist_ok=True)
    with (layout.logs / f"{name}.log").open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    record(layout, name, proc.pid)
    return proc.pid


def in_daemon_namespaces(holder: int, argv: Sequence[str]) -> list[str]:
    """``argv`` run in the holder's network and mount namespaces (nsenter execs: the PID is argv's)."""
    return ["nsenter", f"--target={holder}", "--mount", "--net", "--", *argv]


def in_netns(layout: Layout, argv: Sequence[str]) -> list[str]:
    """``argv`` run in the test bed's network namespace only (clients: kubectl, helm, curl)."""
    return ["nsenter", f"--net={layout.netns_path}", "--", *argv]


# -- network namespace -----------------------------------------------------------------------------
def netns_exists(layout: Layout) -> bool:
    return layout.netns_path.exists()


def netns_inode(layout: Layout) -> int | None:
    try:
        return layout.netns_path.stat().st_ino
    except OSError:
        return None


def create_netns(layout: Layout) -> None:
    """The namespace, its loopback and a veth pair whose peer has no address: the default route points
    into it, so a packet for an unknown address goes nowhere (the kernel here has no dummy links)."""
    if netns_exists(layout):
        return
    ns = layout.netns
    if not RUN_NETNS.exists():  # `ip netns add` makes it a mount point; teardown undoes that
        layout.work.mkdir(parents=True, exist_ok=True)
        (layout.work / "created-run-netns").touch()
    _run(["ip", "netns", "add", ns])
    try:
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(["ip", "-n", ns, "link", "add", VETH, "type", "veth", "peer", "name", VETH_PEER])
        _run(["ip", "-n", ns, "addr", "add", f"{NODE_IP}/32", "dev", VETH])
        _run(["ip", "-n", ns, "link", "set", VETH, "up"])
        _run(["ip", "-n", ns, "link", "set", VETH_PEER, "up"])
        _run(["ip", "-n", ns, "route", "add", "default", "dev", VETH])
    except HostError:
        _run(["ip", "netns", "del", ns], check=False)
        raise


def delete_netns(layout: Layout) -> None:
    """``ip netns del``; and /run/netns itself when the test bed made it and it is empty again."""
    if netns_exists(layout):
        _run(["ip", "netns", "del", layout.netns])
    marker = layout.work / "created-run-netns"
    if marker.exists() and RUN_NETNS.is_dir() and not any(RUN_NETNS.iterdir()):
        _run(["umount", str(RUN_NETNS)], check=False)
        with contextlib.suppress(OSError):
            RUN_NETNS.rmdir()
    marker.unlink(missing_ok=True)


def processes_in_netns(layout: Layout) -> list[int]:
    """Every process whose network namespace is the test bed's (shims and daemons alike)."""
    inode = netns_inode(layout)
    if inode is None:
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if os.stat(entry / "ns" / "net").st_ino == inode:
                    found.append(int(entry.name))
    return found


# -- the holder: the daemons' private mount namespace ---------------------------------------------
def holder_script(layout: Layout) -> str:
    """The shell the holder runs in a private mount namespace before it sleeps: the sysctl files
    kubelet rewrites are bind-mounted over (it sees its values; the host keeps its own), and
    /run/containerd (shim sockets, runc state) is a tmpfs that dies with the namespace."""
    lines = ["set -e"]
    for key in SYSCTL_OVERRIDES:
        lines.append(f"mount --bind {layout.work / 'sysctl' / key.replace('/', '.')} /proc/sys/{key}")
    lines.append(f"mount -t tmpfs -o mode=0711 dockyard-testbed {RUN_CONTAINERD}")
    lines.append("exec sleep infinity")
    return "\n".join(lines)


def start_holder(layout: Layout) -> int:
    """The holder process (recorded as ``holder``): in the netns, owner of the private mount ns."""
    pid = recorded_pid(layout, "holder")
    if pid is not None:
        return pid
    sysctl_dir = layout.work / "sysctl"
    sysctl_dir.mkdir(parents=True, exist_ok=True)
    for key, value in SYSCTL_OVERRIDES.items():
        (sysctl_dir / key.replace("/", ".")).write_text(value + "\n")
    if not RUN_CONTAINERD.exists():
        RUN_CONTAINERD.mkdir(mode=0o711)
        (layout.work / "created-run-containerd").touch()
    argv = [
        "nsenter",
        f"--net={layout.netns_path}",
        "--",
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        holder_script(layout),
    ]
    pid = spawn(layout, "holder", argv)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "sleep":
                record(layout, "holder", pid)  # start time of the same PID (exec keeps it)
                return pid
        if _start_time(pid) is None:
            break
        time.sleep(0.05)
    stop(layout, "holder")
    raise HostError(f"the namespace holder did not start; see {layout.logs / 'holder.log'}")


# -- cgroups ---------------------------------------------------------------------------------------
def cgroup_dirs(layout: Layout) -> list[Path]:
    return [CGROUP_FS / c / layout.cgroup_root for c in CGROUP_CONTROLLERS if (CGROUP_FS / c).is_dir()]


def create_cgroups(layout: Layout) -> None:
    """The kubelet's cgroupRoot in every v1 hierarchy (cpuset needs its cpus and mems first)."""
    for path in cgroup_dirs(layout):
        path.mkdir(exist_ok=True)
        if path.parent.name == "cpuset":
            for f in ("cpuset.cpus", "cpuset.mems"):
                if not (path / f).read_text().strip():
                    (path / f).write_text((path.parent / f).read_text())


def _walk_depth_first(root: Path) -> Iterator[Path]:
    for child in sorted(p for p in root.iterdir() if p.is_dir()):
        yield from _walk_depth_first(child)
    yield root


def cgroup_pids(layout: Layout) -> set[int]:
    pids: set[int] = set()
    for root in cgroup_dirs(layout):
        if root.is_dir():
            for group in _walk_depth_first(root):
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in (group / "cgroup.procs").read_text().split())
    return pids


def remove_cgroups(layout: Layout) -> list[str]:
    """rmdir the cgroup trees depth-first; returns the ones that stayed (still busy)."""
    left = []
    for root in cgroup_dirs(layout):
        if not root.is_dir():
            continue
        for group in _walk_depth_first(root):
            for _ in range(20):
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                left.append(str(group))
    return left


def kill_all(pids: set[int] | list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        _wait_gone(pid, 5.0)


def teardown(layout: Layout) -> list[str]:
    """Everything of the test bed on the machine, gone: recorded processes (callers stop the daemons
    in order first), leftovers in its netns and cgroups, the holder and with it the private mount ns,
    the cgroups, the netns, /run/containerd if the test bed made it. Returns what could not be removed."""
    for name in recorded_names(layout):
        if name != "holder":
            stop(layout, name, timeout=5.0)
    kill_all(cgroup_pids(layout))
    kill_all([p for p in processes_in_netns(layout) if p != recorded_pid(layout, "holder")])
    stop(layout, "holder", timeout=2.0)
    kill_all(processes_in_netns(layout))
    problems = remove_cgroups(layout)
    delete_netns(layout)
    marker = layout.work / "created-run-containerd"
    if marker.exists():
        with contextlib.suppress(OSError):
            RUN_CONTAINERD.rmdir()
        if RUN_CONTAINERD.exists():
            problems.append(f"{RUN_CONTAINERD} is not empty")
        else:
            marker.unlink()
    return problems
