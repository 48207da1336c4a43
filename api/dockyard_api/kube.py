"""Kubernetes client construction shared by the facade (and anything else that is not kopf)."""

from __future__ import annotations

import os

from kubernetes import client, config


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """An ApiClient from an explicit kubeconfig, ``$KUBECONFIG``, ``~/.kube/config`` or in-cluster."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path or os.path.exists(os.path.expanduser("~/.kube/config")):
        api: client.ApiClient = config.new_client_from_config(config_file=path)
        return api
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)
