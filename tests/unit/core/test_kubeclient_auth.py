"""The async client authenticates with a bearer token wherever the kubernetes package keeps it: a
kubeconfig user's token and, in a pod, the service account's token (the in-cluster test bed found the
facade calling TokenReview as system:anonymous: the token was looked up under the wrong key)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes.config import incluster_config

from dockyard_core.kubeclient import AsyncKube


def test_a_kubeconfig_token_is_sent(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "tok-123"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    assert AsyncKube(str(kubeconfig))._auth_headers() == [("Authorization", "Bearer tok-123")]


def test_the_service_account_token_is_sent_in_a_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token, ca = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("sa-token-456")
    ca.write_text("not read by this test")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config: the in-cluster configuration
    monkeypatch.setattr("dockyard_core.kubeclient._ssl_context", lambda conf: None)
    kube = AsyncKube()
    assert kube._base == "https://10.96.0.1:443"
    assert kube._auth_headers() == [("Authorization", "bearer sa-token-456")]
