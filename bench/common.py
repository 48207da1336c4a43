"""Shared pieces of the benchmarks: a dedicated local cluster, the operator as a subprocess, timing."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from tests.support.runners import free_port, wait_http_ok

from dockyard_localcluster.cluster import LocalCluster
from dockyard_localcluster.settings import LocalClusterSettings, repo_root

ROOT = repo_root()


def bench_cluster(name: str, nodes_per_type: int, pools: str = "", pod_ready_delay_ms: int = 0) -> LocalCluster:
    """A local control plane of its own (its own state dir), so benchmarks never touch the dev cluster;
    ``pod_ready_delay_ms``: simulated pods turn Ready that long after they start."""
    settings = LocalClusterSettings(
        cluster_name=name,
        state_dir=ROOT / ".dockyard" / name,
        nodes_per_type=nodes_per_type,
        node_pools=pools,
        wait_seconds=600,
        pod_ready_delay_ms=pod_ready_delay_ms,
    )
    cluster = LocalCluster(settings)
    cluster.up()
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(ROOT / "crds"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(ROOT / "crds"))
    return cluster


def api_for(cluster: LocalCluster) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(cluster.settings.kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = 32
    return client.ApiClient(configuration)


OPERATOR_HEALTH_URLS: dict[int, str] = {}
"""The /healthz, /readyz and /metrics base URL of each operator process :func:`operator_process` started."""


def operator_reconciles(pid: int) -> float:
    """How many reconciles the operator process has run so far, of all kinds and results (its /metrics)."""
    text = httpx.get(f"{OPERATOR_HEALTH_URLS[pid]}/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("dockyard_operator_reconciles_total{"))  # fmt: skip


def operator_reconcile_causes(pid: int, kind: str = "ModelDeployment") -> dict[str, float]:
    """The operator's reconciles of one kind so far, by what queued each (its /metrics:
    dockyard_operator_reconcile_causes_total)."""
    text = httpx.get(f"{OPERATOR_HEALTH_URLS[pid]}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("dockyard_operator_reconcile_causes_total{") and f'kind="{kind}"' in line:
            cause = line.split('cause="', 1)[1].split('"', 1)[0]
            out[cause] = out.get(cause, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


@contextmanager
def operator_process(cluster: LocalCluster, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """The operator as its own process, started and ready (its /readyz answers) when this yields."""
    log = cluster.settings.state_dir / "operator.log"
    port = free_port()
    full_env = dict(os.environ, KUBECONFIG=str(cluster.settings.kubeconfig),
                    DOCKYARD_OPERATOR_HEALTH_PORT=str(port), **(env or {}))  # fmt: skip
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dockyard_operator", "--standalone"], env=full_env,
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/readyz", timeout=120)
        OPERATOR_HEALTH_URLS[proc.pid] = f"http://127.0.0.1:{port}"
        yield proc
    finally:
        OPERATOR_HEALTH_URLS.pop(proc.pid, None)
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far, NaN when unknown: the process's CPU-time clock
    (``clock_getcpuclockid(3)``'s id, read to the nanosecond: the scheduler's own sum of every thread's run
    time), else /proc's figure, which counts in clock ticks (10 ms): a segment of a few hundred turns
    (bench.tracing) would be off by a few per cent."""
    with contextlib.suppress(OSError):
        return time.clock_gettime_ns(((~pid) << 3) | 2) / 1e9  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def control_plane_cpu_by_process(cluster: LocalCluster) -> Counter[str]:
    """CPU seconds used so far by each of the cluster's processes (kube-apiserver, etcd, controller
    manager, scheduler, kwok), by executable name: what a benchmark phase costs the control plane,
    whatever else runs on the box."""
    marker = str(cluster.settings.kwok_workdir)
    total: Counter[str] = Counter()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in command:
            total[Path(command.split("\0", 1)[0]).name] += cpu_seconds(int(entry.name))
    return total


def tree_cpu(root: int) -> float:
    """CPU seconds of a process and its descendants, living and exited: each one's own time, plus the time
    of the children it has reaped (PostgreSQL's postmaster reaps the backends that ended)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
        todo += children.get(pid, [])
    return total


def process_counters(pid: int) -> tuple[float, int, int, float]:
    """A process's CPU seconds (user + system), context switches (voluntary and not: each time it slept
    or was preempted), read + write system calls, and its system (kernel) CPU seconds so far (Linux /proc;
    zeros when it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        io = dict(line.split(": ", 1) for line in Path(f"/proc/{pid}/io").read_text().splitlines())
        stime = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[12])
    except OSError:
        return 0.0, 0, 0, 0.0
    switches = sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches:" in line)
    return cpu_seconds(pid), switches, int(io["syscr"]) + int(io["syscw"]), stime / os.sysconf("SC_CLK_TCK")


def fit_per_second(points: Iterable[tuple[float, float]]) -> tuple[float, float, float]:
    """Least squares of ``cost = a + b / rate`` over (rate, cost) points: a process's CPU per unit of work
    (``a``) and per second of work (``b``, in cost units x rate units), and the largest residual."""
    pts = [(1 / rate, cost) for rate, cost in points if rate > 0]
    mx, my = sum(x for x, _ in pts) / len(pts), sum(y for _, y in pts) / len(pts)
    spread = sum((x - mx) ** 2 for x, _ in pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / spread if spread else 0.0
    a = my - b * mx
    return a, b, max(abs(y - a - b * x) for x, y in pts)


def format_cpu(before: Counter[str], after: Counter[str]) -> str:
    """The CPU seconds each control-plane process used between two readings, largest first."""
    used = {name: after[name] - before.get(name, 0.0) for name in after}
    return ", ".join(f"{name} {seconds:.1f}" for name, seconds in sorted(used.items(), key=lambda kv: -kv[1]))


RequestKey = tuple[str, str]
"""(resource[/subresource], verb) as the API server's ``apiserver_request_total`` labels them."""

WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"})
_REQUEST_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_request_counts(text: str) -> Counter[RequestKey]:
    """The API server's request counts by (resource[/subresource], verb), summed over response codes,
    API groups and scopes, from its Prometheus text exposition (``apiserver_request_total``).

    The API server counts server-side apply as verb ``APPLY``, a JSON/merge patch as ``PATCH``."""
    counts: Counter[RequestKey] = Counter()
    for match in _REQUEST_SAMPLE.finditer(text):
        labels = dict(_LABEL.findall(match["labels"]))
        resource = labels.get("resource") or "(none)"
        if labels.get("subresource"):
            resource = f"{resource}/{labels['subresource']}"
        counts[(resource, labels.get("verb", "?"))] += int(float(match["value"]))
    return counts


def apiserver_metrics(api: client.ApiClient) -> str:
    """The API server's /metrics page, read with the cluster's admin credentials."""
    method, url, headers, body, post = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    response = api.call_api(method, url, headers, body, post)
    response.read()
    return str(response.data.decode())


def request_counts(api: client.ApiClient) -> Counter[RequestKey]:
    """The API server's request counts now (its /metrics)."""
    return parse_request_counts(apiserver_metrics(api))


def metric_sums(text: str, metric: str, labels: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    """The samples of one metric (a counter, or a histogram's ``_sum``/``_count``) summed by ``labels``
    (a missing label reads as "")."""
    sample = re.compile(rf"^{re.escape(metric)}\{{(?P<labels>[^}}]*)\}}\s+(?P<value>\S+)", re.MULTILINE)
    sums: dict[tuple[str, ...], float] = {}
    for match in sample.finditer(text):
        found = dict(_LABEL.findall(match["labels"]))
        key = tuple(found.get(label, "") for label in labels)
        sums[key] = sums.get(key, 0.0) + float(match["value"])
    return sums


@dataclass(frozen=True)
class ApiServerWork:
    """What the API server has done so far, by resource, from its own /metrics: the requests, the
    seconds it spent serving them (``apiserver_request_duration_seconds``, the watches left out: a watch
    lasts as long as its client keeps it), the bytes it answered, and the watch events it sent (each
    event encoded and sent once per watcher: ``apiserver_watch_events_total`` and ``_sizes``)."""

    requests: Counter[RequestKey]
    seconds: dict[RequestKey, float]
    response_bytes: dict[RequestKey, float]
    watch_events: dict[str, float]
    watch_bytes: dict[str, float]

    @classmethod
    def read(cls, api: client.ApiClient) -> ApiServerWork:
        return cls.parse(apiserver_metrics(api))

    @classmethod
    def parse(cls, text: str) -> ApiServerWork:
        def by_request(metric: str) -> dict[RequestKey, float]:
            out: dict[RequestKey, float] = {}
            for (resource, sub, verb), v in metric_sums(text, metric, ("resource", "subresource", "verb")).items():
                if verb not in ("WATCH", "WATCHLIST", "CONNECT") and resource:
                    key = (f"{resource}/{sub}" if sub else resource, verb)
                    out[key] = out.get(key, 0.0) + v
            return out

        def by_resource(metric: str) -> dict[str, float]:
            return {resource: v for (resource,), v in metric_sums(text, metric, ("resource",)).items()}

        return cls(parse_request_counts(text), by_request("apiserver_request_duration_seconds_sum"),
                   by_request("apiserver_response_sizes_sum"), by_resource("apiserver_watch_events_total"),
                   by_resource("apiserver_watch_events_sizes_sum"))  # fmt: skip

    def since(self, before: ApiServerWork) -> ApiServerWork:
        def diff(a: dict[Any, float], b: dict[Any, float]) -> dict[Any, float]:
            return {k: v - b.get(k, 0.0) for k, v in a.items() if v - b.get(k, 0.0) > 0}

        return ApiServerWork(count_diff(self.requests, before.requests), diff(self.seconds, before.seconds),
                             diff(self.response_bytes, before.response_bytes),
                             diff(self.watch_events, before.watch_events),
                             diff(self.watch_bytes, before.watch_bytes))  # fmt: skip

    def by_resource(self) -> dict[str, tuple[int, float, float, float, float]]:
        """resource (subresources folded in) -> (requests, request seconds, response MB, watch events,
        watch event MB)."""
        out: dict[str, list[float]] = {}
        for (res, _), n in self.requests.items():
            out.setdefault(res.split("/")[0], [0.0] * 5)[0] += n
        for i, values in ((1, self.seconds), (2, self.response_bytes)):
            for (res, _), v in values.items():
                out.setdefault(res.split("/")[0], [0.0] * 5)[i] += v / (1e6 if i == 2 else 1)
        for i, by in ((3, self.watch_events), (4, self.watch_bytes)):
            for res, v in by.items():
                out.setdefault(res, [0.0] * 5)[i] += v / (1e6 if i == 4 else 1)
        return {res: (int(v[0]), v[1], v[2], v[3], v[4]) for res, v in out.items()}


def format_work(work: ApiServerWork, skip: Iterable[str] = ()) -> list[str]:
    """One line per resource, most request seconds + watch MB first: what the API server spent on it
    (resources with no request and only a few watch events, the watches' bookmarks, left out)."""
    rows = sorted(
        ((r, v) for r, v in work.by_resource().items() if r not in set(skip) and (v[0] or v[3] > 10)),
        key=lambda rv: -(rv[1][1] + rv[1][4]),
    )
    lines = [
        f"    {'resource':<28} {'requests':>8} {'req. s':>7} {'answer MB':>9} {'watch events':>12} {'event MB':>8}"
    ]
    lines += [f"    {r:<28} {n:>8} {s:>7.2f} {mb:>9.2f} {ev:>12.0f} {emb:>8.2f}" for r, (n, s, mb, ev, emb) in rows]
    total = [sum(v[i] for _, v in rows) for i in range(5)]
    lines.append(
        f"    {'(all)':<28} {int(total[0]):>8} {total[1]:>7.2f} {total[2]:>9.2f} {total[3]:>12.0f} {total[4]:>8.2f}"
    )
    return lines


def count_diff(after: Counter[RequestKey], before: Counter[RequestKey]) -> Counter[RequestKey]:
    """What happened between two readings (the readings' own GETs of /metrics are not counted: no
    resource)."""
    return Counter({k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 0})


def format_counts(counts: Counter[RequestKey], keys: Iterable[RequestKey] | None = None) -> list[str]:
    """``resource verb count`` lines, writes first, then reads; most frequent first."""
    rows = sorted(keys if keys is not None else counts, key=lambda k: (k[1] not in WRITE_VERBS, -counts[k], k))
    return [f"    {resource:<32} {verb:<7} {counts[(resource, verb)]:>7}" for resource, verb in rows]


def load() -> str:
    """The 1-, 5- and 15-minute load averages (the machines are shared: read figures with them)."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def peak_rss_mib(pid: int) -> float:
    """VmHWM: the process's peak resident memory so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def namespace(api: client.ApiClient, prefix: str) -> str:
    """A new namespace ``<prefix>-<time>`` (one of an earlier run may still be terminating).

    Namespaces of an earlier, interrupted run with the same prefix are deleted first: their pods would
    hold the nodes this run needs."""
    core = client.CoreV1Api(api)
    for stale in core.list_namespace().items:
        if stale.metadata.name.startswith(f"{prefix}-"):
            delete_namespace(api, stale.metadata.name)
    name = f"{prefix}-{int(time.time() * 1000) % 10**8}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    return name


def delete_namespace(api: client.ApiClient, name: str, timeout: float = 600) -> None:
    """Delete the namespace and wait until it is gone with everything in it: the garbage collection of
    one phase's objects must not run into the next phase (nor a new run into an interrupted one's)."""
    core = client.CoreV1Api(api)
    with contextlib.suppress(ApiException):
        core.delete_namespace(name)

    def gone() -> bool:
        try:
            core.read_namespace(name)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    wait_until(gone, timeout, f"namespace {name} gone", interval=1.0)


def watch_until_all(
    list_fn: Callable[..., Any],
    *args: Any,
    names: set[str],
    ready: Callable[[dict[str, Any]], bool],
    since: str,
    timeout: float,
    what: str,
) -> None:
    """Follow a watch of the objects ``list_fn(*args)`` lists, from resourceVersion ``since``, until every
    object named in ``names`` is ``ready``.

    A watch costs the API server one serialised event per change, where polling a list of N objects
    costs it (and this process) N objects per poll: the observer of a benchmark must not be a load of
    its own, least of all one that weighs more on one side (custom objects are costlier to list)."""
    state: dict[str, bool] = {}

    def see(obj: dict[str, Any], gone: bool = False) -> bool:
        name = obj["metadata"]["name"]
        if name in names:
            state[name] = not gone and ready(obj)
        return all_ready()

    def all_ready() -> bool:
        return len(state) == len(names) and all(state.values())

    def relist() -> str:  # the watch's history is gone (410): carry on from a fresh list
        listed = json.loads(list_fn(*args, _preload_content=False).data)
        for item in listed["items"]:
            see(item)
        return str(listed["metadata"]["resourceVersion"])

    deadline = time.monotonic() + timeout
    version = since
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            for event in watch.Watch().stream(
                list_fn, *args, resource_version=version, timeout_seconds=max(1, int(remaining)), deserialize=False
            ):
                if event["type"] == "ERROR":
                    raise ApiException(status=event["object"].get("code", 500), reason=event["object"].get("message"))
                version = event["object"]["metadata"]["resourceVersion"]
                if see(event["object"], gone=event["type"] == "DELETED"):
                    return
        except ApiException as exc:
            if exc.status != 410:
                raise
            version = relist()
            if all_ready():
                return
    raise TimeoutError(f"{what}: not reached within {timeout:.0f}s ({sum(state.values())}/{len(names)} ready)")


def wait_until(done: Callable[[], Any], timeout: float, what: str, interval: float = 0.5) -> float:
    """Poll ``done`` until truthy; returns the time waited (monotonic seconds)."""
    start = time.monotonic()
    while not done():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what}: not reached within {timeout:.0f}s")
        time.sleep(interval)
    return time.monotonic() - start
