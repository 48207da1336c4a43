"""Chunked upload throughput and memory: a real facade over loopback vs writing the same bytes to disk.

Sizes 512 MiB and 1 GiB (``--sizes``), three runs each (``--runs``), on one disk, side by side:

- direct: the same bytes written straight to new files in a directory of the same file system, by as
  many threads as there are parallel uploads, each chunk flushed (fsync) before the thread takes the
  next, as the facade flushes every chunk before acknowledging it (``DOCKYARD_API_FSYNC_CHUNKS``,
  default true; ``--no-fsync`` turns both off), in two ways: ``plain``, one ``write(2)`` of the chunk
  and its fsync; ``batched``, the facade's own :class:`ChunkWriter` fed 1 MiB batches (each starts its
  writeback at once, so the fsync waits for the last batch only) and its fsync: the facade's disk path
  without HTTP. Neither makes a copy of the bytes first. The facade also fsyncs the chunk's directory
  when it publishes the chunk; the direct writes do not;
- facade: ``python -m dockyard_api`` as its own process (API key, Model and session in a local control
  plane of its own), the file sent as multipart chunks over HTTP/1.1 on loopback (start, every chunk,
  complete); the clients are plain ``http.client`` connections that send each chunk's bytes as they
  are (no body assembled in memory), so the load generator costs the shared cores little.

A run is the direct writes, the facade upload, and the next run's direct writes: a run's ratio is the
facade's throughput over that of the faster way of the direct writes, each the mean of the writes on
either side of the upload (the disk and the machine change between runs); both ratios are printed. A
direct write of a few chunks and a two-chunk upload warm up first.
The figure of a size is the median of its runs; every run is printed with the load average and the CPU
seconds per GiB of the facade (and of its event loop thread, which carries the HTTP path), of the client
and of the direct writes.

Memory: a fresh facade per size; its peak RSS (VmHWM) after the runs of a size must not grow with the
file size. Targets (issue #31): facade / direct >= 0.75 at every size.

    .venv/bin/python -m bench.upload [--sizes 512,1024 --runs 3 --chunk-mib 16 --workers 2] [--facade-only]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from tests.support.publicapi import api_key
from tests.support.runners import free_port, wait_http_ok

from bench.common import api_for, bench_cluster, cpu_seconds, namespace, peak_rss_mib
from dockyard_api.public.imports.chunks import FLUSH_BYTES
from dockyard_core.storefiles import ChunkWriter

MiB = 1024 * 1024
BOUNDARY = "dockyard-bench-7f3a9c"
TARGET = 0.75
PHASES: list[tuple[float, float, float]] = []
"""(seconds of the start call, of the chunks, of the complete call) of every upload, for the printout."""


def loop_cpu_seconds(pid: int) -> float:
    """CPU seconds of the process's main thread (the facade's event loop; the chunk writes run in other
    threads), NaN when unknown."""
    try:
        fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def chunk_parts(block: bytes, number: int) -> list[bytes | memoryview]:
    """Chunk ``number`` of the file as two buffers, without a copy: the chunk number in 8 bytes, then the
    rest of the random block (chunks differ)."""
    return [number.to_bytes(8, "big"), memoryview(block)[8:]]


def write_plain(directory: Path, block: bytes, n: int, fsync: bool) -> None:
    """One ``writev`` of the chunk's bytes to a new file, then its fsync."""
    fd = os.open(directory / str(n), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        views = [memoryview(p) for p in chunk_parts(block, n)]
        while views:
            written = os.writev(fd, views)
            while views and written >= len(views[0]):
                written -= len(views[0])
                views.pop(0)
            if views and written:
                views[0] = views[0][written:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def write_batched(directory: Path, block: bytes, n: int, fsync: bool) -> None:
    """The facade's own way of writing a chunk, without HTTP: its :class:`ChunkWriter`, fed batches of
    ``FLUSH_BYTES`` (each starts its writeback), then ``finish`` (fsync)."""
    writer = ChunkWriter(directory, len(block), fsync=fsync)
    header, rest = chunk_parts(block, n)
    writer.write_all([memoryview(header), rest[: FLUSH_BYTES - len(header)]])
    for start in range(FLUSH_BYTES - len(header), len(rest), FLUSH_BYTES):
        writer.write_all([rest[start : start + FLUSH_BYTES]])
    writer.finish()


DIRECT_WAYS = {"plain": write_plain, "batched": write_batched}


def direct_write(way: str, directory: Path, block: bytes, chunks: int, workers: int,
                 fsync: bool) -> tuple[float, float]:  # fmt: skip
    """Seconds and CPU seconds (of this process) to write the chunks to new files in ``way``."""
    directory.mkdir(parents=True)
    write = DIRECT_WAYS[way]
    cpu = cpu_seconds(os.getpid())
    start = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda n: write(directory, block, n, fsync), range(chunks)))
    elapsed = time.monotonic() - start
    cpu = cpu_seconds(os.getpid()) - cpu
    shutil.rmtree(directory)
    return elapsed, cpu


class Facade:
    def __init__(self, store: Path, kubeconfig: Path, log: Path, fsync: bool) -> None:
        self.port = free_port()
        env = dict(os.environ, KUBECONFIG=str(kubeconfig), DOCKYARD_API_PORT=str(self.port),
                   DOCKYARD_API_MODEL_STORE=str(store), DOCKYARD_API_SWEEP_INTERVAL_SECONDS="0",
                   DOCKYARD_API_FSYNC_CHUNKS=str(fsync).lower())  # fmt: skip
        with log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "dockyard_api"], env=env, stdout=out,
                                         stderr=subprocess.STDOUT)  # fmt: skip
        wait_http_ok(f"http://127.0.0.1:{self.port}/healthz", timeout=60)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def call(conn: http.client.HTTPConnection, method: str, path: str, body: Any,
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
        suffix = f"\r\n--{BOUNDARY}--\r\n".encode()
        parts = [prefix, *chunk_parts(block, n), suffix]  # sent piece by piece (sendall), nothing joined
        headers = {**head, "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
                   "Content-Length": str(sum(len(p) for p in parts))}  # fmt: skip
        call(conn(), "POST", f"{base}/{session}", parts, headers)

    start = time.monotonic()
    started = call(conn(), "POST", f"{base}/start", json.dumps({
        "fileContext": "model", "totalChunks": chunks, "fileExtension": "safetensors",
        "fileName": "bench.safetensors", "fileSize": size}).encode(),
        {**head, "Content-Type": "application/json"})  # fmt: skip
    chunks_from = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda n: send(started["sessionId"], n), range(chunks)))
    complete_from = time.monotonic()
    # a new connection: the one of the start call idled past the server's keep-alive timeout
    job = call(http.client.HTTPConnection("127.0.0.1", port, timeout=120), "POST",
               f"{base}/{started['sessionId']}/complete", None, head)  # fmt: skip
    elapsed = time.monotonic() - start
    PHASES.append((chunks_from - start, complete_from - chunks_from, elapsed - (complete_from - start)))
    assert job["status"] == "IN_PROGRESS", job
    return elapsed


Direct = dict[str, tuple[float, float]]
"""Each way's (seconds, CPU seconds) of one direct write of the file."""


@dataclass
class Run:
    size_mib: int
    direct_before: Direct
    direct_after: Direct
    facade_s: float
    facade_cpu: float
    client_cpu: float
    load: float
    loop_cpu: float
    start_s: float = 0.0
    """Of ``facade_s``, the start call (a Model created in the control plane)."""
    complete_s: float = 0.0
    """Of ``facade_s``, the complete call (the import job started)."""

    def direct_s(self, way: str) -> float:
        return (self.direct_before[way][0] + self.direct_after[way][0]) / 2

    def ratio_to(self, way: str) -> float:
        return self.direct_s(way) / self.facade_s

    @property
    def ratio(self) -> float:
        """Against the faster way of writing the same bytes around this run (the stricter comparison)."""
        return min(self.ratio_to(way) for way in DIRECT_WAYS)

    def line(self, index: int) -> str:
        gib = self.size_mib / 1024
        ways = "; ".join(
            f"direct {way} {self.size_mib / self.direct_before[way][0]:.0f} / "
            f"{self.size_mib / self.direct_after[way][0]:.0f} MiB/s "
            f"({(self.direct_before[way][1] + self.direct_after[way][1]) / 2 / gib:.2f} CPU-s per GiB, "
            f"facade / it {self.ratio_to(way):.2f})"
            for way in DIRECT_WAYS
        )
        return (f"  {self.size_mib} MiB run {index}: facade {self.size_mib / self.facade_s:.0f} MiB/s (start call "
                f"{self.start_s * 1000:.0f} ms, complete call {self.complete_s * 1000:.0f} ms; facade "
                f"{self.facade_cpu / gib:.2f} CPU-s per GiB, its event loop thread {self.loop_cpu / gib:.2f}; "
                f"client {self.client_cpu / gib:.2f}); {ways}; ratio "
                f"{self.ratio:.2f}; load {self.load:.1f}")  # fmt: skip


@dataclass
class Bench:
    store: Path
    work: Path
    kubeconfig: Path
    log: Path
    base: str
    key: str
    block: bytes
    chunk_mib: int
    workers: int
    fsync: bool

    @contextmanager
    def facade(self) -> Iterator[Facade]:
        facade = Facade(self.store, self.kubeconfig, self.log, self.fsync)
        try:
            yield facade
        finally:
            facade.stop()
            shutil.rmtree(self.store / "sessions", ignore_errors=True)

    def direct(self, mib: int) -> Direct:
        """A direct write of ``mib`` in each way (before / after a facade run)."""
        chunks = mib // self.chunk_mib
        return {way: direct_write(way, self.work / "direct", self.block, chunks, self.workers, self.fsync)
                for way in DIRECT_WAYS}  # fmt: skip

    def timed_upload(self, facade: Facade, mib: int) -> tuple[float, float, float, float]:
        """Seconds, facade CPU seconds, client CPU seconds and the facade's event loop thread's CPU seconds of
        one upload of ``mib``."""
        pid = facade.proc.pid
        cpu, client_cpu, loop_cpu = cpu_seconds(pid), cpu_seconds(os.getpid()), loop_cpu_seconds(pid)
        elapsed = upload(facade.port, self.base, self.key, self.block, mib // self.chunk_mib, self.workers)
        cpu, loop_cpu = cpu_seconds(pid) - cpu, loop_cpu_seconds(pid) - loop_cpu
        shutil.rmtree(self.store / "sessions", ignore_errors=True)
        return elapsed, cpu, cpu_seconds(os.getpid()) - client_cpu, loop_cpu

    def size(self, mib: int, runs: int) -> tuple[list[Run], float, float]:
        """The runs of one size on a fresh facade; and its peak RSS at start and after the runs."""
        with self.facade() as facade:
            self.direct(4 * self.chunk_mib)  # warm up both paths
            upload(facade.port, self.base, self.key, self.block, 2, self.workers)
            idle = peak_rss_mib(facade.proc.pid)
            done: list[Run] = []
            direct = self.direct(mib)
            for index in range(1, runs + 1):
                elapsed, cpu, client_cpu, loop_cpu = self.timed_upload(facade, mib)
                after = self.direct(mib)
                load = os.getloadavg()[0]
                start_s, _, complete_s = PHASES[-1]
                done.append(Run(mib, direct, after, elapsed, cpu, client_cpu, load, loop_cpu, start_s, complete_s))
                print(done[-1].line(index), flush=True)
                direct = after
            return done, idle, peak_rss_mib(facade.proc.pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="512,1024", help="file sizes in MiB, comma-separated")
    parser.add_argument("--runs", type=int, default=3, help="runs per size (direct, facade, direct ...)")
    parser.add_argument("--chunk-mib", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2, help="parallel chunk uploads / direct writers")
    parser.add_argument("--no-fsync", action="store_true", help="facade and direct writes without fsync")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the benchmark's control plane running")
    parser.add_argument("--facade-only", action="store_true",
                        help="only the facade's uploads, no direct writes: its CPU-seconds per GiB (to compare "
                        "two versions, run alternately)")  # fmt: skip
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or any(s % args.chunk_mib for s in sizes):
        parser.error("--sizes: MiB, each a multiple of --chunk-mib")

    cluster = bench_cluster("bench-upload", nodes_per_type=0)
    api = api_for(cluster)
    ns = namespace(api, "bench-upload")
    work = cluster.settings.state_dir / "upload"
    shutil.rmtree(work, ignore_errors=True)
    bench = Bench(store=work / "store", work=work, kubeconfig=cluster.settings.kubeconfig,
                  log=cluster.settings.state_dir / "facade-bench.log", base=f"/e/{ns}/bench/api/public/files/session",
                  key=api_key(api, ns, "bench"), block=os.urandom(args.chunk_mib * MiB), chunk_mib=args.chunk_mib,
                  workers=args.workers, fsync=not args.no_fsync)  # fmt: skip
    loads = [os.getloadavg()[0]]
    print(f"inputs: sizes {', '.join(f'{s} MiB' for s in sizes)}, {args.runs} runs each, chunks of {args.chunk_mib} "
          f"MiB, {args.workers} parallel uploads / writers, fsync per chunk: {bench.fsync}, store {bench.store} "
          f"(the direct writes on the same file system), {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)  # fmt: skip
    try:
        if args.facade_only:
            with bench.facade() as facade:
                upload(facade.port, bench.base, bench.key, bench.block, 2, bench.workers)
                for mib in sizes:
                    for _ in range(args.runs):
                        elapsed, cpu, client_cpu, loop_cpu = bench.timed_upload(facade, mib)
                        gib = mib / 1024
                        print(f"facade {mib} MiB: {mib / elapsed:.0f} MiB/s; facade {cpu / gib:.2f} CPU-s per GiB "
                              f"(event loop thread {loop_cpu / gib:.2f}), client {client_cpu / gib:.2f}; load "
                              f"{os.getloadavg()[0]:.1f}")  # fmt: skip
            return
        results: dict[int, tuple[list[Run], float, float]] = {}
        for mib in sizes:
            results[mib] = bench.size(mib, args.runs)
            loads += [r.load for r in results[mib][0]]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        client.CoreV1Api(api).delete_namespace(ns)
        if not args.keep_cluster:
            cluster.down()

    parts, ok = [], True
    for mib, (runs, idle, peak) in results.items():
        median = statistics.median(r.ratio for r in runs)
        ok = ok and median >= TARGET
        by_way = ", ".join(f"{way} {statistics.median(r.ratio_to(way) for r in runs):.2f}" for way in DIRECT_WAYS)
        print(f"{mib} MiB: facade / direct {median:.2f} (median of {', '.join(f'{r.ratio:.2f}' for r in runs)}; "
              f"by way of writing: {by_way}); facade peak RSS {peak:.0f} MiB after the runs (at start "
              f"{idle:.0f} MiB)")  # fmt: skip
        parts.append(f"{mib} MiB {median:.2f} ({'/'.join(f'{r.ratio:.2f}' for r in runs)}; {by_way})")
    growth = [peak - idle for _, idle, peak in results.values()]
    flat = max(growth) - min(growth) <= 16
    print(f"summary (facade / the faster direct write of the same bytes, fsync per chunk {bench.fsync}, median of "
          f"{args.runs} runs; {args.chunk_mib} MiB chunks, {args.workers} workers; load {min(loads):.1f}-"
          f"{max(loads):.1f}): {'; '.join(parts)} (>= {TARGET} at every size: {'met' if ok else 'NOT met'}); memory "
          f"flat (peak RSS over its start: {', '.join(f'{g:.0f}' for g in growth)} MiB): "
          f"{'met' if flat else 'NOT met'}")  # fmt: skip


if __name__ == "__main__":
    main()
