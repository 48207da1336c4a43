"""Environments' pure logic: history, URLs and cURL script, tool deployments, checklist, audit record,
and the dependency checks of the admission webhooks."""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime, timedelta

from dockyard_core import audit
from dockyard_core.resources.v1alpha1 import ChecklistItem, HistoryEntry
from dockyard_operator import environments as envs

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
ENV = {
    "metadata": {"name": "bot-prod", "namespace": "team", "uid": "0123456789"},
    "spec": {"appRef": "bot", "appVersion": "1.0.0"},
}


def test_history_adds_one_active_entry_per_deployment_and_is_idempotent() -> None:
    first = envs.next_history([], "1.0.0", T0, "alice")
    assert [(h.version, h.status, h.deployed_by) for h in first] == [("1.0.0", "Active", "alice")]
    assert envs.next_history(first, "1.0.0", T0, "alice") is first  # the same deployment: unchanged
    second = envs.next_history(first, "1.1.0", T0 + timedelta(minutes=1), "bob")
    assert [(h.version, h.status) for h in second] == [("1.1.0", "Active"), ("1.0.0", "Previous")]
    rollback = envs.next_history(second, "1.0.0", T0 + timedelta(minutes=2), "alice")
    assert [(h.version, h.status) for h in rollback] == [
        ("1.0.0", "Active"),
        ("1.1.0", "Previous"),
        ("1.0.0", "Previous"),
    ]
    # redeploying the same version later is a new deployment too
    again = envs.next_history(rollback, "1.0.0", T0 + timedelta(minutes=3), "carol")
    assert len(again) == 4


def test_history_is_capped() -> None:
    history: list[HistoryEntry] = []
    for i in range(envs.HISTORY_LIMIT + 5):
        history = envs.next_history(history, f"1.0.{i}", T0 + timedelta(seconds=i), "ci")
    assert len(history) == envs.HISTORY_LIMIT
    assert history[0].version == f"1.0.{envs.HISTORY_LIMIT + 4}"


def test_urls_and_curl_script_are_the_environments_own() -> None:
    urls = envs.urls("https://dockyard.example.com/", "team", "bot-prod")
    assert urls.api_base == "https://dockyard.example.com/e/team/bot-prod"
    assert urls.widget_script == "https://dockyard.example.com/e/team/bot-prod/v1/loader.js"
    script = envs.curl_script(urls.api_base, "bot")
    args = shlex.split(script.replace("\\\n", " "))
    assert args[:4] == ["curl", "-sS", "-X", "POST"]
    assert args[4] == "https://dockyard.example.com/e/team/bot-prod/v1/apps/bot/execute"
    body = json.loads(args[args.index("-d") + 1])
    assert set(body) == {"message", "session_id", "metadata"}
    assert "Authorization: Bearer $DOCKYARD_API_KEY" in args


def test_one_tool_deployment_per_tool_version_owned_by_the_environment() -> None:
    content = {"toolVersions": [{"name": "weather", "version": "1.2.0"}, {"name": "search", "version": "0.1.0"}]}
    made = envs.tool_deployments(ENV, content)
    assert [(t["metadata"]["name"], t["spec"]["toolRef"]) for t in made] == [
        ("bot-prod-weather-1-2-0", "weather-1.2.0"),
        ("bot-prod-search-0-1-0", "search-0.1.0"),
    ]
    assert all(t["metadata"]["ownerReferences"][0]["uid"] == "0123456789" for t in made)
    long = envs.tool_deployment_name("e" * 40, "t" * 30, "10.20.30")
    assert len(long) <= 63
    assert long == envs.tool_deployment_name("e" * 40, "t" * 30, "10.20.30")  # stable


def test_checklist_is_computed_where_the_cluster_knows() -> None:
    items = envs.checklist(content={}, tool_jobs={"a": "SUCCESS", "b": "IN_PROGRESS"}, key_count=0, version_found=True)
    states = {i.item: i.state for i in items}
    assert states["Tools deployed and tested"] == "NotDone"
    assert states["API keys generated"] == "NotDone"
    assert states["Guardrails enabled"] == "NotDone"  # computed: tests/unit/operator/test_checklist_safeguards.py
    assert {i.category for i in items} == {"Configuration", "Testing", "Security", "Monitoring"}
    done = envs.checklist(content={}, tool_jobs={}, key_count=2, version_found=True)
    states = {i.item: i.state for i in done}
    assert states["Tools deployed and tested"] == "Done"  # the version uses no tools: nothing to deploy or test
    assert states["API keys generated"] == "Done"


def test_every_item_not_computed_yet_says_what_would_compute_it() -> None:
    """Manual is never a shrug: each item Dockyard cannot compute yet names what would compute it (the
    Security item that stays Manual says why in its own words)."""
    items = envs.checklist(content={"agents": [{"name": "a"}]}, tool_jobs={}, key_count=1, version_found=True)
    manual = {i.item: i.detail for i in items if i.state == "Manual"}
    assert set(manual) == set(envs.MANUAL) | {"Access controls"}
    assert not {"Guardrails enabled", "PII protection configured", "Sensitive data protected"} & set(manual)
    for name, detail in envs.MANUAL.items():
        assert manual[name] == detail
        assert detail.startswith("not computed yet: ")
        assert "would compute it; until then check by hand" in detail


def item(items: list[ChecklistItem], name: str) -> tuple[str, str]:
    found = next(i for i in items if i.item == name)
    return found.state, found.detail


def _test(tool: str, target: str, revision: str = "", **over: object) -> dict[str, object]:
    record = {"environment": "bot-prod", "tool": tool, "appVersion": "1.0.0", "target": target}
    return {**record, "revision": revision, "passed": True, "at": "2026-01-01T00:00:00Z", **over}


def test_tools_are_tested_only_by_a_passing_test_call_against_the_current_deployment() -> None:
    """Deployed is not tested: the item is Done only when every tool of the version (HTTP tools, the MCP
    tools agents name, each MCP server none of whose tools are named) has a passing recorded test call in
    this environment against its current deployment; otherwise the detail names what is untested."""
    content = {
        "toolVersions": [{"name": "weather", "version": "1.0.0"}, {"name": "search", "version": "2.1.0"}],
        "agents": [{"name": "a", "mcpTools": ["docs/lookup"]}],
        "mcpServers": [{"name": "docs", "url": "http://docs/mcp"}, {"name": "wiki", "url": "http://wiki/mcp"}],
    }
    deployed = {"bot-prod-weather-1-0-0": "SUCCESS", "bot-prod-search-2-1-0": "SUCCESS"}
    revisions = {"bot-prod-weather-1-0-0": "u1", "bot-prod-search-2-1-0": "u2"}

    def judged(tests: list[dict[str, object]], jobs: dict[str, str | None] = deployed) -> tuple[str, str]:
        tested = envs.ToolTesting("bot-prod", "1.0.0", tests, revisions)
        items = envs.checklist(content=content, tool_jobs=jobs, key_count=1, version_found=True, tested=tested)
        return item(items, "Tools deployed and tested")

    state, detail = judged([])
    assert state == "NotDone"
    assert detail == (
        "no passing test call against the current deployment: weather 1.0.0, search 2.1.0, docs/lookup, "
        f"MCP server wiki (any of its tools) ({envs.TEST_HOW})"
    )
    passing = [
        _test("weather", "bot-prod-weather-1-0-0", "u1"),
        _test("search", "bot-prod-search-2-1-0", "u2"),
        _test("docs/lookup", "http://docs/mcp"),
        _test("wiki/anything", "http://wiki/mcp"),
    ]
    assert judged(passing)[0] == "Done"
    assert judged([{**passing[0], "revision": "u1/2"}, *passing[1:]])[0] == "Done"  # scaled: the same tool
    # each of these makes one tool untested again
    stale = [
        ("weather 1.0.0", 0, {**passing[0], "revision": "old/1"}),  # a deployment since deleted
        ("search 2.1.0", 1, {**passing[1], "passed": False, "error": "HTTP 500"}),
        ("search 2.1.0", 1, {**passing[1], "appVersion": "0.9.0"}),  # another version
        ("search 2.1.0", 1, {**passing[1], "environment": "bot-staging"}),  # another environment
        ("docs/lookup", 2, {**passing[2], "tool": "docs/other"}),  # a named tool: that one, not any
        ("MCP server wiki (any of its tools)", 3, {**passing[3], "target": "http://old-wiki/mcp"}),
    ]
    for label, index, replaced in stale:
        tests = [replaced if n == index else t for n, t in enumerate(passing)]
        state, detail = judged(tests)
        assert (state, detail) == ("NotDone", f"no passing test call against the current deployment: {label} "
                                   f"({envs.TEST_HOW})"), replaced  # fmt: skip
    rolling = {**deployed, "bot-prod-search-2-1-0": "IN_PROGRESS"}
    state, detail = judged(passing, rolling)
    assert (state, detail) == ("NotDone", "not deployed (not SUCCESS): bot-prod-search-2-1-0")
    many = {"toolVersions": [{"name": f"tool-{n}-" + "x" * 50, "version": "10.10.10"} for n in range(64)]}
    state, detail = item(envs.checklist(content=many, tool_jobs={}, key_count=1, version_found=True),
                         "Tools deployed and tested")  # fmt: skip
    assert state == "NotDone"
    assert "and 58 more" in detail
    assert len(detail) <= 1024


def test_dependency_checks_name_versions_and_environments() -> None:
    versions = [
        {"spec": {"appRef": "bot", "version": "1.0.0", "toolVersions": [{"name": "weather", "version": "1.2.0"}]}},
        {"spec": {"appRef": "bot", "version": "2.0.0", "toolVersions": [{"name": "weather", "version": "2.0.0"}]}},
    ]
    environments = [
        ("bot-prod", {"spec": {"appRef": "bot", "appVersion": "1.0.0"}, "status": {"activeVersion": "1.0.0"}}),
        ("bot-staging", {"spec": {"appRef": "bot", "appVersion": "2.0.0"}, "status": {"activeVersion": "1.0.0"}}),
        ("other", {"spec": {"appRef": "other", "appVersion": "1.0.0"}}),
    ]
    assert envs.environments_deploying("bot", "1.0.0", environments) == ["bot-prod", "bot-staging"]
    assert envs.tool_holders("weather", "1.2.0", versions, environments) == {"bot-1.0.0": ["bot-prod", "bot-staging"]}
    assert envs.tool_holders("weather", "9.9.9", versions, environments) == {}


def test_a_tool_used_by_the_draft_that_the_draft_environment_serves_is_held() -> None:
    draft = {"metadata": {"name": "bot"}, "spec": {"toolVersions": [{"name": "weather", "version": "3.0.0"}]}}
    environments = [
        ("bot-draft", {"spec": {"appRef": "bot"}, "status": {"activeVersion": "draft"}}),
        ("bot-prod", {"spec": {"appRef": "bot", "appVersion": "1.0.0"}, "status": {"activeVersion": "1.0.0"}}),
    ]
    assert envs.tool_holders("weather", "3.0.0", [], environments, [draft]) == {"draft of app bot": ["bot-draft"]}
    assert envs.tool_holders("weather", "3.0.0", [], environments[1:], [draft]) == {}  # no environment serves it
    assert envs.tool_holders("weather", "1.2.0", [], environments, [draft]) == {}


def test_audit_record_and_deletion_stamp_share_a_name_but_not_keys() -> None:
    env = {**ENV, "status": {"history": [{"version": "1.0.0"}]}}
    record = audit.audit_record(env, [{"name": "ci"}])
    stamp = audit.deletion_record(ENV["metadata"], "bot", T0, "alice")
    assert record["metadata"]["name"] == stamp["metadata"]["name"] == "bot-prod-audit-01234567"
    assert "ownerReferences" not in record["metadata"]  # it outlives the environment
    assert set(record["data"]) == {"environment.json", "history.json", "usage.json"}
    assert set(stamp["data"]) == {"deletion.json"}
    assert json.loads(stamp["data"]["deletion.json"])["deletedBy"] == "alice"
    assert json.loads(record["data"]["usage.json"])["deployments"] == 1


def test_each_history_entry_says_what_was_asked_and_whether_it_became_healthy() -> None:
    first = envs.record_health(envs.next_history([], "1.0.0", T0, "alice", "Deploy"), "1.0.0", "Deploying")
    assert (first[0].action, first[0].healthy) == ("Deploy", None)  # still being deployed
    first = envs.record_health(first, "1.0.0", "Active")
    assert first[0].healthy is True
    assert envs.record_health(first, "1.0.0", "Failed")[0].healthy is True  # it did serve: stays true
    broken = envs.record_health(envs.next_history(first, "1.1.0", T0 + timedelta(minutes=1), "bob"), "1.1.0", "Failed")
    assert [(h.version, h.status, h.healthy) for h in broken] == [
        ("1.1.0", "Active", False),
        ("1.0.0", "Previous", True),
    ]
    # a deployment replaced before it became healthy is recorded as not healthy
    pending = envs.next_history(broken, "1.2.0", T0 + timedelta(minutes=2), "bob")
    replaced = envs.next_history(pending, "1.0.0", T0 + timedelta(minutes=3), "alice", "Rollback")
    assert [(h.version, h.action, h.healthy) for h in replaced] == [
        ("1.0.0", "Rollback", None),
        ("1.2.0", "Deploy", False),
        ("1.1.0", "Deploy", False),
        ("1.0.0", "Deploy", True),
    ]
    redeploy = envs.next_history(replaced, "1.0.0", T0 + timedelta(minutes=4), "carol", "Redeploy")
    assert (redeploy[0].action, redeploy[0].status, redeploy[1].status) == ("Redeploy", "Active", "Previous")


def test_the_webhook_stamps_a_redeploy_and_a_rollback_and_keeps_the_record_otherwise() -> None:
    from dockyard_core.resources.v1alpha1 import DEPLOY_ACTION_ANNOTATION, DEPLOY_REQUEST_ANNOTATION
    from dockyard_operator.admission import deployment_stamp

    def env(version: str, request: str | None = None) -> dict[str, object]:
        notes = {DEPLOY_REQUEST_ANNOTATION: request} if request else {}
        return {"metadata": {"annotations": notes}, "spec": {"appVersion": version}}

    def stamp(old: dict, new: dict) -> dict:  # type: ignore[type-arg]
        return deployment_stamp(operation="UPDATE", old=old, body=new, notes=new["metadata"]["annotations"],
                                old_notes=old["metadata"]["annotations"], username="alice", now=T0)  # fmt: skip

    assert stamp(env("1.0.0"), env("1.1.0", "Deploy a"))[DEPLOY_ACTION_ANNOTATION] == "Deploy"
    assert stamp(env("1.0.0"), env("1.1.0"))[DEPLOY_ACTION_ANNOTATION] == "Deploy"  # kubectl edit
    assert stamp(env("1.0.0", "Deploy a"), env("1.0.0", "Redeploy b"))[DEPLOY_ACTION_ANNOTATION] == "Redeploy"
    assert stamp(env("1.1.0", "Deploy a"), env("1.0.0", "Rollback b"))[DEPLOY_ACTION_ANNOTATION] == "Rollback"
    assert stamp(env("1.0.0", "Deploy a"), env("1.0.0", "Deploy a")) == {}  # nothing asked: nothing stamped
