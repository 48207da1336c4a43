"""Knowledge bases in the operator, pure parts: when an indexing run is wanted, its environment and Job, the
deletion guard's holders and the AppVersion's knowledge-base problems (each naming its field)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dockyard_core.resources.v1alpha1 import KB_LABEL, KB_REINDEX_ANNOTATION
from dockyard_operator.builders.knowledge import (
    IndexingSettings,
    indexing_job,
    needs_run,
    rebuild,
    run_environment,
    run_name,
    wanted_spec,
)
from dockyard_operator.knowledge_rules import kb_holders, kb_version_problems

SETTINGS = IndexingSettings(
    index_url="postgresql://kb@db/kb", files_dir="/var/lib/dockyard/models/knowledge/files",
    image="ghcr.io/dockyard-dev/dockyard:0.1.0", store_claim="dockyard-model-store",
    store_path="/var/lib/dockyard/models", service_account="dockyard-indexer", namespace="dockyard-system",
)  # fmt: skip


def _kb(generation: int = 1, status: dict[str, Any] | None = None, request: str = "") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "harbour-rules-1.0.0",
            "namespace": "shop",
            "uid": "u-1",
            "generation": generation,
            "annotations": {KB_REINDEX_ANNOTATION: request} if request else {},
        },
        "spec": {"name": "harbour-rules", "version": "1.0.0", "documents": [{"name": "a.md", "fileId": "a"}]},
        "status": status or {},
    }


def test_a_run_is_wanted_when_the_spec_or_a_reindex_request_moves_past_the_last_run() -> None:
    assert needs_run(_kb())  # never indexed
    done = {"phase": "Ready", "indexedSpec": "1/"}
    assert not needs_run(_kb(status=done))
    assert needs_run(_kb(generation=2, status=done))  # a document added or deleted
    assert not needs_run(_kb(generation=2, status={**done, "phase": "Indexing"}))  # one runs: wait for it
    assert needs_run(_kb(status=done, request="r1"))
    assert rebuild(_kb(status=done, request="r1"))
    assert not rebuild(_kb(generation=2, status={"indexedSpec": "1/r1"}, request="r1"))  # that request is done
    failed = {"phase": "Failed", "indexedSpec": "failed:1/"}
    assert not needs_run(_kb(status=failed))  # a failed run waits for the next change
    assert needs_run(_kb(generation=2, status=failed))


def test_the_run_environment_and_its_job() -> None:
    kb = _kb(request="r1", status={"indexedSpec": "1/"})
    env = run_environment(kb, SETTINGS, ("http://tiny-embed.shop.svc:8080", "tiny-embed"))
    assert env["DOCKYARD_KB_NAMESPACE"] == "shop"
    assert env["DOCKYARD_KB_NAME"] == "harbour-rules-1.0.0"
    assert env["DOCKYARD_KB_REBUILD"] == "1"
    assert env["DOCKYARD_KB_SPEC"] == wanted_spec(kb) == "1/r1"
    assert env["DOCKYARD_KB_EMBEDDING_URL"] == "http://tiny-embed.shop.svc:8080"
    job = indexing_job(kb, SETTINGS, env)
    assert job["metadata"]["name"] == run_name(kb) == env["DOCKYARD_KB_JOB"]
    assert len(job["metadata"]["name"]) <= 63
    assert "." not in job["metadata"]["name"]
    assert job["metadata"]["namespace"] == "dockyard-system"  # where the model store's claim is
    assert job["metadata"]["labels"][KB_LABEL] == "harbour-rules-1.0.0"
    assert job["metadata"]["labels"]["dockyard.dev/knowledge-base-namespace"] == "shop"
    assert "ownerReferences" not in job["metadata"]  # no owner across namespaces
    own = indexing_job(kb, replace(SETTINGS, namespace=""), env)
    assert own["metadata"]["namespace"] == "shop"
    assert own["metadata"]["ownerReferences"][0]["kind"] == "KnowledgeBase"
    assert job["spec"]["backoffLimit"] == 0
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["serviceAccountName"] == "dockyard-indexer"
    container = pod["containers"][0]
    assert container["image"] == "ghcr.io/dockyard-dev/dockyard:0.1.0"
    assert container["command"] == ["python", "-m", "dockyard_core.knowledge.job"]
    assert container["volumeMounts"] == [{"name": "model-store", "mountPath": "/var/lib/dockyard/models"}]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "dockyard-model-store"
    assert {"name": "DOCKYARD_KNOWLEDGE_INDEX", "value": "postgresql://kb@db/kb"} in container["env"]
    assert run_name(_kb(generation=2)) != run_name(_kb())  # each run its own Job


def _version(app: str, version: str, kbs: list[tuple[str, str]]) -> dict[str, Any]:
    return {"spec": {"appRef": app, "version": version,
                     "knowledgeBaseVersions": [{"name": n, "version": v} for n, v in kbs]}}  # fmt: skip


def test_the_deletion_guard_names_the_versions_and_environments_that_hold_it() -> None:
    versions = [_version("bot", "1.0.0", [("harbour-rules", "1.0.0")]), _version("bot", "2.0.0", [])]
    environments = [
        ("prod", {"spec": {"appRef": "bot", "appVersion": "1.0.0"}, "status": {"activeVersion": "1.0.0"}}),
        ("staging", {"spec": {"appRef": "bot", "appVersion": "2.0.0"}, "status": {"activeVersion": "2.0.0"}}),
    ]
    assert kb_holders("harbour-rules", "1.0.0", versions, environments) == {"bot-1.0.0": ["prod"]}
    assert kb_holders("harbour-rules", "1.1.0", versions, environments) == {}
    draft = {
        "metadata": {"name": "bot"},
        "spec": {"knowledgeBaseVersions": [{"name": "harbour-rules", "version": "1.1.0"}]},
    }
    served = [("draft", {"spec": {"appRef": "bot"}, "status": {"activeVersion": "draft"}})]
    assert kb_holders("harbour-rules", "1.1.0", [], served, [draft]) == {"draft of app bot": ["draft"]}


def test_an_app_version_pins_existing_knowledge_bases_for_every_agent() -> None:
    spec = {
        "agents": [{"name": "a", "knowledgeBases": ["harbour-rules", "fees"]}],
        "knowledgeBaseVersions": [{"name": "harbour-rules", "version": "1.0.0"}],
    }
    problems = {p.field: p.message for p in kb_version_problems(spec, {"harbour-rules-1.0.0": None})}
    assert "no version in spec.knowledgeBaseVersions" in problems["spec.agents[0].knowledgeBases[1]"]
    assert "no KnowledgeBase harbour-rules-1.0.0" in problems["spec.knowledgeBaseVersions[0]"]
    assert kb_version_problems({**spec, "agents": [{"name": "a", "knowledgeBases": ["harbour-rules"]}]},
                               {"harbour-rules-1.0.0": {"spec": {}}}) == []  # fmt: skip
