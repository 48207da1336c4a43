"""What the conversation store shows outside: the usage endpoint of the management API, the 429/503
answers in the JSON error shape, the usage summary on the Environment's status, spec.rateLimits in
the CRD schema and the checklist item computed from it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi import FastAPI
from fastapi.testclient import TestClient

from dockyard_api.errors import install_error_handlers
from dockyard_api.store import ConversationStore
from dockyard_api.store.summary import write_summaries
from dockyard_core.errors import DatabaseUnavailableError, RateLimitedError
from dockyard_core.kubeclient import KubeError
from dockyard_core.resources.v1alpha1 import Environment, UsageSummary
from dockyard_operator import environments as envs
from tests.support.conversations import counted_request
from tests.support.usage_api import FakeAuth, sqlite_store, usage_client

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ConversationStore]:
    yield from sqlite_store(tmp_path)


def test_usage_endpoint_reads_per_day_and_key_and_checks_rbac(store: ConversationStore) -> None:
    async def record() -> None:
        await counted_request(store, namespace="shop", environment="bot-prod", key_id="k1", ok=True, tokens_in=5,
                              tokens_out=7)  # fmt: skip
        await counted_request(store, namespace="shop", environment="bot-prod", key_id="k2", ok=False, tokens_in=1,
                              tokens_out=0)  # fmt: skip

    # the store runs on its own event loop in this test: a fresh engine connection per loop
    asyncio.run(record())
    auth = FakeAuth()
    client = usage_client(store, auth)
    answer = client.get("/api/v1/namespaces/shop/environments/bot-prod/usage")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    today = datetime.now(UTC).date()
    assert body["from"] == (today - timedelta(days=29)).isoformat()
    assert body["to"] == today.isoformat()
    assert body["totals"] == {"requests": 2, "errors": 1, "rateLimited": 0, "tokensIn": 6, "tokensOut": 7}
    assert [k["keyId"] for k in body["keys"]] == ["k1", "k2"]
    assert auth.asked == [{"verb": "get", "namespace": "shop", "resource": "environments"}]

    assert (
        client.get("/api/v1/namespaces/shop/environments/bot-prod/usage?from=2020-01-01&to=2020-01-02").json()[
            "totals"
        ]["requests"]
        == 0
    )
    bad = client.get("/api/v1/namespaces/shop/environments/bot-prod/usage?from=2020-02-01&to=2020-01-01")
    assert bad.status_code == 422
    assert bad.json()["error"]["code"] == "invalid"
    assert (
        client.get("/api/v1/namespaces/shop/environments/bot-prod/usage?from=2020-01-01&to=2022-01-01").status_code
        == 422
    )
    assert client.get("/api/v1/namespaces/shop/environments/bot-prod/usage?from=yesterday").status_code == 422
    # found by schemathesis: a "to" so early that the default "from" (29 days before) is before year 1
    early = client.get("/api/v1/namespaces/shop/environments/bot-prod/usage?to=0001-01-01")
    assert early.status_code == 422, early.text

    auth.allowed = False
    refused = client.get("/api/v1/namespaces/shop/environments/bot-prod/usage")
    assert refused.status_code == 403
    assert "cannot get environments" in refused.json()["error"]["message"]


def test_usage_endpoint_without_database_is_503(store: ConversationStore) -> None:
    asyncio.run(store.close())
    store._ready = False
    client = usage_client(store, FakeAuth())
    answer = client.get("/api/v1/namespaces/shop/environments/bot-prod/usage")
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "database_unavailable"
    assert answer.headers["Retry-After"] == "5"


def test_429_and_503_are_json_errors_with_retry_after() -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/limited")
    async def limited() -> None:
        raise RateLimitedError("over the limit", {"limit": "requestsPerMinute"}, retry_after=17)

    @app.get("/down")
    async def down() -> None:
        raise DatabaseUnavailableError("the conversation database is unavailable: ConnectionRefusedError")

    client = TestClient(app)
    answer = client.get("/limited")
    assert answer.status_code == 429
    assert answer.headers["Retry-After"] == "17"
    assert answer.json() == {
        "error": {"code": "rate_limited", "message": "over the limit", "details": {"limit": "requestsPerMinute"}}
    }
    answer = client.get("/down")
    assert answer.status_code == 503
    assert answer.json()["error"]["message"].endswith("ConnectionRefusedError")


class RecordingKube:
    """Records the status patches; environments named in ``gone`` answer 404 like deleted ones."""

    def __init__(self, gone: set[str]) -> None:
        self.gone = gone
        self.patches: list[tuple[str, Any]] = []

    async def request(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        if any(f"/{g}/" in path for g in self.gone):
            raise KubeError(404, "Not Found", "environments.dockyard.dev not found")
        self.patches.append((path, kw["json"]))
        return {}


def test_usage_summary_is_written_to_used_environments_status(tmp_path: Path) -> None:
    async def main() -> None:
        store = ConversationStore(f"sqlite:///{tmp_path / 'dockyard.db'}")
        await store.start()
        before = datetime.now(UTC) - timedelta(seconds=1)
        await counted_request(store, namespace="shop", environment="bot-prod", key_id="k1", ok=True, tokens_in=5,
                              tokens_out=7)  # fmt: skip
        await counted_request(store, namespace="shop", environment="deleted", key_id="k1", ok=True, tokens_in=5,
                              tokens_out=7)  # fmt: skip
        kube = RecordingKube(gone={"deleted"})
        assert await write_summaries(store, kube, before) == 1  # type: ignore[arg-type]
        [(path, patch)] = kube.patches
        assert path == "/apis/dockyard.dev/v1alpha1/namespaces/shop/environments/bot-prod/status"
        summary = UsageSummary.model_validate(patch["status"]["usage"])  # the CRD's schema for status.usage
        assert summary.today.requests == 1
        assert summary.today.tokens_out == 7
        assert summary.last30_days.tokens_in == 5
        kube.patches.clear()
        assert await write_summaries(store, kube, datetime.now(UTC)) == 0  # nothing used since: no API call
        assert kube.patches == []
        await store.close()

    asyncio.run(main())


def test_rate_limits_are_schema_validated_in_the_crd() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "dockyard.dev_environments.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    limits = spec["rateLimits"]["properties"]
    assert limits["requestsPerMinute"]["minimum"] == 1
    assert limits["tokensPerDay"]["minimum"] == 1
    assert limits["requestsPerMinute"]["type"] == "integer"
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Environment.model_validate(
            {"metadata": {"name": "e"}, "spec": {"appRef": "bot", "rateLimits": {"requestsPerMinute": 0}}}
        )
    with pytest.raises(ValueError, match="Extra inputs"):
        Environment.model_validate({"metadata": {"name": "e"}, "spec": {"appRef": "bot", "rateLimits": {"perHour": 5}}})


def test_checklist_rate_limits_item_is_computed_from_the_spec() -> None:
    def state(rate_limits: dict[str, Any] | None) -> tuple[str, str]:
        items = envs.checklist(content={}, tool_jobs={}, key_count=1, version_found=True, rate_limits=rate_limits)
        [item] = [i for i in items if i.item == "Rate limits set"]
        assert item.category == "Security"
        return item.state, item.detail

    assert state(None)[0] == "NotDone"
    assert state({})[0] == "NotDone"
    done, detail = state({"requestsPerMinute": 60, "tokensPerDay": 100000})
    assert done == "Done"
    assert detail == "spec.rateLimits: 60 requests per minute per API key, 100000 tokens per day"
    assert state({"tokensPerDay": 5}) == ("Done", "spec.rateLimits: 5 tokens per day")
