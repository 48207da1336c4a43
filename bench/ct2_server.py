"""Dockyard's CTranslate2 server vs calling ``ctranslate2.Generator.generate_batch`` directly, in one run.

A random-weight decoder model is built here (tests/support/ct2_model.py, the dimensions below), then:

- direct: ``generate_batch`` on B prompts (B = 1, then B = maxBatchSize), greedy, exactly T new tokens
  each (``min_length = max_length = T``), ``include_prompt_in_result=False``, no callback;
- server: ``python -m dockyard_ct2`` as its own process on loopback (``--max-batch-size`` B_max, its
  default batching window), B clients each sending the same prompts as ``/v1/completions`` requests
  (``temperature 0``, ``min_tokens = max_tokens = T``), non-streaming, plus a streaming run at B = 1;
  its batching window is the server's default unless ``--batch-wait-ms`` is given;
  the B clients start each request together (a barrier), as generate_batch gets its B prompts at once.

Both sides use the same model directory, compute type and CPU threads (``--intra-threads``). Rounds
alternate direct / server / direct; the ratio is server tokens/s over the mean of the direct runs.
Tokens/s counts generated tokens only (the server's ``usage.completion_tokens``). Target: >= 0.9.
Also printed: generated tokens per CPU second of each side (the server process's user + system time
from /proc; the direct side's process time), which a busy shared machine disturbs less than wall time.

    .venv/bin/python -m bench.ct2_server [--layers 6 --dim 512 --tokens 128 --max-batch-size 8 --rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import ctranslate2
from tests.support.ct2_model import build

from dockyard_ct2.engine import resolve_compute_type

PROMPTS = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, how are you today my friend?",
    "Dockyard deploys models and apps on Kubernetes clusters.",
    "a model answers questions; an agent calls tools and reads their results",
]


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def loadavg() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def request(port: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{path}: {resp.status} {data[:300]!r}")
        out: dict[str, Any] = json.loads(data)
        return out
    finally:
        conn.close()


def stream_tokens(port: int, body: dict[str, Any]) -> int:
    """A streamed completion; the number of generated tokens (from the usage chunk)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
        conn.request("POST", "/v1/completions", json.dumps(payload), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        usage = 0
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data: {"):
                event = json.loads(line[len("data: ") :])
                if event.get("usage"):
                    usage = int(event["usage"]["completion_tokens"])
        return usage
    finally:
        conn.close()


def metrics(port: int) -> dict[str, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("dockyard_ct2_") and "{" not in line:
            name, value = line.split()
            out[name] = float(value)
    return out


class Direct:
    def __init__(self, model_dir: Path, compute_type: str, threads: int, vocab: list[str], end_id: int) -> None:
        self.generator = ctranslate2.Generator(
            str(model_dir), device="cpu", compute_type=compute_type, intra_threads=threads
        )
        self.vocab = vocab
        self.end_id = end_id
        self.cpu = 0.0
        self.tokens = 0

    def run(self, prompts: list[list[int]], tokens: int, repeats: int) -> tuple[float, int]:
        """tokens/s of ``repeats`` generate_batch calls on ``prompts``; and the tokens generated.
        ``self.cpu`` adds the CPU seconds spent (this process does nothing else meanwhile)."""
        batch = [[self.vocab[i] for i in p] for p in prompts]
        generated = 0
        cpu = time.process_time()
        start = time.perf_counter()
        for _ in range(repeats):
            results = self.generator.generate_batch(
                batch,
                max_length=tokens,
                min_length=tokens,
                sampling_topk=1,
                include_prompt_in_result=False,
                end_token=[self.end_id],
            )
            generated += sum(len(r.sequences_ids[0]) for r in results)
        elapsed = time.perf_counter() - start
        self.cpu += time.process_time() - cpu
        self.tokens += generated
        return generated / elapsed, generated

    def close(self) -> None:
        del self.generator


def server_run(port: int, prompts: list[str], tokens: int, repeats: int, *, stream: bool = False) -> tuple[float, int]:
    """tokens/s of len(prompts) concurrent clients, each sending ``repeats`` requests; the clients start
    each request together (a barrier), as the direct side hands generate_batch all prompts at once."""
    body = {"max_tokens": tokens, "min_tokens": tokens, "temperature": 0}
    barrier = threading.Barrier(len(prompts))

    def client(prompt: str) -> int:
        total = 0
        for _ in range(repeats):
            barrier.wait()
            if stream:
                total += stream_tokens(port, {**body, "prompt": prompt})
            else:
                total += int(request(port, "/v1/completions", {**body, "prompt": prompt})["usage"]["completion_tokens"])
        return total

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        generated = sum(pool.map(client, prompts))
    elapsed = time.perf_counter() - start
    return generated / elapsed, generated


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=1408)
    p.add_argument("--tokens", type=int, default=128, help="new tokens per sequence")
    p.add_argument("--max-batch-size", type=int, default=8)
    p.add_argument("--repeats", type=int, default=4, help="requests per client (generate calls per direct run)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="CTranslate2 intra_threads on both sides")
    p.add_argument("--compute-type", default="int8_float16", help="requested; the CPU falls back (int8_float32)")
    p.add_argument("--batch-wait-ms", type=float, default=None, help="the server's batching window (its default)")
    args = p.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="bench-ct2-"))
    model = build(workdir / "model", layers=args.layers, dim=args.dim, heads=args.heads, ffn=args.ffn)
    tok = model.tokenizer
    vocab = [tok.id_to_token(i) for i in range(model.vocab_size)]
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(args.max_batch_size)]
    prompt_ids = [tok.encode(t).ids for t in prompts]
    end_id = tok.token_to_id("</s>")
    params = sum(f.stat().st_size for f in model.path.glob("model.bin"))

    port = free_port()
    log = workdir / "server.log"
    cmd = [
        sys.executable, "-m", "dockyard_ct2", "--model-dir", str(model.path), "--port", str(port),
        "--compute-type", args.compute_type, "--max-batch-size", str(args.max_batch_size),
        "--intra-threads", str(args.threads), "--log-level", "warning",
    ]  # fmt: skip
    if args.batch_wait_ms is not None:
        cmd += ["--batch-wait-ms", str(args.batch_wait_ms)]
    print("== bench.ct2_server: Dockyard's CTranslate2 server vs ctranslate2.Generator.generate_batch ==")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average before: {loadavg()}")
    print(
        f"model: random-weight Llama-shaped decoder, {args.layers} layers, d_model {args.dim}, {args.heads} heads, "
        f"ffn {args.ffn}, vocabulary {model.vocab_size}, model.bin {params / 2**20:.1f} MiB (float32 on disk)"
    )
    print(
        f"inputs: {args.tokens} new tokens per sequence (greedy, min = max), prompts of "
        f"{min(map(len, prompt_ids))}-{max(map(len, prompt_ids))} tokens, batch 1 and {args.max_batch_size}, "
        f"{args.repeats} requests per client, {args.rounds} rounds, intra_threads {args.threads}, "
        f"compute type {args.compute_type} requested"
    )
    direct = Direct(model.path, resolve_compute_type(args.compute_type, "cpu"), args.threads, vocab, end_id)
    print(f"direct generator compute type: {direct.generator.compute_type}; server: {' '.join(cmd[2:])}")

    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/health")
                health = json.loads(conn.getresponse().read())
                conn.close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the server did not start:\n{log.read_text()}") from None
                time.sleep(0.2)
        print(f"server health: {health}")
        # warm-up: both sides, one call each
        direct.run(prompt_ids[:1], 8, 1)
        server_run(port, prompts[:1], 8, 1)

        rows: list[tuple[str, int, float, float, float]] = []
        cpu: dict[str, list[float]] = {}  # label -> [direct cpu, direct tokens, server cpu, server tokens]
        for batch in (1, args.max_batch_size):
            label = f"batch {batch}"
            cpu[label] = [0.0, 0.0, 0.0, 0.0]
            for rnd in range(1, args.rounds + 1):
                before = metrics(port)
                direct.cpu, direct.tokens = 0.0, 0
                d1, _ = direct.run(prompt_ids[:batch], args.tokens, args.repeats)
                server_cpu = process_cpu(proc.pid)
                s, made = server_run(port, prompts[:batch], args.tokens, args.repeats)
                server_cpu = process_cpu(proc.pid) - server_cpu
                after = metrics(port)
                d2, _ = direct.run(prompt_ids[:batch], args.tokens, args.repeats)
                cpu[label][0] += direct.cpu
                cpu[label][1] += direct.tokens
                cpu[label][2] += server_cpu
                cpu[label][3] += made
                calls = after["dockyard_ct2_generate_calls_total"] - before["dockyard_ct2_generate_calls_total"]
                seqs = after["dockyard_ct2_batched_sequences_total"] - before["dockyard_ct2_batched_sequences_total"]
                mean = (d1 + d2) / 2
                rows.append((label, rnd, mean, s, s / mean))
                print(
                    f"batch {batch:>2} round {rnd}: direct {d1:8.1f} / {d2:8.1f} tok/s, server {s:8.1f} tok/s, "
                    f"ratio {s / mean:.3f}; server generate calls {calls:.0f} for {seqs:.0f} sequences "
                    f"(mean batch {seqs / max(calls, 1):.2f}); load {loadavg()}"
                )
        d1, _ = direct.run(prompt_ids[:1], args.tokens, args.repeats)
        s, _ = server_run(port, prompts[:1], args.tokens, args.repeats, stream=True)
        d2, _ = direct.run(prompt_ids[:1], args.tokens, args.repeats)
        mean = (d1 + d2) / 2
        print(f"batch  1 streaming (SSE): direct {mean:8.1f} tok/s, server {s:8.1f} tok/s, ratio {s / mean:.3f}")
        print("summary (median of rounds):")
        for label in ("batch 1", f"batch {args.max_batch_size}"):
            ratios = sorted(r[4] for r in rows if r[0] == label)
            directs = sorted(r[2] for r in rows if r[0] == label)
            servers = sorted(r[3] for r in rows if r[0] == label)
            mid = len(ratios) // 2
            d_cpu, d_tok, s_cpu, s_tok = cpu[label]
            print(
                f"  {label:>8}: direct {directs[mid]:8.1f} tok/s, server {servers[mid]:8.1f} tok/s, "
                f"ratio {ratios[mid]:.3f} (target >= 0.9); tokens per CPU second: direct {d_tok / d_cpu:.1f}, "
                f"server {s_tok / s_cpu:.1f} (ratio {(s_tok / s_cpu) / (d_tok / d_cpu):.3f})"
            )
        print(f"load average after: {loadavg()}")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        direct.close()


if __name__ == "__main__":
    main()
