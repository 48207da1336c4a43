"""The SLO watcher's pass (api/dockyard_api/rollout/watcher.py) against the fake API server and a real
SQLite conversation store: a breaching canary is removed with the reason and figures as annotations, a
Warning Event and status.slo; a healthy one is left alone; a fresh deploy that breaches goes back to the
previous working version with deploy request AutoRollback."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dockyard_api.rollout.lease import Lease
from dockyard_api.rollout.watcher import SloWatcher
from dockyard_api.runtime.canary import Figures
from dockyard_api.store import ConversationStore
from dockyard_api.store.outcomes import OutcomeRecorder
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.resources.v1alpha1 import DEPLOY_REQUEST_ANNOTATION
from dockyard_core.resources.v1alpha1.canary import CANARY_REQUEST_ANNOTATION, ROLLOUT_FIGURES_ANNOTATION
from tests.support.fakekube import FakeKube, fake_kube

ENVS = "/apis/dockyard.dev/v1alpha1/namespaces/team/environments"
SLO = {"maxErrorRate": 0.2, "windowSeconds": 60, "minTurns": 5, "watchSeconds": 600}


class Snapshot:
    def __init__(self, fake: FakeKube) -> None:
        self.fake = fake

    def snapshot(self) -> list[dict[str, Any]]:
        return [json.loads(json.dumps(o)) for p, o in self.fake.objects.items() if p.startswith(ENVS)]


def _stamp(when: datetime) -> str:
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def test_a_pass_rolls_back_what_breaches_and_only_that(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    with fake_kube(tmp_path) as (fake, kubeconfig):
        since = _stamp(now - timedelta(minutes=1))
        running = {"version": "1.1.0", "weight": 50, "phase": "Running", "since": since, "summary": "1.1.0 50%"}
        canary = {"appRef": "bot", "appVersion": "1.0.0", "canary": {"appVersion": "1.1.0", "weight": 50}, "slo": SLO}
        env = {"apiVersion": "dockyard.dev/v1alpha1", "kind": "Environment"}
        fake.put(f"{ENVS}/bot-canary", {**env, "spec": canary, "status": {"canary": running}})
        fake.put(f"{ENVS}/bot-healthy", {**env, "spec": dict(canary)})
        history = [
            {"version": "1.1.0", "status": "Active", "action": "Deploy",
             "deployedAt": _stamp(now - timedelta(minutes=2))},
            {"version": "1.0.0", "status": "Previous", "action": "Deploy", "healthy": True,
             "deployedAt": _stamp(now - timedelta(days=1))},
        ]  # fmt: skip
        deployed = {"appRef": "bot", "appVersion": "1.1.0", "slo": SLO}
        fake.put(f"{ENVS}/bot-deploy", {**env, "spec": deployed, "status": {"history": history}})

        async def main() -> int:
            store = ConversationStore(f"sqlite:///{tmp_path / 'db' / 'dockyard.db'}")
            await store.start()
            kube = AsyncKube(kubeconfig)
            recorder = OutcomeRecorder(store, flush_seconds=60)
            figures = Figures(recorder)
            for env in ("bot-canary", "bot-healthy", "bot-deploy"):
                for i in range(10):
                    bad = env != "bot-healthy" and i % 2 == 0
                    version = "1.0.0" if env == "bot-healthy" and i % 2 else "1.1.0"
                    figures.turn(namespace="team", environment=env, version=version, seconds=0.1,
                                 outcome="model_error" if bad else "ok", tokens=(1, 1))  # fmt: skip
            await recorder.flush()
            lease = Lease(kube, "default", "w", "me")
            watcher = SloWatcher(kube, store, Snapshot(fake), lease)
            try:
                assert await lease.hold()  # created: this replica holds it
                return await watcher.check_all()
            finally:
                await recorder.aclose()
                await store.close()
                await kube.aclose()

        assert asyncio.run(main()) == 2
        canary = fake.get(f"{ENVS}/bot-canary")
        assert canary is not None
        assert "canary" not in canary["spec"]
        notes = canary["metadata"]["annotations"]
        assert notes[CANARY_REQUEST_ANNOTATION].startswith("RolledBack ")
        assert json.loads(notes[ROLLOUT_FIGURES_ANNOTATION])["errorRate"] == 0.5
        assert "error rate 50.0%" in canary["status"]["slo"]["lastBreach"]
        healthy = fake.get(f"{ENVS}/bot-healthy")
        assert healthy is not None
        assert healthy["spec"]["canary"]["weight"] == 50
        assert healthy["status"]["slo"]["watching"] == "canary 1.1.0"
        deploy = fake.get(f"{ENVS}/bot-deploy")
        assert deploy is not None
        assert deploy["spec"]["appVersion"] == "1.0.0"
        assert deploy["metadata"]["annotations"][DEPLOY_REQUEST_ANNOTATION].startswith("AutoRollback ")
        events = [o for p, o in fake.objects.items() if "/events/" in p]
        assert sorted(e["reason"] for e in events) == ["AutomaticRollback", "CanaryRolledBack"]
        assert all(e["type"] == "Warning" for e in events)
