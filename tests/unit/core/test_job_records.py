"""The public job record of an object (dockyard_core.jobs.JobRecord.of): what the dock-status lookup answers."""

from __future__ import annotations

from typing import Any

from dockyard_core.jobs import NOT_REPORTED, PENDING, JobRecord
from dockyard_core.resources.v1alpha1 import ModelDeployment


def mdep(status: dict[str, object] | None = None) -> ModelDeployment:
    return ModelDeployment.model_validate(
        {
            "kind": "ModelDeployment",
            "metadata": {"name": "chat", "namespace": "team", "labels": {"dockyard.dev/dock-status-id": "job-1"}},
            "spec": {"modelRef": "llama", "modelType": "openSource", "name": "chat", "deviceType": "g5.xlarge"},
            "status": status or {},
        }
    )


def record(obj: ModelDeployment) -> dict[str, Any]:
    return JobRecord.of(obj).wire()


def test_a_labelled_object_whose_status_has_no_job_yet_is_pending() -> None:
    out = record(mdep())
    assert (out["dockStatusId"], out["dock-statusId"], out["modelId"]) == ("job-1", "job-1", "llama")
    assert (out["status"], out["reason"], out["message"]) == ("IN_PROGRESS", PENDING, NOT_REPORTED)
    assert (out["jobType"], out["action"], out["deploymentName"]) == ("MODELS", "DEPLOY", "chat")
    assert out["startTime"] is None


def test_the_status_job_is_the_record() -> None:
    job = {
        "dockStatusId": "job-1", "jobType": "MODELS", "action": "DEPLOY", "status": "SUCCESS", "reason": "Available",
        "message": "1 replica(s) ready and serving", "startTime": "2026-11-23T19:08:41Z",
        "completionTime": "2026-11-23T19:08:42Z", "generation": 1, "templateHash": "h",
    }  # fmt: skip
    out = record(mdep({"job": job}))
    assert (out["status"], out["reason"], out["message"]) == ("SUCCESS", "Available", "1 replica(s) ready and serving")
    assert (out["startTime"], out["completionTime"]) == ("2026-11-23T19:08:41Z", "2026-11-23T19:08:42Z")


def test_a_model_deployment_record_names_both_the_object_and_the_deploy_calls_name() -> None:
    obj = mdep()
    obj.metadata.name = "llama-3-8b-0f3a9c1d"
    obj.spec.name = "Llama 3 8B"
    out = record(obj)
    assert (out["deploymentName"], out["name"]) == ("llama-3-8b-0f3a9c1d", "Llama 3 8B")
    assert JobRecord.of(obj).pending("job-2", "requested").wire()["name"] == "Llama 3 8B"
