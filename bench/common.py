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
    """User + system CPU time the process has used so far (Linux /proc), NaN when unknown."""
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


def request_counts(api: client.ApiClient) -> Counter[RequestKey]:
    """The API server's request counts now (its /metrics, read with the cluster's admin credentials)."""
    method, url, headers, body, post = api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"])
    response = api.call_api(method, url, headers, body, post)
    response.read()
    return parse_request_counts(response.data.decode())


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
