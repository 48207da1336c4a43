"""``make run``'s console user: a dockyard-editor in the demo namespace, nothing elsewhere, and a sign-in
link whose token stays in the URL fragment."""

from __future__ import annotations

import copy
import uuid

from kubernetes import client

from dockyard_localcluster.cluster import LocalCluster
from dockyard_localcluster.consoleuser import ACCOUNT, ensure_console_user
from tests.support.cluster import E2ECluster


def test_console_user_is_an_editor_of_its_namespace_only(
    cluster: E2ECluster, crds: None, api: client.ApiClient, namespace: str
) -> None:
    local = LocalCluster()
    user = ensure_console_user(local, namespace, hours=1)
    assert user.username == f"system:serviceaccount:{namespace}:{ACCOUNT}"
    link = user.signin_link("http://127.0.0.1:8080")
    assert link.startswith("http://127.0.0.1:8080/console/signin#token=")  # a fragment: never sent to a server
    assert link.endswith(f"&namespace={namespace}")

    # the token alone (no client certificate): what may this user do?
    settings = copy.copy(api.configuration)
    settings.cert_file = settings.key_file = None
    settings.api_key = {"authorization": f"Bearer {user.token}"}
    as_user = client.AuthorizationV1Api(client.ApiClient(settings))

    def can(verb: str, group: str, resource: str, ns: str) -> bool:
        review = {"spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource, "namespace": ns}}}
        return bool(as_user.create_self_subject_access_review(review).status.allowed)

    assert can("create", "dockyard.dev", "appversions", namespace)
    assert can("patch", "dockyard.dev", "environments", namespace)
    assert not can("create", "dockyard.dev", "appversions", f"elsewhere-{uuid.uuid4().hex[:6]}")
    assert not can("get", "", "secrets", namespace)  # keys are the facade's business, not the user's
    again = ensure_console_user(local, namespace, hours=1)  # make run again: idempotent
    assert again.username == user.username
