"""Recorded tool test calls: the newest per environment and tool is kept, the list is bounded."""

from __future__ import annotations

from dockyard_core import tooltests


def test_a_record_replaces_the_earlier_one_of_its_environment_and_tool_and_the_list_is_bounded() -> None:
    first = {"environment": "bot-prod", "tool": "weather", "passed": False}
    other_env = {"environment": "bot-staging", "tool": "weather", "passed": True}
    tests = tooltests.with_record([], first)
    tests = tooltests.with_record(tests, other_env)
    newer = {"environment": "bot-prod", "tool": "weather", "passed": True}
    assert tooltests.with_record(tests, newer) == [newer, other_env]
    many: list[dict[str, object]] = []
    for n in range(10):
        many = tooltests.with_record(many, {"environment": "e", "tool": f"t{n}"}, limit=4)
    assert [t["tool"] for t in many] == ["t9", "t8", "t7", "t6"]


def test_revision_and_short_error() -> None:
    assert tooltests.revision({"metadata": {"uid": "abc", "generation": 3}}) == "abc"
    assert tooltests.revision(None) == ""
    assert tooltests.short_error("a\n  b") == "a b"
    assert len(tooltests.short_error("x" * 2000)) == tooltests.ERROR_LIMIT


def test_a_test_counts_for_its_tool_deployment_whatever_its_generation() -> None:
    """Scaling a ToolDeployment (a new generation, the same immutable tool) keeps its tools tested; a
    recreated one (a new uid) does not; records written as <uid>/<generation> still count."""
    want = tooltests.Wanted("weather 1.0.0", "weather", "bot-draft-weather-1-0-0", "u1")
    record = {"passed": True, "environment": "bot-draft", "appVersion": "", "target": "bot-draft-weather-1-0-0"}
    assert want.met_by({**record, "tool": "weather", "revision": "u1"}, "bot-draft", "")
    assert want.met_by({**record, "tool": "weather", "revision": "u1/1"}, "bot-draft", "")
    assert not want.met_by({**record, "tool": "weather", "revision": "u2"}, "bot-draft", "")
    assert not want.met_by({**record, "tool": "weather", "revision": "u1", "passed": False}, "bot-draft", "")
