"""The OpenAPI document (served at /openapi.json, rendered at /docs) documents every public endpoint with
SPEC.md's sample bodies as request examples and job records as response examples."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from dockyard_api.app import ENVIRONMENT_PREFIX, create_app
from dockyard_api.public.schemas import MODEL_DEPLOY_SAMPLE, JobRecord, ModelDeployBody, ToolDeployBody

PUBLIC = f"{ENVIRONMENT_PREFIX}/api/public"
MODEL_DEPLOY = f"{PUBLIC}/models/{{modelId}}/deploy"
TOOL_DEPLOY = f"{PUBLIC}/tools/{{toolId}}/deploy"
DOCK_STATUS = f"{PUBLIC}/dock-status/{{dock_status_id}}"
JOB_KEYS = {"dockStatusId", "dock-statusId", "jobType", "action", "status"}


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    client = TestClient(create_app())  # no lifespan: the documents need no cluster
    served = client.get("/openapi.json")
    assert served.status_code == 200
    docs = client.get("/docs")
    assert docs.status_code == 200
    assert "openapi.json" in docs.text
    body: dict[str, Any] = served.json()
    return body


def response_examples(operation: dict[str, Any]) -> list[dict[str, Any]]:
    content = operation["responses"]["200"]["content"]["application/json"]
    if "examples" in content:
        return [e["value"] for e in content["examples"].values()]
    return [content["example"]]


def request_examples(operation: dict[str, Any]) -> list[Any]:
    return [e["value"] for e in operation["requestBody"]["content"]["application/json"]["examples"].values()]


def test_every_public_endpoint_is_documented(document: dict[str, Any]) -> None:
    public = {path for path in document["paths"] if "/api/public/" in path}
    assert public >= {MODEL_DEPLOY, TOOL_DEPLOY, DOCK_STATUS}
    for path in public:
        for method, operation in document["paths"][path].items():
            assert operation.get("summary"), (method, path)
            names = {p["name"] for p in operation["parameters"]}
            assert "x-api-key" in names, path  # SPEC: the public APIs authenticate with x-api-key
            for status in ("401", "403", "404", "422"):
                assert status in operation["responses"], (path, status)
            assert response_examples(operation), path


def test_model_deploy_documents_the_spec_sample_and_its_parameters(document: dict[str, Any]) -> None:
    operation = document["paths"][MODEL_DEPLOY]["post"]
    examples = request_examples(operation)
    assert MODEL_DEPLOY_SAMPLE in examples
    sample = next(e for e in examples if e == MODEL_DEPLOY_SAMPLE)
    assert sample["optimizationInfo"] == {"optimizationType": "", "quantizationType": ""}
    for example in examples:
        ModelDeployBody.model_validate(example)  # every documented body is accepted
    params = {p["name"]: p for p in operation["parameters"]}
    assert params["modelId"]["in"] == "path"
    assert (params["modelType"]["in"], params["modelType"]["required"]) == ("query", True)
    assert set(params["modelType"]["schema"]["enum"]) == {"openSource", "fineTune"}
    body_schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body_schema["$ref"].endswith("/ModelDeployBody")
    schema = document["components"]["schemas"]["ModelDeployBody"]
    assert set(schema["required"]) == {"name", "deviceType"}
    assert "isDeployedPreviously" in schema["properties"]
    assert "404" in schema["properties"]["isDeployedPreviously"]["description"]
    (record,) = response_examples(operation)
    assert set(record) >= JOB_KEYS
    assert (record["jobType"], record["action"], record["status"]) == ("MODELS", "DEPLOY", "IN_PROGRESS")
    assert record["dockStatusId"] == record["dock-statusId"]
    assert "modelId" in record
    JobRecord.model_validate(record)


def test_tool_deploy_documents_sync_and_async(document: dict[str, Any]) -> None:
    operation = document["paths"][TOOL_DEPLOY]["post"]
    assert {"isAsync": False} in request_examples(operation)
    assert {"isAsync": True} in request_examples(operation)
    for example in request_examples(operation):
        ToolDeployBody.model_validate(example)
    records = response_examples(operation)
    assert {r["status"] for r in records} == {"SUCCESS", "IN_PROGRESS", "FAILED"}
    for record in records:
        assert JOB_KEYS | {"toolId"} <= set(record)
        assert (record["jobType"], record["action"]) == ("TOOLS", "DEPLOY")
        assert record["dockStatusId"] == record["dock-statusId"]
        JobRecord.model_validate(record)
    assert "DOCKYARD_API_SYNC_DEPLOY_TIMEOUT_SECONDS" in operation["description"]
    schema = document["components"]["schemas"]["ToolDeployBody"]
    assert schema["required"] == ["isAsync"]


def test_dock_status_documents_the_job_record(document: dict[str, Any]) -> None:
    operation = document["paths"][DOCK_STATUS]["get"]
    (record,) = response_examples(operation)
    assert JOB_KEYS | {"reason", "message"} <= set(record)
    JobRecord.model_validate(record)


def test_every_documented_job_record_is_what_the_one_model_answers(document: dict[str, Any]) -> None:
    """One JobRecord answers the import completion, both deploys and the dock-status lookup: each documented
    record goes through it unchanged (both id spellings, no member added or dropped)."""
    paths = document["paths"]
    operations = [
        paths[MODEL_DEPLOY]["post"],
        paths[TOOL_DEPLOY]["post"],
        paths[DOCK_STATUS]["get"],
        paths[f"{PUBLIC}/files/session/{{sessionId}}/complete"]["post"],
    ]
    for operation in operations:
        for record in response_examples(operation):
            assert JobRecord.model_validate(record).wire() == record
    only_id = JobRecord.model_validate({"dockStatusId": "j", "modelId": "m", "jobType": "MODELS", "action": "EXPORT",
                                        "status": "IN_PROGRESS"})  # fmt: skip
    assert only_id.wire()["dock-statusId"] == "j"


def test_the_deploy_name_is_documented_as_any_text(document: dict[str, Any]) -> None:
    operation = document["paths"][MODEL_DEPLOY]["post"]
    assert {"name": "Llama 3 8B", "deviceType": "g5.xlarge"} in request_examples(operation)
    name = document["components"]["schemas"]["ModelDeployBody"]["properties"]["name"]
    assert (name["type"], name["minLength"], name["maxLength"]) == ("string", 1, 253)
    assert "pattern" not in name  # not a DNS label: the object's name is derived from it
    assert "any text" in name["description"]
    (record,) = response_examples(operation)
    assert (record["name"], record["deploymentName"]) == ("llama-3-8b-instruct", "llama-3-8b-instruct")
    assert "name" in document["components"]["schemas"]["JobRecord"]["properties"]
