"""Kubernetes API clients: from a kubeconfig file, or in-cluster from the ServiceAccount."""

from __future__ import annotations

from kubernetes import client, config


def api_client(kubeconfig: str = "") -> client.ApiClient:
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    config.load_incluster_config()
    return client.ApiClient()


def reachable(api: client.ApiClient) -> bool:
    try:
        client.VersionApi(api).get_code(_request_timeout=3)
    except Exception:
        return False
    return True
