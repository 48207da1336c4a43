"""No input makes the facade answer 5xx: schemathesis generates requests from the facade's own OpenAPI
document and sends them to a REAL facade on the local control plane.

Valid credentials are injected (an API key of the environment in the path, a Kubernetes token of a
user who may do everything in the namespace), and the namespace and environment path parameters are
pinned, so that requests pass authentication and reach validation and the handlers. Half of the cases
also pin the modelId / toolId to objects that exist, so valid bodies go all the way to the API server.
Positive (schema-conforming) and negative (schema-violating) data both run. The run is bounded: a
fixed number of examples per operation and a time budget.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from kubernetes import client
from schemathesis import GenerationMode

from dockyard_api.settings import ApiSettings
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create
from tests.support.public import PublicEnvironment, environment_with_key, ready_model_status
from tests.support.runners import RunningFacade, run_facade

PUBLIC_EXAMPLES = 160
"""Examples per public operation and generation mode (3 operations x 2 modes)."""
MANAGEMENT_EXAMPLES = 25
"""Examples per management operation and generation mode."""
BUDGET_SECONDS = 420.0
"""Stop generating after this long (a slow machine sends fewer requests; the count is asserted)."""
MIN_REQUESTS = 1000
MODEL = "fuzz-model"
TOOL = "fuzz-tool-1.0.0"
SCRATCH_ENVIRONMENT = "bot-scratch"


@dataclass
class Findings:
    requests: int = 0
    by_status: dict[int, int] = field(default_factory=dict)
    server_errors: list[str] = field(default_factory=list)
    unsatisfiable: list[str] = field(default_factory=list)
    detail: dict[tuple[str, str, int], int] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def out_of_time(self) -> bool:
        return time.monotonic() - self.started > BUDGET_SECONDS


@dataclass(frozen=True)
class Target:
    facade: RunningFacade
    env: PublicEnvironment
    token: str


@pytest.fixture(scope="module")
def target(cluster: E2ECluster, api: client.ApiClient, crds: None) -> Iterator[Target]:
    namespace = f"t-fuzz-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    create(api, namespace, "models", "Model", MODEL, {"source": {"hub": {"id": "acme/fuzz"}}})
    ready_model_status(api, namespace, MODEL)  # no operator in this module: what it writes for a hub model
    create(api, namespace, "tools", "Tool", TOOL,
           {"name": "fuzz-tool", "version": "1.0.0", "endpoint": "http://127.0.0.1:9/tool"})  # fmt: skip
    env = environment_with_key(api, namespace)
    create(api, namespace, "environments", "Environment", SCRATCH_ENVIRONMENT, {"appRef": env.app})
    # a user who may do everything in this namespace (RBAC still decides: the facade impersonates it)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "fuzzer"}})
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "fuzzer-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "fuzzer", "namespace": namespace}],
        },
    )
    token = subprocess.run(
        [cluster.kubectl, "--kubeconfig", str(cluster.kubeconfig), "create", "token", "fuzzer", "-n", namespace],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # no operator runs here: a synchronous tool deploy waits only this long before answering IN_PROGRESS
    with run_facade(ApiSettings(sync_deploy_timeout_seconds=0.2)) as facade:
        yield Target(facade, env, token)
    with contextlib.suppress(client.ApiException):
        core.delete_namespace(namespace)


def _run_operation(operation: Any, mode: GenerationMode, examples: int, target: Target, findings: Findings) -> None:
    env = target.env
    if "/api/public/" in operation.path:
        pinned = {"namespace": env.namespace, "environment": env.environment}
        existing = {**pinned, "modelId": MODEL, "toolId": TOOL}
    else:  # management calls may delete what they name: give them an environment of their own
        pinned = {"namespace": env.namespace}
        existing = {**pinned, "app": env.app, "environment": SCRATCH_ENVIRONMENT}
    headers = {"x-api-key": env.key, "Authorization": f"Bearer {target.token}"}
    strategy = st.one_of(
        operation.as_strategy(generation_mode=mode, path_parameters=pinned, headers=headers),
        operation.as_strategy(generation_mode=mode, path_parameters=existing, headers=headers),
    )

    @given(case=strategy)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    def run(case: Any) -> None:
        if findings.out_of_time():
            return
        response = case.call(base_url=target.facade.url, timeout=30)
        findings.requests += 1
        findings.by_status[response.status_code] = findings.by_status.get(response.status_code, 0) + 1
        key = (mode.value, operation.label, response.status_code)
        findings.detail[key] = findings.detail.get(key, 0) + 1
        if response.status_code >= 500:
            findings.server_errors.append(
                f"{response.status_code} {response.text[:300]}\n  {case.as_curl_command(base_url=target.facade.url)}"
            )

    try:
        run()
    except Unsatisfiable:  # negative mode with nothing left to break once path and headers are pinned
        findings.unsatisfiable.append(f"{mode.value} {operation.label}")


@pytest.mark.timeout(int(BUDGET_SECONDS) + 180)
def test_no_generated_request_gets_a_server_error(target: Target) -> None:
    schema = schemathesis.openapi.from_url(f"{target.facade.url}/openapi.json")
    findings = Findings()
    operations = [result.ok() for result in schema.get_all_operations()]
    public = [op for op in operations if "/api/public/" in op.path]
    assert {op.path.rsplit("/api/public/", 1)[1] for op in public} >= {
        "models/{modelId}/deploy",
        "tools/{toolId}/deploy",
        "dock-status/{dock_status_id}",
    }
    management = [op for op in operations if op not in public and op.path not in ("/healthz", "/readyz")]
    for operations_of_a_kind, examples in ((public, PUBLIC_EXAMPLES), (management, MANAGEMENT_EXAMPLES)):
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for operation in operations_of_a_kind:
                _run_operation(operation, mode, examples, target, findings)
    summary = (
        f"{findings.requests} requests in {time.monotonic() - findings.started:.0f}s, by status {findings.by_status}"
    )
    print(summary)
    for (mode, label, status), count in sorted(findings.detail.items()):
        print(f"  {mode:8} {label:90} {status} x{count}")
    assert not findings.server_errors, "\n".join([summary, *findings.server_errors[:20]])
    assert findings.requests >= MIN_REQUESTS, summary
    # the requests got past authentication: most public ones were validated or handled
    assert sum(n for status, n in findings.by_status.items() if status not in (401, 403)) > findings.requests // 2
