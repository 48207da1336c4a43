"""What any upload server could reach on this machine (#31): the bytes of ``bench.upload`` received over loopback TCP
by servers that do nothing else, against the same bytes written straight to disk. No HTTP, no cluster.

- ``direct``: ``bench.upload``'s batched direct write (the facade's :class:`ChunkWriter` fed 1 MiB batches, an fsync
  per chunk, new files, as many threads as connections): the denominator of ``bench.upload``'s ratio;
- ``threads``: a thread per connection receives each chunk into a 1 MiB buffer (``recv_into``) and hands every
  read to a :class:`ChunkWriter` itself (write, writeback started, fsync at the chunk's end), then acknowledges
  the chunk with one byte: the least a server can do per byte (one copy from the socket, one into the page cache);
- ``loop``: the facade's structure without HTTP and multipart: one uvloop event loop thread receives every
  connection into one 1 MiB buffer (``asyncio.BufferedProtocol``), copies each read (as httptools copies a body
  piece) and hands it to a writer thread per connection, which writes batches of at least 1 MiB with a
  :class:`ChunkWriter` and acknowledges the chunk through the loop.

The client is a process of its own (``--client``): per connection, each chunk sent with ``sendall`` from one buffer,
then the acknowledgement awaited, as ``bench.upload``'s clients send a chunk and await its answer. Rounds alternate
the ways; a receiver's ratio is against the mean of the direct writes before and after it. CPU-s per GiB: the
receiving process and the client.

    .venv/bin/python -m bench.upload_ceiling [--mib 1024 --rounds 3 --chunk-mib 16 --connections 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

from bench.common import cpu_seconds
from dockyard_core.storefiles import ChunkWriter

MiB = 1024 * 1024
READ_BYTES = MiB


def client(port: int, connections: int, chunks: int, chunk_bytes: int) -> None:
    """Send ``chunks`` chunks over each of ``connections`` connections, each acknowledged before the next, once
    told to go (a line on stdin, after "ready" on stdout); print the CPU-s it spent sending."""
    block = memoryview(os.urandom(chunk_bytes))
    print("ready", flush=True)
    sys.stdin.readline()
    cpu = time.process_time()

    def send() -> None:
        with socket.create_connection(("127.0.0.1", port)) as conn:
            for _ in range(chunks):
                conn.sendall(block)
                if conn.recv(1) != b"k":
                    raise SystemExit("the server did not acknowledge a chunk")

    threads = [threading.Thread(target=send) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(time.process_time() - cpu, flush=True)


class Client:
    """The client process, started and ready (its start-up and its data outside the measurement)."""

    def __init__(self, port: int, connections: int, chunks: int, chunk_bytes: int) -> None:
        args = [sys.executable, "-m", "bench.upload_ceiling", "--client", str(port), str(connections), str(chunks),
                str(chunk_bytes)]  # fmt: skip
        self.process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise SystemExit("the client did not start")

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def cpu(self) -> float:
        """Wait for the end; the CPU-s it spent sending."""
        assert self.process.stdout is not None
        spent = float(self.process.stdout.readline())
        self.process.wait()
        return spent


def receive_threads(directory: Path, connections: int, chunks: int, chunk_bytes: int) -> tuple[float, float, float]:
    """(seconds, CPU-s of this process, CPU-s of the client) for the ``threads`` receiver."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=connections)

    def serve(conn: socket.socket) -> None:
        buffer = memoryview(bytearray(READ_BYTES))
        with conn:
            for _ in range(chunks):
                writer, got = ChunkWriter(directory, chunk_bytes), 0
                while got < chunk_bytes:
                    n = conn.recv_into(buffer[: min(READ_BYTES, chunk_bytes - got)])
                    if not n:
                        raise ConnectionError("the client went away")
                    writer.write_all([buffer[:n]])
                    got += n
                writer.finish()
                conn.sendall(b"k")

    sender = Client(listener.getsockname()[1], connections, chunks, chunk_bytes)
    cpu, started = cpu_seconds(os.getpid()), time.monotonic()
    sender.go()
    threads = [threading.Thread(target=serve, args=(listener.accept()[0],)) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed, cpu = time.monotonic() - started, cpu_seconds(os.getpid()) - cpu
    listener.close()
    return elapsed, cpu, sender.cpu()


class Writer(threading.Thread):
    """The ``loop`` receiver's writer thread of one connection: batches of at least 1 MiB per write."""

    def __init__(self, directory: Path, chunk_bytes: int, acknowledge: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.pieces: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self.directory, self.chunk_bytes, self.acknowledge = directory, chunk_bytes, acknowledge

    def run(self) -> None:
        while True:
            writer, size = ChunkWriter(self.directory, self.chunk_bytes), 0
            while size < self.chunk_bytes:
                batch = [memoryview(self.pieces.get())]
                gathered = len(batch[0])
                while gathered < READ_BYTES and size + gathered < self.chunk_bytes:
                    batch.append(memoryview(self.pieces.get()))
                    gathered += len(batch[-1])
                writer.write_all(batch)
                size += gathered
            writer.finish()
            self.acknowledge()


def receive_loop(directory: Path, connections: int, chunks: int, chunk_bytes: int) -> tuple[float, float, float]:
    """(seconds, CPU-s of this process, CPU-s of the client) for the ``loop`` receiver."""
    import uvloop

    buffer = memoryview(bytearray(READ_BYTES))

    class Receiver(asyncio.BufferedProtocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            loop = asyncio.get_running_loop()
            sink = cast("asyncio.Transport", transport)  # the acknowledgement is written by the loop's thread
            self.writer = Writer(directory, chunk_bytes, lambda: loop.call_soon_threadsafe(sink.write, b"k"))
            self.writer.start()

        def get_buffer(self, sizehint: int) -> memoryview:
            return buffer

        def buffer_updated(self, nbytes: int) -> None:
            self.writer.pieces.put(bytes(buffer[:nbytes]))

        def connection_lost(self, exc: Exception | None) -> None:
            closed.append(exc)
            if len(closed) == connections:
                done.set()

    closed: list[Exception | None] = []
    done = asyncio.Event()

    async def main() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Receiver, "127.0.0.1", 0)
        sender = Client(server.sockets[0].getsockname()[1], connections, chunks, chunk_bytes)
        cpu, started = cpu_seconds(os.getpid()), time.monotonic()
        sender.go()
        await done.wait()
        elapsed, cpu = time.monotonic() - started, cpu_seconds(os.getpid()) - cpu
        server.close()
        return elapsed, cpu, await loop.run_in_executor(None, sender.cpu)

    return uvloop.run(main())


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client(*(int(arg) for arg in sys.argv[2:6]))
        return
    from bench.upload import direct_write  # the client above does without its imports

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=1024, help="bytes per run (all connections together)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk-mib", type=int, default=16)
    parser.add_argument("--connections", type=int, default=2)
    args = parser.parse_args()
    chunk_bytes = args.chunk_mib * MiB
    chunks = args.mib // args.chunk_mib // args.connections
    gib = chunks * args.connections * chunk_bytes / (1024 * MiB)
    print(f"inputs: {gib * 1024:.0f} MiB per run in {args.chunk_mib} MiB chunks, {args.connections} connections "
          f"(direct: as many threads), {args.rounds} rounds, cpus={os.cpu_count()}, "
          f"loadavg={' '.join(f'{v:.2f}' for v in os.getloadavg())}")  # fmt: skip
    root = Path(tempfile.mkdtemp(prefix="bench-upload-ceiling-"))
    block = os.urandom(chunk_bytes)
    receivers = {"threads": receive_threads, "loop": receive_loop}
    ratios: dict[str, list[float]] = {name: [] for name in receivers}

    def direct() -> float:
        seconds, _ = direct_write("batched", root / "direct", block, chunks * args.connections, args.connections, True)
        return float(gib * 1024 / seconds)

    try:
        direct()  # warm-up
        before = direct()
        for round_ in range(1, args.rounds + 1):
            for name, receive in receivers.items():
                directory = root / name
                directory.mkdir()
                seconds, cpu, client_cpu = receive(directory, args.connections, chunks, chunk_bytes)
                shutil.rmtree(directory)
                after = direct()
                rate = gib * 1024 / seconds
                ratio = rate / ((before + after) / 2)
                ratios[name].append(ratio)
                print(f"  round {round_} {name:7}: {rate:6.0f} MiB/s, {cpu / gib:.2f} CPU-s/GiB receiving, client "
                      f"{client_cpu / gib:.2f}; direct {before:.0f} / {after:.0f} MiB/s; ratio {ratio:.2f} "
                      f"(loadavg {os.getloadavg()[0]:.2f})")  # fmt: skip
                before = after
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("summary (receivers that do nothing but receive and write, / the batched direct write; medians of rounds): "
          + ", ".join(f"{name} {statistics.median(r):.2f} ({'/'.join(f'{x:.2f}' for x in r)})"
                      for name, r in ratios.items())
          + "; bench.upload's target for the facade is >= 0.75")  # fmt: skip


if __name__ == "__main__":
    main()
