"""Kubernetes client construction shared by the facade (and anything else that is not kopf)."""

from __future__ import annotations

import os

from kubernetes import client, config


def load_configuration(kubeconfig: str | None = None) -> client.Configuration:
    """Client configuration from an explicit kubeconfig, ``$KUBECONFIG``, ``~/.kube/config`` or in-cluster."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    configuration = client.Configuration()
    if path or os.path.exists(os.path.expanduser("~/.kube/config")):
        config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    return configuration


def api_client(kubeconfig: str | None = None, pool_size: int = 32) -> client.ApiClient:
    """An ApiClient (see :func:`load_configuration`) with ``pool_size`` connections (the library's
    default of 4 serialises concurrent callers)."""
    configuration = load_configuration(kubeconfig)
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)
