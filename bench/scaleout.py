"""Scale-out: one facade vs two facade replicas on one PostgreSQL, and what must stay exact across them.

One local control plane of its own, the operator, a PostgreSQL server from the distribution's package
started on loopback for the run (the replicas share its conversation store), a fast scripted model
server as a process of its own (``--delay-ms`` per answer; it answers with the user messages it was
sent, so a turn's answer shows the history the facade read from the store), and two facade processes
(``python -m dockyard_api``, local endpoint mode, the same settings). The client spreads the calls over
the replicas in turn (client-side round robin, one aiohttp session).

Measured, rounds alternated (one replica, then both, ``--rounds`` times), each call a new session as in
``bench.execute``: turns/s (median of rounds) of one replica and of two, their ratio, the facades' CPU
seconds per turn (both processes, /proc; each one's CPU seconds too), PostgreSQL's (the server and its
backends, those that ended included) and the connections opened to it during the phase.

Checked across the replicas (a failure is a product bug):

- rate limits: an Environment with ``spec.rateLimits.requestsPerMinute`` L; 2 x L calls within one
  minute, alternating replicas: exactly L answered, exactly L refused with 429;
- sessions: ``--sessions`` sessions of ``--session-turns`` turns each, run at once, each session's turns
  alternating replicas: every turn answered, and each turn's model call carried all the session's
  earlier user messages in order (the history is complete whichever replica stored them);
- usage: the management API's usage endpoint (a real Kubernetes token) counts exactly the turns sent
  during the run (requests, errors, tokens in and out: the model reports 12 and 7 per call) and the
  rate-limited calls.

Target (issue #31): about twice the turns with two replicas where the cores allow it (judged >= 1.8 with
at least 8 CPUs: two facades, PostgreSQL, the model server and the client each need one); with fewer
CPUs the replicas share the same cores and the figure is the CPU seconds per turn, judged as two
replicas costing at most 1.2 x the CPU per turn of one.

    .venv/bin/python -m bench.scaleout [--turns 2000 --rounds 3 --concurrency 32 --delay-ms 20]
        [--rate-limit 50 --sessions 16 --session-turns 6]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import statistics
import subprocess
import threading
import time
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

import aiohttp
import httpx
import orjson
from kubernetes import client
from tests.support.scripted_model import Reply, scripted_model

from bench.common import (
    api_for,
    bench_cluster,
    fit_per_second,
    load,
    namespace,
    operator_process,
    process_counters,
    tree_cpu,
)
from bench.execute import facade_process, model_process, percentile, setup
from dockyard_core import apikeys
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import API_VERSION, VERSION

USAGE = (12, 7)
"""(prompt, completion) tokens the model reports per call."""
LIMITED_ENV = "bot-limited"


# --- the model server (a process of its own) ---------------------------------------------------------


def serve_model(delay_ms: float) -> None:
    """``--serve-model``: answer every chat completion after ``delay_ms`` with ``seen:`` and the user
    messages of the request joined by ``|``; print the URL; serve until terminated."""

    def respond(body: dict[str, Any]) -> Reply:
        seen = [str(m.get("content") or "") for m in body.get("messages", []) if m.get("role") == "user"]
        return Reply(text="seen:" + "|".join(seen), delay=delay_ms / 1000, usage=USAGE)

    with contextlib.suppress(KeyboardInterrupt), scripted_model(record=False) as server:
        server.respond_with(respond)
        print(server.url, flush=True)
        threading.Event().wait()


# --- processes' CPU ----------------------------------------------------------------------------------


async def pg_counts(url: str) -> tuple[int, int]:
    """Connections established to the server so far (pg_stat_database.sessions, PostgreSQL 14+: the
    connections the replicas' pools opened) and transactions ended (committed or rolled back)."""
    import asyncpg

    conn = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        row = await conn.fetchrow("SELECT coalesce(sum(sessions), 0), coalesce(sum(xact_commit + xact_rollback), 0) "
                                  "FROM pg_stat_database")  # fmt: skip
        assert row is not None
        return int(row[0]), int(row[1])
    finally:
        await conn.close()


# --- setup -------------------------------------------------------------------------------------------


def limited_environment(api: client.ApiClient, ns: str, per_minute: int) -> str:
    """An Environment of the bot with ``requestsPerMinute``, and an API key of it; returns the key."""
    objects = client.CustomObjectsApi(api)
    body = {"apiVersion": API_VERSION, "kind": "Environment", "metadata": {"name": LIMITED_ENV},
            "spec": {"appRef": "bot", "rateLimits": {"requestsPerMinute": per_minute}}}  # fmt: skip
    objects.create_namespaced_custom_object(GROUP, VERSION, ns, "environments", body)
    env = objects.get_namespaced_custom_object(GROUP, VERSION, ns, "environments", LIMITED_ENV)
    key = apikeys.generate()
    secret = apikeys.key_secret(key=key, name="limits", environment=env, created_by="bench",
                                created_at=datetime.now(UTC))  # fmt: skip
    client.CoreV1Api(api).create_namespaced_secret(ns, secret)
    return key.value


def admin_token(api: client.ApiClient, ns: str) -> str:
    """A real Kubernetes token of a ServiceAccount bound to cluster-admin in the namespace (usage API)."""
    core = client.CoreV1Api(api)
    core.create_namespaced_service_account(ns, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="ops")))
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(ns, {
        "metadata": {"name": "ops-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "ops", "namespace": ns}]})  # fmt: skip
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    token: str = core.create_namespaced_service_account_token("ops", ns, request).status.token
    return token


def usage_totals(facade: str, ns: str, env: str, token: str) -> dict[str, int]:
    answer = httpx.get(f"{facade}/api/v1/namespaces/{ns}/environments/{env}/usage",
                       headers={"Authorization": f"Bearer {token}"}, timeout=30)  # fmt: skip
    answer.raise_for_status()
    totals: dict[str, int] = answer.json()["totals"]
    return totals


# --- load --------------------------------------------------------------------------------------------


class Client:
    """Execute calls spread over the replicas in turn; counts every answer by status."""

    def __init__(self, urls: list[str], ns: str, key: str, env: str = "bot-draft") -> None:
        self.urls = [f"{u}/e/{ns}/{env}/v1/apps/bot/execute" for u in urls]
        self.headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        self.statuses: dict[int, int] = {}
        self.answered_minutes: list[int] = []
        """The UTC minute (Unix time // 60) each 200 came back in (the rate limit's window)."""

    async def call(self, http: aiohttp.ClientSession, replica: int, body: dict[str, Any]) -> tuple[int, Any]:
        async with http.post(self.urls[replica % len(self.urls)], data=orjson.dumps(body), headers=self.headers) as r:
            text = await r.read()
        self.statuses[r.status] = self.statuses.get(r.status, 0) + 1
        if r.status == 200:
            self.answered_minutes.append(int(time.time() // 60))
        return r.status, orjson.loads(text) if text else None


def session(limit: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit))


async def throughput(bot: Client, replicas: int, turns: int, concurrency: int) -> tuple[float, list[float], int]:
    """``turns`` new-session turns by ``concurrency`` clients over the first ``replicas`` replicas in turn:
    seconds, latencies (ms), errors."""
    counter = itertools.count()
    latencies: list[float] = []
    errors = 0
    left = turns

    async def worker(http: aiohttp.ClientSession) -> None:
        nonlocal left, errors
        while left > 0:
            left -= 1
            started = time.perf_counter()
            status, answer = await bot.call(
                http, next(counter) % replicas, {"message": "What is the capital of Norway?"}
            )
            latencies.append((time.perf_counter() - started) * 1000)
            if status != 200:
                errors += 1
                if errors <= 3:
                    print(f"    error {status}: {str(answer)[:300]}")

    async with session(concurrency) as http:
        start = time.perf_counter()
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
        return time.perf_counter() - start, latencies, errors


async def sessions_check(bot: Client, sessions: int, turns: int) -> tuple[list[str], int]:
    """Each session's turns alternate replicas; each answer must list the session's user messages so far.
    Then two turns of the session at once, one on each replica: one turn at a time holds across them, so
    the one answered second carries the first one's message (a 409 after the busy wait is allowed, and
    counted). Returns the problems and the number of 409s."""
    problems: list[str] = []
    busy = 0

    async def one(http: aiohttp.ClientSession, s: int) -> None:
        nonlocal busy
        session_id = None
        sent: list[str] = []
        for t in range(turns):
            message = f"s{s}-t{t}"
            sent.append(message)
            body = {"message": message, **({"session_id": session_id} if session_id else {})}
            status, answer = await bot.call(http, s + t, body)
            if status != 200:
                problems.append(f"session {s} turn {t} on replica {(s + t) % 2}: {status} {str(answer)[:200]}")
                return
            session_id = session_id or answer["session_id"]
            if answer["session_id"] != session_id or answer["response"] != "seen:" + "|".join(sent):
                problems.append(f"session {s} turn {t} on replica {(s + t) % 2}: {answer['response'][:200]!r}")
                return
        pair = [f"s{s}-a", f"s{s}-b"]
        both = await asyncio.gather(*(bot.call(http, r, {"message": m, "session_id": session_id})
                                      for r, m in enumerate(pair)))  # fmt: skip
        answered = [(m, a["response"]) for m, (st, a) in zip(pair, both, strict=True) if st == 200]
        busy += sum(1 for st, _ in both if st == 409)
        if any(st not in (200, 409) for st, _ in both):
            problems.append(f"session {s}, two turns at once: {[(st, str(a)[:120]) for st, a in both]}")
        elif len(answered) == 2:
            firsts = ["seen:" + "|".join([*sent, m]) for m in pair]
            seconds = ["seen:" + "|".join([*sent, *pair[::-1]]), "seen:" + "|".join([*sent, *pair])]
            got = [text for _, text in answered]
            if got not in ([firsts[0], seconds[1]], [seconds[0], firsts[1]]):
                problems.append(f"session {s}, two turns at once on both replicas: {got}")
        elif answered and answered[0][1] != "seen:" + "|".join([*sent, answered[0][0]]):
            problems.append(f"session {s}, one of two turns at once answered: {answered[0][1]!r}")

    async with session(2 * sessions) as http:
        await asyncio.gather(*(one(http, s) for s in range(sessions)))
    return problems, busy


async def rate_limit_check(limited: Client, per_minute: int) -> tuple[int, int, int, int]:
    """2 x ``per_minute`` calls, 16 at a time, alternating replicas, inside one minute (it waits for the next
    minute when fewer than 20 s are left of this one): (answered earlier in the same minute, answered,
    refused with 429, other)."""
    if datetime.now(UTC).second > 40:
        await asyncio.sleep(60.5 - datetime.now(UTC).second)
    minute = int(time.time() // 60)
    earlier = limited.answered_minutes.count(minute)  # the readiness calls, when in this minute
    before = dict(limited.statuses)
    counter = itertools.count()

    async def worker(http: aiohttp.ClientSession) -> None:
        while (n := next(counter)) < 2 * per_minute:
            await limited.call(http, n, {"message": "limited"})

    async with session(16) as http:
        await asyncio.gather(*(worker(http) for _ in range(16)))
    if int(time.time() // 60) != minute:
        raise RuntimeError("the burst crossed a minute boundary; run again")
    got = {status: n - before.get(status, 0) for status, n in limited.statuses.items()}
    return earlier, got.get(200, 0), got.get(429, 0), sum(n for s, n in got.items() if s not in (200, 429))


async def until_answered(bot: Client, replicas: int, timeout: float = 120) -> None:
    """Each replica answers the environment (its informers have it, the model's pod is annotated); 404/503
    until then."""
    async with session(4) as http:
        for replica in range(replicas):
            deadline = time.monotonic() + timeout
            while (last := await bot.call(http, replica, {"message": "ready?"}))[0] != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"replica {replica} never answered {bot.urls[replica]}: {last}")
                await asyncio.sleep(0.2)


# --- main --------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=2000, help="turns per phase and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--delay-ms", type=float, default=20.0, help="the model server's time per answer")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--rate-limit", type=int, default=50, help="requestsPerMinute of the limits check")
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--session-turns", type=int, default=6, help="at most 10: the whole history fits")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="replicas' CPU measured without calls")
    parser.add_argument("--keep", action="store_true", help="leave the benchmark's control plane running")
    parser.add_argument("--serve-model", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_model:
        serve_model(args.delay_ms)
        return
    cpus = os.cpu_count() or 1
    print(f"inputs: turns={args.turns} per phase and round, rounds={args.rounds}, concurrency={args.concurrency}, "
          f"model delay={args.delay_ms:g} ms, warmup={args.warmup}, rate limit={args.rate_limit}/min, "
          f"sessions={args.sessions}x{args.session_turns} turns, PostgreSQL, cpus={cpus}, "
          f"loadavg={load()}")  # fmt: skip
    from tests.support.postgres import postgres_server

    cluster = bench_cluster("bench-scaleout", nodes_per_type=1)
    try:
        api = api_for(cluster)
        ns = namespace(api, "bench-scaleout")
        with ExitStack() as stack:
            model_url = stack.enter_context(model_process(args.delay_ms, ("bench.scaleout", "--serve-model")))
            pg = stack.enter_context(postgres_server())
            database = pg.url(asyncio.run(pg.create_database("bench")))
            stack.enter_context(operator_process(cluster))
            keys: Any = setup(api, ns, model_url)
            key = keys["bot"] if isinstance(keys, dict) else keys  # bench.execute's setup: one key, or one per app
            limited_key = limited_environment(api, ns, args.rate_limit)
            token = admin_token(api, ns)
            urls, procs = [], []
            for _ in range(2):
                url, proc = stack.enter_context(facade_process(cluster, database))
                urls.append(url)
                procs.append(proc)
            assert pg.proc is not None
            report = asyncio.run(measure(args, urls, procs, pg.proc.pid, database, ns, key, limited_key, token))
        client.CoreV1Api(api).delete_namespace(ns)
    finally:
        if not args.keep:
            cluster.down()
    print("\n".join(report))


async def measure(args: argparse.Namespace, urls: list[str], procs: list[subprocess.Popen[bytes]], pg_pid: int,
                  database: str, ns: str, key: str, limited_key: str, token: str) -> list[str]:  # fmt: skip
    bot = Client(urls, ns, key)
    limited = Client(urls, ns, limited_key, LIMITED_ENV)
    await until_answered(bot, 2)
    await throughput(bot, 2, args.warmup, args.concurrency)
    usage_before = usage_totals(urls[0], ns, "bot-draft", token)
    sent_before = dict(bot.statuses)
    loads = [os.getloadavg()[0]]
    idle = [process_counters(p.pid)[0] for p in procs]
    await asyncio.sleep(args.idle_seconds)
    idle = [(process_counters(p.pid)[0] - c) * 1000 / args.idle_seconds for p, c in zip(procs, idle, strict=True)]
    print(f"  background CPU while idle ({args.idle_seconds:g} s, no calls): "
          f"{' + '.join(f'{c:.1f}' for c in idle)} ms per second by replica", flush=True)  # fmt: skip
    runs: dict[int, list[tuple[float, ...]]] = {1: [], 2: []}
    for round_ in range(1, args.rounds + 1):
        for replicas in (1, 2):
            start = [process_counters(p.pid) for p in procs]
            pg_cpu, (connections, xacts) = tree_cpu(pg_pid), await pg_counts(database)
            seconds, latencies, errors = await throughput(bot, replicas, args.turns, args.concurrency)
            end_connections, end_xacts = await pg_counts(database)
            connections, xacts = end_connections - connections - 1, end_xacts - xacts - 1  # less a reading's own
            used = [
                [a - b for a, b in zip(process_counters(p.pid), was, strict=True)]
                for p, was in zip(procs, start, strict=True)
            ]
            turns = [args.turns // replicas + (i < args.turns % replicas) if i < replicas else 0 for i in range(2)]
            facade_cpu = sum(u[0] for u in used) * 1000 / args.turns
            pg_cpu = (tree_cpu(pg_pid) - pg_cpu) * 1000 / args.turns
            switches, syscalls = (sum(u[i] for u in used) / args.turns for i in (1, 2))
            system = sum(u[3] for u in used) * 1000 / args.turns
            rps = args.turns / seconds
            loads.append(os.getloadavg()[0])
            runs[replicas].append((rps, percentile(latencies, 50), percentile(latencies, 99), facade_cpu, pg_cpu,
                                   switches, syscalls, xacts / args.turns, system))  # fmt: skip
            print(f"  round {round_} {replicas} replica{'s' if replicas > 1 else ' '} {rps:7.1f} turns/s  p50 "
                  f"{runs[replicas][-1][1]:6.1f} ms  p99 {runs[replicas][-1][2]:6.1f} ms  facade CPU {facade_cpu:.2f} "
                  f"ms/turn (CPU-s by replica {' + '.join(f'{u[0]:.1f}' for u in used)} in {seconds:.1f} s)  "
                  f"PostgreSQL CPU {pg_cpu:.2f} ms/turn  connections opened {connections}  errors {errors}  "
                  f"load {loads[-1]:.1f}",
                  flush=True)  # fmt: skip
            print("    by replica: " + "; ".join(
                f"#{i + 1} {t} turns, {u[0]:.2f} CPU-s = {u[0] * 1000 / t if t else 0:.2f} ms/turn (system "
                f"{u[3] * 1000 / t if t else 0:.2f}, idle share {idle[i] * seconds / t if t else 0:.2f}), "
                f"{u[1] / t if t else u[1]:.1f} context switches "
                f"and {u[2] / t if t else u[2]:.1f} read/write syscalls{' per turn' if t else ' in all'}"
                for i, (t, u) in enumerate(zip(turns, used, strict=True))) + f"; PostgreSQL {xacts / args.turns:.2f} "
                "transactions per turn", flush=True)  # fmt: skip
    problems, busy = await sessions_check(bot, args.sessions, args.session_turns)
    await until_answered(limited, 2)
    earlier, answered, refused, other = await rate_limit_check(limited, args.rate_limit)
    await asyncio.sleep(0.5)
    usage = usage_totals(urls[1], ns, "bot-draft", token)
    limited_usage = usage_totals(urls[0], ns, LIMITED_ENV, token)
    sent = {s: n - sent_before.get(s, 0) for s, n in bot.statuses.items()}

    med = {r: [statistics.median(v[i] for v in runs[r]) for i in range(9)] for r in (1, 2)}
    ratio = med[2][0] / med[1][0]
    cpu_ratio = med[2][3] / med[1][3]
    cpus = os.cpu_count() or 1
    ok_turns = sent.get(200, 0)
    usage_delta = {k: usage.get(k, 0) - usage_before.get(k, 0) for k in ("requests", "errors", "tokensIn", "tokensOut")}
    want = {"requests": sum(sent.values()), "errors": sum(n for s, n in sent.items() if s != 200),
            "tokensIn": USAGE[0] * ok_turns, "tokensOut": USAGE[1] * ok_turns}  # fmt: skip
    usage_ok = usage_delta == want
    # the limited environment saw the two readiness calls (answered) and the burst
    limited_want = {"requests": limited.statuses.get(200, 0), "rateLimited": limited.statuses.get(429, 0)}
    limited_got = {k: limited_usage.get(k, 0) for k in limited_want}
    limits_ok = (earlier + answered, answered + refused, other) == (args.rate_limit, 2 * args.rate_limit, 0)
    limits_ok = limits_ok and limited_got == limited_want
    lines = [f"\nloadavg after: {load()}"]
    for r in (1, 2):
        lines.append(f"{r} replica{'s' if r > 1 else ' '}: {med[r][0]:7.1f} turns/s (median of rounds)  p50 "
                     f"{med[r][1]:.1f} ms  p99 {med[r][2]:.1f} ms  facade CPU {med[r][3]:.2f} ms/turn (system "
                     f"{med[r][8]:.2f})  PostgreSQL CPU "
                     f"{med[r][4]:.2f} ms/turn; per turn {med[r][5]:.1f} context switches, {med[r][6]:.1f} read/write "
                     f"syscalls of the facades, {med[r][7]:.2f} PostgreSQL transactions")  # fmt: skip
    lines.append(f"background CPU of each replica while idle: {' + '.join(f'{c:.1f}' for c in idle)} ms/s")
    a, b, off = fit_per_second((v[0] / r, v[3]) for r in (1, 2) for v in runs[r])
    lines.append(f"facade CPU per turn, all phases ~ {a:.2f} ms + {b:.0f} ms/s / (turns/s per replica), largest "
                 f"residual {off:.2f} ms: every serving replica pays the {b:.0f} ms per second (at {med[2][0]:.0f} "
                 f"turns/s: 2 replicas {a + 2 * b / med[2][0]:.2f}, 1 {a + b / med[2][0]:.2f} ms/turn)")  # fmt: skip
    lines.append(f"rate limit {args.rate_limit}/min over both replicas, {2 * args.rate_limit} calls: "
                 f"{answered} answered (+ {earlier} readiness calls in the same minute), {refused} refused "
                 f"(429), {other} other; usage of {LIMITED_ENV}: {limited_got} (want {limited_want})")  # fmt: skip
    lines.append(f"sessions: {args.sessions} x {args.session_turns} turns alternating replicas, then two at once on "
                 f"both ({busy} answered 409 after the busy wait): "
                 f"{'every history complete' if not problems else '; '.join(problems[:5])}")  # fmt: skip
    lines.append(f"usage of bot-draft during the run: {usage_delta} (turns sent: {want})")
    if cpus >= 8:
        scale = f"turns 2 / 1 replicas {ratio:.2f} (>= 1.8: {met(ratio >= 1.8)})"
    else:
        scale = (f"turns 2 / 1 replicas {ratio:.2f} (not judged: {cpus} CPUs shared by both replicas, PostgreSQL, "
                 f"the model and the client); facade CPU per turn 2 / 1 replicas {cpu_ratio:.2f} (<= 1.2: "
                 f"{met(cpu_ratio <= 1.2)})")  # fmt: skip
    lines.append(f"summary (model delay {args.delay_ms:g} ms, concurrency {args.concurrency}, PostgreSQL, {cpus} CPUs, "
                 f"load {min(loads):.1f}-{max(loads):.1f}): {med[1][0]:.0f} vs {med[2][0]:.0f} turns/s, {scale}; "
                 f"facade CPU-s per turn {med[1][3]:.2f} / {med[2][3]:.2f} ms (1 / 2 replicas); exact across "
                 f"replicas: rate limit {earlier + answered}/{args.rate_limit} answered ({met(limits_ok)}), sessions "
                 f"({met(not problems)}), usage ({met(usage_ok)})")  # fmt: skip
    return lines


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


if __name__ == "__main__":
    main()
