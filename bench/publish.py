"""A long import session's chunk publications (#31): what the check against ``fileSize`` costs as chunks pile up.

Every chunk upload ends with :meth:`ModelStore.publish`, which makes sure the session's chunks do not exceed the
declared file size. It used to list the session's directory and stat every chunk in it, for every new chunk:
quadratic over a session. Now each chunk is stat'ed once (:class:`dockyard_core.modelstore.ChunkSizes`); the
directory is still listed every time. Side by side, at the same numbers of chunks already published:

- ``publish``: the store's own publication of one more chunk (the check, ``link``, the directory's fsync), the
  median of ``--sample`` publications at each point;
- ``stat every chunk``: the old check alone (a listing, a stat of every chunk), the median of ``--sample``.

The chunks are one byte each (the check's cost does not depend on their size), written without their fsync
(not what is measured), in a temporary store under ``.dockyard/`` (the disk of the model store in a local run).
8,750 chunks: a 140 GB model in 16 MiB chunks, or 560 GB in the facade's largest (64 MiB).

    .venv/bin/python -m bench.publish [--chunks 8750 --sample 50]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dockyard_core.modelstore import CHUNK_NAME_RE, ModelStore, SessionMeta
from dockyard_core.upload import Upload
from dockyard_localcluster.settings import repo_root


def stat_every_chunk(directory: Path) -> int:
    """The old check: the bytes of every chunk, each stat'ed."""
    with os.scandir(directory) as entries:
        return sum(e.stat(follow_symlinks=False).st_size for e in entries if CHUNK_NAME_RE.match(e.name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=8750, help="chunks published in the session")
    parser.add_argument("--sample", type=int, default=50, help="publications timed at each point")
    args = parser.parse_args()
    points = sorted({p for p in (100, 1000, args.chunks // 2, args.chunks) if args.sample <= p <= args.chunks})
    base = repo_root() / ".dockyard"
    base.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench-publish-", dir=base))
    print(f"inputs: {args.chunks} chunks of 1 byte in one session, {args.sample} publications timed at "
          f"{', '.join(map(str, points))} chunks, store {root}, {os.cpu_count()} CPUs, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)  # fmt: skip
    try:
        store = ModelStore(root)
        store.ensure()
        now = datetime.now(UTC)
        upload = Upload(file_context="model", file_name="m.safetensors", file_extension="safetensors",
                        file_size=args.chunks, total_chunks=args.chunks)  # fmt: skip
        meta = SessionMeta(session_id="b" * 32, namespace="bench", environment="bench", model_id="m", upload=upload,
                           created_at=now, expires_at=now + timedelta(hours=1))  # fmt: skip
        store.create(meta)
        directory = store.chunks_dir(meta.session_id)
        timings: dict[int, tuple[float, float]] = {}
        timed = {n for point in points for n in range(point - args.sample, point)}  # the publications before each point
        started, cpu = time.monotonic(), time.process_time()
        for number in range(args.chunks):
            writer = store.writer(meta, 1, fsync=False)
            writer.write_all([memoryview(b"x")])
            chunk = writer.finish()
            t = time.perf_counter()
            store.publish(meta, number, chunk)
            spent = time.perf_counter() - t
            if number in timed:
                old = time.perf_counter()
                stat_every_chunk(directory)
                timings[number] = (spent, time.perf_counter() - old)
        total, total_cpu = time.monotonic() - started, time.process_time() - cpu
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rows = []
    for point in points:
        sample = [timings[n] for n in range(point - args.sample, point)]
        new, old = statistics.median(s[0] for s in sample), statistics.median(s[1] for s in sample)
        rows.append((point, new, old))
        print(f"  at {point:>6} chunks: publish {new * 1000:.2f} ms; stat every chunk (the old check alone) "
              f"{old * 1000:.2f} ms", flush=True)  # fmt: skip
    point, new, old = rows[-1]
    print(f"summary: {args.chunks} publications in {total:.1f} s ({total_cpu:.1f} CPU-s of this process, the timed "
          f"old checks included); at {point} chunks a publication takes {new * 1000:.2f} ms, the old check alone "
          f"{old * 1000:.2f} ms ({old / new:.1f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
