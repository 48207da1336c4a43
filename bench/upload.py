"""Chunked upload throughput and memory: a real facade over loopback vs writing the bytes to disk.

One run, one disk, side by side:

- direct: the file's chunks written straight to files in a directory of the same file system, by the
  same number of threads, each flushed to disk (fsync) like the facade flushes every chunk before
  acknowledging it (``DOCKYARD_API_FSYNC_CHUNKS``, default true); measured before and after the facade
  run, the ratio uses their mean;
- facade: ``python -m dockyard_api`` as its own process (API key, Model and session in a local control
  plane of its own), the file sent as multipart chunks over HTTP/1.1 on loopback (start, every chunk,
  complete); clients are plain ``http.client`` connections so the client costs little CPU.

Memory: a fresh facade per file size; its peak RSS (VmHWM) after each upload must not grow with the
file size. Target: facade throughput / direct throughput >= 0.7.

    .venv/bin/python -m bench.upload [--size-mib 1024 --chunk-mib 16 --workers 2] [--facade-only]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client
from tests.support.publicapi import api_key
from tests.support.runners import free_port, wait_http_ok

from bench.common import api_for, bench_cluster, namespace, peak_rss_mib

MiB = 1024 * 1024
BOUNDARY = "dockyard-bench-7f3a9c"


def chunk_bytes(block: bytes, number: int) -> bytes:
    """Chunk ``number`` of the file: the random block with the chunk number in front (chunks differ)."""
    return number.to_bytes(8, "big") + block[8:]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def direct_write(directory: Path, block: bytes, chunks: int, workers: int, fsync: bool) -> tuple[float, float]:
    """Seconds and CPU seconds (of this process) to write the chunks to files."""
    directory.mkdir(parents=True)

    def write(n: int) -> None:
        with (directory / str(n)).open("wb", buffering=0) as out:
            out.write(chunk_bytes(block, n))
            if fsync:
                os.fsync(out.fileno())

    cpu = cpu_seconds(os.getpid())
    start = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(write, range(chunks)))
    elapsed = time.monotonic() - start
    cpu = cpu_seconds(os.getpid()) - cpu
    shutil.rmtree(directory)
    return elapsed, cpu


class Facade:
    def __init__(self, store: Path, kubeconfig: Path, log: Path) -> None:
        self.port = free_port()
        env = dict(os.environ, KUBECONFIG=str(kubeconfig), DOCKYARD_API_PORT=str(self.port),
                   DOCKYARD_API_MODEL_STORE=str(store), DOCKYARD_API_SWEEP_INTERVAL_SECONDS="0")  # fmt: skip
        with log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "dockyard_api"], env=env, stdout=out,
                                         stderr=subprocess.STDOUT)  # fmt: skip
        wait_http_ok(f"http://127.0.0.1:{self.port}/healthz", timeout=60)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def call(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None,
         headers: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"{method} {path}: {resp.status} {data[:300]!r}")
    answer: dict[str, Any] = json.loads(data)
    return answer


def upload(port: int, base: str, key: str, block: bytes, chunks: int, workers: int) -> float:
    """start, every chunk (``workers`` connections), complete; returns the seconds it took."""
    size = chunks * len(block)
    head = {"x-api-key": key}
    local = threading.local()

    def conn() -> http.client.HTTPConnection:
        if not hasattr(local, "conn"):
            local.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        c: http.client.HTTPConnection = local.conn
        return c

    def send(session: str, n: int) -> None:
        prefix = (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="chunkNumber"\r\n\r\n{n}\r\n'
                  f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="c"\r\n'
                  "Content-Type: application/octet-stream\r\n\r\n").encode()  # fmt: skip
        body = prefix + chunk_bytes(block, n) + f"\r\n--{BOUNDARY}--\r\n".encode()
        headers = {**head, "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
        call(conn(), "POST", f"{base}/{session}", body, headers)

    start = time.monotonic()
    started = call(conn(), "POST", f"{base}/start", json.dumps({
        "fileContext": "model", "totalChunks": chunks, "fileExtension": "safetensors",
        "fileName": "bench.safetensors", "fileSize": size}).encode(),
        {**head, "Content-Type": "application/json"})  # fmt: skip
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda n: send(started["sessionId"], n), range(chunks)))
    # a new connection: the one of the start call idled past the server's keep-alive timeout
    job = call(http.client.HTTPConnection("127.0.0.1", port, timeout=120), "POST",
               f"{base}/{started['sessionId']}/complete", None, head)  # fmt: skip
    elapsed = time.monotonic() - start
    assert job["status"] == "IN_PROGRESS", job
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024, help="size of the timed file")
    parser.add_argument("--small-mib", type=int, default=256, help="the smaller file of the memory comparison")
    parser.add_argument("--chunk-mib", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="parallel chunk uploads / direct writers")
    parser.add_argument("--no-fsync", action="store_true", help="facade and direct writes without fsync")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the benchmark's control plane running")
    parser.add_argument("--facade-only", action="store_true",
                        help="only the timed upload: no direct writes, no memory comparison (to compare the "
                        "facade's CPU-seconds per GiB of two versions, run alternately)")  # fmt: skip
    args = parser.parse_args()

    cluster = bench_cluster("bench-upload", nodes_per_type=0)
    api = api_for(cluster)
    ns = namespace(api, "bench-upload")
    key = api_key(api, ns, "bench")
    work = cluster.settings.state_dir / "upload"
    shutil.rmtree(work, ignore_errors=True)
    store = work / "store"
    block = os.urandom(args.chunk_mib * MiB)
    chunks = args.size_mib // args.chunk_mib
    small_chunks = args.small_mib // args.chunk_mib
    fsync = not args.no_fsync
    if not fsync:
        os.environ["DOCKYARD_API_FSYNC_CHUNKS"] = "false"
    base = f"/e/{ns}/bench/api/public/files/session"
    log = cluster.settings.state_dir / "facade-bench.log"
    print(f"inputs: file {args.size_mib} MiB in {chunks} chunks of {args.chunk_mib} MiB, {args.workers} parallel "
          f"uploads/writers, fsync per chunk: {fsync}, store {store} (same file system for both), "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip

    if args.facade_only:
        facade = Facade(store, cluster.settings.kubeconfig, log)
        upload(facade.port, base, key, block, 2, args.workers)  # warm: the first calls import and connect
        cpu, client_cpu = cpu_seconds(facade.proc.pid), cpu_seconds(os.getpid())
        elapsed = upload(facade.port, base, key, block, chunks, args.workers)
        cpu, client_cpu = cpu_seconds(facade.proc.pid) - cpu, cpu_seconds(os.getpid()) - client_cpu
        facade.stop()
        gib = chunks * args.chunk_mib / 1024
        print(f"facade: {chunks * args.chunk_mib / elapsed:.0f} MiB/s; facade {cpu / gib:.2f} CPU-s per GiB, "
              f"client {client_cpu / gib:.2f} CPU-s per GiB; load average {os.getloadavg()[0]:.1f}")  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)
        client.CoreV1Api(api).delete_namespace(ns)
        if not args.keep_cluster:
            cluster.down()
        return
    direct_before = direct_write(work / "direct", block, chunks, args.workers, fsync)
    facades = {}
    for label, n in (("small", small_chunks), ("large", chunks)):
        facade = Facade(store, cluster.settings.kubeconfig, log)
        idle = peak_rss_mib(facade.proc.pid)
        cpu, client_cpu = cpu_seconds(facade.proc.pid), cpu_seconds(os.getpid())
        elapsed = upload(facade.port, base, key, block, n, args.workers)
        cpu, client_cpu = cpu_seconds(facade.proc.pid) - cpu, cpu_seconds(os.getpid()) - client_cpu
        facades[label] = (n * args.chunk_mib, elapsed, idle, peak_rss_mib(facade.proc.pid), cpu, client_cpu)
        facade.stop()
        shutil.rmtree(store / "sessions", ignore_errors=True)
    direct_after = direct_write(work / "direct", block, chunks, args.workers, fsync)

    size = chunks * args.chunk_mib
    direct = (direct_before[0] + direct_after[0]) / 2
    direct_cpu = (direct_before[1] + direct_after[1]) / 2
    _, facade_s, _, _, facade_cpu, client_cpu = facades["large"]
    gib = size / 1024
    print(f"direct write: {size / direct_before[0]:.0f} MiB/s before, {size / direct_after[0]:.0f} MiB/s after "
          f"(mean time {direct:.2f} s; {direct_cpu / gib:.2f} CPU-s per GiB)")  # fmt: skip
    print(f"facade:       {size / facade_s:.0f} MiB/s ({facade_s:.2f} s for start + {chunks} chunks + complete; "
          f"facade {facade_cpu / gib:.2f} CPU-s per GiB, client {client_cpu / gib:.2f} CPU-s per GiB)")  # fmt: skip
    ratio = direct / facade_s
    print(f"ratio facade/direct throughput: {ratio:.2f} (target >= 0.75)")
    for label in ("small", "large"):
        mib, _, idle, peak, _, _ = facades[label]
        print(f"facade peak RSS after a {mib} MiB upload: {peak:.0f} MiB (at start {idle:.0f} MiB)")
    print(f"summary ({size} MiB in {args.chunk_mib} MiB chunks, {args.workers} workers): facade / direct disk writes "
          f"{ratio:.2f} (>= 0.75: {'met' if ratio >= 0.75 else 'NOT met'})")  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    client.CoreV1Api(api).delete_namespace(ns)
    if not args.keep_cluster:
        cluster.down()


if __name__ == "__main__":
    main()
