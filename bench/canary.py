"""Canary by session and automatic rollback, measured (#27, docs/promotion.md).

One local control plane of its own, the operator and the facade as their own processes (the facade's SLO
watcher on, checking every second), an App with two versions whose agents are told apart by name (the
execute answer's ``agent``: ``v1`` or ``v2``), real API keys and the conversation database (a SQLite file).

- ``split``: ``--sessions`` NEW sessions through the facade on an environment whose canary has ``--weight``
  percent, each with ``--turns`` turns: the share of sessions on the canary (target: within +-2 points of the
  weight), how many sessions had every turn answered by one version (target: 100 %), and how many landed
  where their id's hash says (the split is the same on every replica).
- ``rollback``: per ``--faults`` (``tool``: the canary's tool starts failing, so its answers lose what the
  live evaluation expects; ``slow``: the canary's model answers ``--slow-s`` late), a canary at 50 % under
  load (``--load`` clients starting new sessions), the fault injected, and the time until a new session
  whose id hashes onto the canary is answered by v1 (target: <= 30 s after the breach begins), with the
  watcher's reason.
- ``overhead``: the p50 of ``--calls`` new-session turns through an environment without a canary and one
  with a canary (50 %, same content), alternated over ``--rounds`` in the same run, same facade, model and
  store (target: the canary adds <= 1 ms).

    .venv/bin/python -m bench.canary [--sessions 10000 --turns 2 --weight 30 --concurrency 32]
        [--faults tool,slow] [--calls 1000 --rounds 3 --delay-ms 100] [--parts split,rollback,overhead]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import aiohttp
from kubernetes import client
from tests.support.scripted_model import Call, Reply, ScriptedModel, scripted_model

from bench.common import api_for, bench_cluster, load, namespace, operator_process, wait_until
from bench.execute import database_url, facade_process, model_process, percentile
from dockyard_api.runtime.canary import on_canary
from dockyard_api.runtime.endpoints import LOCAL_ENDPOINT_ANNOTATION, MODEL_DEPLOYMENT_LABEL
from dockyard_core import apikeys
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import API_VERSION, VERSION

SLO = {"maxErrorRate": 0.2, "maxP95LatencySeconds": 1.0, "minEvaluationPassRate": 0.8, "evaluationSampleRate": 1.0,
       "expect": {"contains": ["shipped"]}, "windowSeconds": 20, "minTurns": 10}  # fmt: skip
"""The rollback part's SLOs: error rate, p95 latency and the live evaluation (every turn scored)."""


class Faults:
    def __init__(self) -> None:
        self.tool_failing = False
        self.slow_s = 0.0


def answer(faults: Faults, body: dict[str, Any]) -> Reply:
    """v2 (its instructions name it) looks its order up with the tool and answers with what it said."""
    messages = body["messages"]
    if "v2" not in str(messages[0].get("content")):
        return Reply(text="Your order has shipped.")
    said = [m for m in messages if m.get("role") == "tool"]
    if not said:
        return Reply(calls=[Call("orders", {"id": "42"}, id=f"c{uuid.uuid4().hex[:8]}")])
    text = "Your order has shipped." if "shipped" in str(said[-1].get("content")) else "Sorry, I cannot tell."
    return Reply(text=text, delay=faults.slow_s)


def orders(faults: Faults, arguments: dict[str, Any]) -> dict[str, Any]:
    if faults.tool_failing:
        raise RuntimeError("the order service is down")
    return {"order": arguments.get("id"), "state": "shipped"}


def setup(api: client.ApiClient, ns: str, fast_url: str, scripted: ScriptedModel) -> dict[str, str]:
    """Models, the tool, the App with versions 1.0.0 (agent v1) and 1.1.0 (agent v2 with the tool), and the
    environments: off (1.0.0 on the fast model), on (the same with a canary of 1.0.1, the same content),
    split and live (1.0.0 of the scripted model, canaries started by the parts). Returns each one's key."""
    objects = client.CustomObjectsApi(api)

    def create(plural: str, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}
        made: dict[str, Any] = objects.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body)
        return made

    create("models", "Model", "tiny", {"modelType": "openSource", "source": {"hub": {"id": "bench/tiny"}}})
    for name, device in (("fast", "g5.xlarge"), ("scripted", "g5.2xlarge")):  # a node each
        spec = {"modelRef": "tiny", "modelType": "openSource", "name": name, "deviceType": device}
        create("modeldeployments", "ModelDeployment", name, spec)
    create("tools", "Tool", "orders-1.0.0", {"name": "orders", "version": "1.0.0", "endpoint": scripted.tool(
        "orders", lambda a: orders(FAULTS, a)), "parameters": {"type": "object", "properties": {}}})  # fmt: skip
    v1 = {"name": "v1", "version": "1.0.0", "instructions": "You are v1.", "model": "scripted"}
    v2 = {"name": "v2", "version": "1.0.0", "instructions": "You are v2.", "model": "scripted", "tools": ["orders"]}
    fast = {"name": "v1", "version": "1.0.0", "instructions": "You are v1.", "model": "fast"}
    create("apps", "App", "bot", {"agents": [v1]})
    for version, agents, tools in (("1.0.0", [v1], []), ("1.1.0", [v2], [{"name": "orders", "version": "1.0.0"}]),
                                   ("2.0.0", [fast], []), ("2.0.1", [fast], [])):  # fmt: skip
        spec = {"appRef": "bot", "version": version, "displayName": version, "agents": agents, "toolVersions": tools}
        create("appversions", "AppVersion", f"bot-{version}", spec)
    core = client.CoreV1Api(api)
    for name, url in (("fast", fast_url), ("scripted", scripted.url)):

        def ready(name: str = name) -> Any:
            pods = core.list_namespaced_pod(ns, label_selector=f"{MODEL_DEPLOYMENT_LABEL}={name}").items
            return next((p for p in pods if any(c.type == "Ready" and c.status == "True"
                                                 for c in p.status.conditions or [])), None)  # fmt: skip

        wait_until(ready, 180, f"a Ready pod of {name}")
        core.patch_namespaced_pod(
            ready().metadata.name, ns, {"metadata": {"annotations": {LOCAL_ENDPOINT_ANNOTATION: url}}}
        )
    envs = {
        "off": {"appVersion": "2.0.0"},
        "on": {"appVersion": "2.0.0", "canary": {"appVersion": "2.0.1", "weight": 50}},
        "split": {"appVersion": "1.0.0"},
        "live": {"appVersion": "1.0.0", "slo": {**SLO, "watchSeconds": 0}},
    }
    keys = {}
    for env, spec in envs.items():
        made = create("environments", "Environment", f"bot-{env}", {"appRef": "bot", **spec})
        key = apikeys.generate()
        secret = apikeys.key_secret(key=key, name="bench", environment=made, created_by="bench",
                                    created_at=datetime.now(UTC))  # fmt: skip
        core.create_namespaced_secret(ns, secret)
        keys[env] = key.value
    return keys


FAULTS = Faults()


class Target:
    def __init__(self, url: str, ns: str, keys: dict[str, str], api: client.ApiClient) -> None:
        self.url, self.ns, self.keys, self.api = url, ns, keys, api

    def execute(self, env: str) -> str:
        return f"{self.url}/e/{self.ns}/bot-{env}/v1/apps/bot/execute"

    async def turn(self, http: aiohttp.ClientSession, env: str, session: str | None = None) -> tuple[int, str, str]:
        body: dict[str, Any] = {"message": "Where is my order 42?"}
        if session:
            body["session_id"] = session
        headers = {"Authorization": f"Bearer {self.keys[env]}"}
        async with http.post(self.execute(env), json=body, headers=headers) as response:
            data = await response.json(content_type=None)
            return response.status, str(data.get("agent", "")), str(data.get("session_id", ""))

    def patch(self, env: str, spec: dict[str, Any]) -> None:
        client.CustomObjectsApi(self.api).patch_namespaced_custom_object(
            GROUP, VERSION, self.ns, "environments", f"bot-{env}", {"spec": spec}
        )

    def spec(self, env: str) -> dict[str, Any]:
        found: dict[str, Any] = client.CustomObjectsApi(self.api).get_namespaced_custom_object(
            GROUP, VERSION, self.ns, "environments", f"bot-{env}"
        )
        return found


async def split(t: Target, sessions: int, turns: int, weight: int, concurrency: int) -> bool:
    t.patch("split", {"canary": {"appVersion": "1.1.0", "weight": weight}})
    await asyncio.sleep(2.0)  # the facade's informer sees the canary
    first: dict[str, str] = {}
    mixed = errors = 0
    left = sessions
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as http:

        async def client_() -> None:
            nonlocal left, mixed, errors
            while left > 0:
                left -= 1
                status, agent, sid = await t.turn(http, "split")
                if status != 200:
                    errors += 1
                    continue
                seen = {agent}
                for _ in range(turns - 1):
                    status, later, _ = await t.turn(http, "split", sid)
                    if status != 200:
                        errors += 1
                    else:
                        seen.add(later)
                mixed += len(seen) > 1
                first[sid] = agent
                if len(first) % 1000 == 0:
                    print(f"  split: {len(first)} sessions", flush=True)

        started = time.perf_counter()
        await asyncio.gather(*(client_() for _ in range(concurrency)))
        seconds = time.perf_counter() - started
    on = sum(a == "v2" for a in first.values())
    share = 100 * on / max(1, len(first))
    as_hashed = sum((a == "v2") == on_canary(sid, weight) for sid, a in first.items())
    one_version = 100 * (len(first) - mixed) / max(1, len(first))
    print(
        f"split: {len(first)} sessions x {turns} turns in {seconds:.1f} s ({errors} errors): {on} on the canary = "
        f"{share:.2f} % for a weight of {weight} % (off by {share - weight:+.2f} points); sessions with every "
        f"turn on one version: {one_version:.2f} %; sessions where their id's hash says: {as_hashed}/{len(first)}"
    )
    t.patch("split", {"canary": None})
    return abs(share - weight) <= 2 and one_version == 100 and errors == 0


async def rollback(t: Target, fault: str, clients: int, slow_s: float) -> tuple[bool, float | None]:
    t.patch("live", {"canary": {"appVersion": "1.1.0", "weight": 50}})
    probes = (f"probe-{uuid.uuid4().hex}" for _ in iter(int, 1))
    stop = False
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients + 1)) as http:

        async def traffic() -> None:
            while not stop:
                await t.turn(http, "live")

        async def canary_probe() -> str:
            sid = next(s for s in probes if on_canary(s, 50))
            return (await t.turn(http, "live", sid))[1]

        deadline = time.monotonic() + 60
        while await canary_probe() != "v2":  # the facade sees the canary
            assert time.monotonic() < deadline, "the canary never answered"
            await asyncio.sleep(0.2)
        runners = [asyncio.create_task(traffic()) for _ in range(clients)]
        await asyncio.sleep(5.0)  # healthy figures first
        FAULTS.tool_failing, FAULTS.slow_s = fault == "tool", slow_s if fault == "slow" else 0.0
        began = time.monotonic()
        back = None
        while time.monotonic() - began < 90:
            if await canary_probe() == "v1":
                back = time.monotonic() - began
                break
            await asyncio.sleep(0.25)
        stop = True
        await asyncio.gather(*runners)
    FAULTS.tool_failing, FAULTS.slow_s = False, 0.0
    status = t.spec("live").get("status") or {}
    reason = (status.get("canary") or {}).get("reason", "") if back is not None else ""
    shown = f"{back:.1f} s" if back is not None else "none within 90 s"
    print(f"rollback, fault {fault}: new sessions back on 1.0.0 {shown} after the fault began; reason: {reason}")
    if "canary" in t.spec("live")["spec"]:
        t.patch("live", {"canary": None})
    await asyncio.sleep(3.0)
    return back is not None and back <= 30, back


async def overhead(t: Target, calls: int, rounds: int, concurrency: int) -> tuple[bool, float]:
    """Each client alternates its calls between the environment without and the one with a canary, so both
    see the same load at the same moment (the machine is shared); the p50 of each over every round."""
    lat: dict[str, list[float]] = {"off": [], "on": []}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as http:
        for env in ("off", "on"):  # warm-up
            await asyncio.gather(*(t.turn(http, env) for _ in range(100)))
        for round_ in range(1, rounds + 1):
            left = calls
            mine: dict[str, list[float]] = {"off": [], "on": []}

            async def client_(index: int, mine: dict[str, list[float]] = mine) -> None:
                nonlocal left
                flip = index % 2
                while left > 0:
                    left -= 1
                    env = ("off", "on")[flip]
                    flip ^= 1
                    started = time.perf_counter()
                    await t.turn(http, env)
                    mine[env].append((time.perf_counter() - started) * 1000)

            await asyncio.gather(*(client_(i) for i in range(concurrency)))
            for env in ("off", "on"):
                lat[env] += mine[env]
            p50 = {env: percentile(mine[env], 50) for env in mine}
            print(f"overhead round {round_}: p50 off {p50['off']:.2f} ms, on {p50['on']:.2f} ms "
                  f"({len(mine['off'])} + {len(mine['on'])} turns, interleaved)")  # fmt: skip
    off, on = percentile(lat["off"], 50), percentile(lat["on"], 50)
    started = time.perf_counter()
    for i in range(100_000):
        on_canary(f"ses_{i:032x}", 50)
    split_us = (time.perf_counter() - started) * 10
    print(f"overhead: p50 over every round off {off:.2f} ms, on {on:.2f} ms: the canary adds {on - off:+.2f} ms; the "
          f"split itself (one BLAKE2b of the session id, at a session's creation) costs {split_us:.2f} us")  # fmt: skip
    return on - off <= 1.0, on - off


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="split,rollback,overhead")
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--weight", type=int, default=30)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--faults", default="tool,slow")
    parser.add_argument("--load", type=int, default=8, help="clients starting new sessions during a fault")
    parser.add_argument("--slow-s", type=float, default=1.5)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--keep", action="store_true", help="leave the benchmark's control plane running")
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    print(f"inputs: parts={','.join(sorted(parts))}, sessions={args.sessions}, turns={args.turns}, "
          f"weight={args.weight} %, concurrency={args.concurrency}, faults={args.faults}, load={args.load} clients, "
          f"slow={args.slow_s} s, SLO={SLO}, watcher every 1 s, overhead calls={args.calls} x rounds={args.rounds} at "
          f"model delay {args.delay_ms:g} ms, cpus={os.cpu_count()}, loadavg={load()}")  # fmt: skip
    cluster = bench_cluster("bench-canary", nodes_per_type=1)
    api = api_for(cluster)
    ns = namespace(api, "bench-canary")
    verdicts: list[str] = []
    extra = {"DOCKYARD_API_SLO_WATCH_SECONDS": "1", "DOCKYARD_API_SLO_LEASE_NAMESPACE": "default",
             "DOCKYARD_API_TURN_OUTCOMES_FLUSH_SECONDS": "0.5"}  # fmt: skip
    with (
        model_process(args.delay_ms) as fast_url,
        scripted_model() as scripted,
        database_url("sqlite", cluster) as database,
        operator_process(cluster),
        facade_process(cluster, database, extra=extra) as (url, _proc),
    ):
        scripted.respond_with(lambda body: answer(FAULTS, body))
        t = Target(url, ns, setup(api, ns, fast_url, scripted), api)
        for env in ("off", "on", "split", "live"):
            wait_until(lambda env=env: asyncio.run(_ok(t, env)), 90, f"bot-{env} answering")
        if "split" in parts:
            met = asyncio.run(split(t, args.sessions, args.turns, args.weight, args.concurrency))
            verdicts.append(f"split {'met' if met else 'NOT met'}")
        if "rollback" in parts:
            for fault in [f.strip() for f in args.faults.split(",") if f.strip()]:
                ok, _back = asyncio.run(rollback(t, fault, args.load, args.slow_s))
                verdicts.append(f"rollback ({fault}) <= 30 s {'met' if ok else 'NOT met'}")
        if "overhead" in parts:
            ok, added = asyncio.run(overhead(t, args.calls, args.rounds, args.concurrency))
            verdicts.append(f"canary overhead {added:+.2f} ms <= 1 ms {'met' if ok else 'NOT met'}")
    print(f"summary: {'; '.join(verdicts)} (loadavg {load()})")
    if not args.keep:
        cluster.down()


async def _ok(t: Target, env: str) -> bool:
    async with aiohttp.ClientSession() as http:
        return (await t.turn(http, env))[0] == 200


if __name__ == "__main__":
    main()
