"""Knowledge bases: the facade's and the operator's memory while 10,000 chunks are imported and indexed on
the real path (issue #29: "facade/operator memory flat while indexing 10,000 chunks").

On a local control plane of its own (``bench-kb-memory``), with the operator and the facade as processes
sharing one model store and the embedded SQLite index (``make run``'s setup; indexing runs as host
processes, ``knowledge_runs: local``): an App, its draft environment and an API key; a KnowledgeBase
version created through the public API (keywords only: no embedding model, whose engine is measured apart
by ``bench.knowledge``; chunking maxChars 800, overlap 100, by heading); then the corpus of
``bench.knowledge`` (``--documents`` 1,000, ``--seed`` 29: a quarter each Markdown, HTML, text and PDF,
10,181 chunks) sent document by document through the PUBLIC chunked import (``fileContext: document``,
start, one chunk, complete) and attached (``POST .../documents``), while the operator's indexing runs
follow the growing ``spec.documents`` (incremental runs, one at a time); the run ends when the status shows
every document indexed and at least 10,000 chunks.

Printed: VmRSS and VmHWM (``/proc/<pid>/status``) of the facade and the operator at three points: at start
(cold), after a warm-up of ``--warmup`` documents imported and indexed (the parsers and the import path
loaded once), and at the end; every indexing run's own peak (the run prints its ``ru_maxrss``) and the
highest VmHWM seen by sampling the operator's children every 0.2 s. The verdict compares the end with the
warm-up point: flat means each process grew by less than ``--flat-mib`` (20 MiB). Why 20: the 10,181 chunks
hold 5.4 MB of documents (about 8 MB of chunk text with overlaps); a process that kept the chunks or the
documents would grow by that at least, two to four times with Python's objects, so 20 MiB separates
"holds the corpus" from allocator and cache noise (the KnowledgeBase object itself, with 1,000 documents in
its spec and status, is about 0.2 MB of JSON, and the operator and the facade each receive it at every change).

    .venv/bin/python -m bench.knowledge_memory [--documents 1000 --warmup 20 --seed 29 --flat-mib 20]
"""

from __future__ import annotations

import argparse
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client
from tests.support.publicapi import ImportClient

from bench.common import api_for, bench_cluster, load, namespace, operator_process, wait_until
from bench.execute import database_url, facade_process, setup
from bench.knowledge import Document, generate

GROUP, VERSION = "dockyard.dev", "v1alpha1"
KB = {
    "name": "fleet",
    "version": "1.0.0",
    "description": "the fleet's vessels",
    "retrieval": {"mode": "keyword"},
    "chunking": {"maxChars": 800, "overlapChars": 100, "splitBy": "heading"},
}


def memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process, MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


class ChildPeaks(threading.Thread):
    """Samples the VmHWM of the operator's child processes (the indexing runs) every 0.2 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.seen, self.stop = pid, 0.0, set[int](), threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            for child in children(self.pid):
                try:
                    self.peak = max(self.peak, memory(child)[1])
                    self.seen.add(child)
                except (OSError, KeyError):
                    continue


class Importer:
    def __init__(self, url: str, ns: str, key: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=60)
        self.imports = ImportClient(self.http, ns, "bot-draft", key)
        self.kb = f"{self.imports.root}/knowledge-bases"

    def create(self) -> None:
        answer = self.http.post(self.kb, json=KB, headers=self.imports.headers)
        assert answer.status_code == 200, answer.text

    def add(self, doc: Document) -> None:
        """One document through the chunked import (one chunk), then attached to the knowledge base."""
        started = self.imports.start(fileContext="document", fileName=doc.filename,
                                     fileExtension=doc.filename.rsplit(".", 1)[1], fileSize=len(doc.data),
                                     totalChunks=1)  # fmt: skip
        assert started.status_code == 200, started.text
        session = started.json()["sessionId"]
        sent = self.imports.chunk(session, 0, doc.data)
        assert sent.status_code == 200, sent.text
        done = self.imports.complete(session)
        assert done.status_code == 200, done.text
        assert done.json()["status"] == "SUCCESS", done.text
        attached = self.http.post(f"{self.kb}/{KB['name']}/{KB['version']}/documents",
                                  json={"fileId": done.json()["modelId"], "name": doc.filename},
                                  headers=self.imports.headers)  # fmt: skip
        assert attached.status_code == 200, attached.text


def indexed(api: client.ApiClient, ns: str, documents: int) -> dict[str, Any] | None:
    kb = client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, ns, "knowledgebases", "fleet-1.0.0")
    status = kb.get("status") or {}
    if status.get("phase") == "Failed":
        raise AssertionError(f"the indexing run failed: {status.get('message')}")
    done = status.get("phase") == "Ready" and len(status.get("indexed") or []) == documents
    return status if done and status.get("indexedSpec") == f"{kb['metadata']['generation']}/" else None


def run_peaks(logs: Path) -> list[float]:
    return [float(m) for f in logs.glob("*.log") for m in re.findall(r"peak RSS ([\d.]+) MiB", f.read_text())]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--sections", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--flat-mib", type=float, default=20.0)
    parser.add_argument("--keep", action="store_true", help="leave the benchmark's control plane running")
    args = parser.parse_args()
    docs = generate(args.seed, args.documents, args.sections)
    print(f"inputs: {len(docs)} documents of {args.sections} sections ({sum(len(d.data) for d in docs) / 1e6:.2f} "
          f"MB, seed {args.seed}), warm-up {args.warmup}, knowledge base {KB}, flat: < {args.flat_mib:g} MiB, "
          f"loadavg {load()}")  # fmt: skip
    cluster = bench_cluster("bench-kb-memory", nodes_per_type=1)
    state = cluster.settings.state_dir
    shutil.rmtree(state / "model-store" / "knowledge", ignore_errors=True)
    shutil.rmtree(state / "indexing", ignore_errors=True)
    api = api_for(cluster)
    ns = namespace(api, "bench-kb")
    operator_env = {"DOCKYARD_OPERATOR_MODEL_STORE": str(state / "model-store"),
                    "DOCKYARD_OPERATOR_KNOWLEDGE_RUNS": "local", "DOCKYARD_OPERATOR_KNOWLEDGE_INTERVAL_SECONDS": "1",
                    "DOCKYARD_OPERATOR_ENVIRONMENT_INTERVAL_SECONDS": "1"}  # fmt: skip
    try:
        with (
            database_url("sqlite", cluster) as database,
            operator_process(cluster, operator_env) as operator,
            facade_process(cluster, database) as (url, facade),
        ):
            pids = {"facade": facade.pid, "operator": operator.pid}
            points: list[tuple[str, dict[str, tuple[float, float]]]] = []
            points.append(("at start", {k: memory(p) for k, p in pids.items()}))
            importer = Importer(url, ns, setup(api, ns, "http://127.0.0.1:9")["bot"])
            importer.create()
            peaks = ChildPeaks(operator.pid)
            peaks.start()
            for doc in docs[: args.warmup]:
                importer.add(doc)
            wait_until(lambda: indexed(api, ns, args.warmup), 300, f"{args.warmup} documents indexed")
            points.append((f"after the warm-up ({args.warmup} documents)", {k: memory(p) for k, p in pids.items()}))
            started = time.monotonic()
            for doc in docs[args.warmup :]:
                importer.add(doc)
            imported = time.monotonic() - started
            wait_until(lambda: indexed(api, ns, len(docs)), 900, f"{len(docs)} documents indexed")
            seconds = time.monotonic() - started
            status = indexed(api, ns, len(docs))
            assert status is not None
            points.append((f"at the end ({status['chunks']} chunks)", {k: memory(p) for k, p in pids.items()}))
            peaks.stop.set()
            peaks.join()
            runs = run_peaks(state / "indexing")
    finally:
        if not args.keep:
            cluster.down()
    print(f"imported and attached {len(docs) - args.warmup} documents in {imported:.0f} s; indexed "
          f"{status['documents']} documents, {status['chunks']} chunks, {status['bytes'] / 1e6:.2f} MB "
          f"{seconds:.0f} s after the warm-up ({len(runs)} indexing runs in all)")  # fmt: skip
    for label, values in points:
        line = "  ".join(f"{k} VmRSS {rss:6.1f} MiB VmHWM {hwm:6.1f} MiB" for k, (rss, hwm) in values.items())
        print(f"  {label:40} {line}")
    print(f"  indexing runs: peak RSS of the largest run {max(runs, default=float('nan')):.1f} MiB (its ru_maxrss), "
          f"highest VmHWM sampled {peaks.peak:.1f} MiB over {len(peaks.seen)} processes")  # fmt: skip
    warm, end = points[1][1], points[2][1]
    growth = {k: end[k][0] - warm[k][0] for k in pids}
    verdict = all(g < args.flat_mib for g in growth.values())
    print(f"summary ({status['chunks']} chunks, >= 10,000: {'met' if status['chunks'] >= 10000 else 'NOT met'}): "
          + ", ".join(f"{k} {g:+.1f} MiB" for k, g in growth.items())
          + f" from the warm-up to the end (flat, < {args.flat_mib:g} MiB each: {'met' if verdict else 'NOT met'}); "
          f"indexer peak {max(runs, default=float('nan')):.1f} MiB; loadavg {load()}")  # fmt: skip


if __name__ == "__main__":
    main()
