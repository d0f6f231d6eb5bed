"""Issue 20: DEPLOY=chart's real Node `host-0` runs Pods from Tandem's image as a cluster would.

A Pod on it runs (containerd, runc, the CNI bridge), its log is readable through the apiserver
(which dials the kubelet on the node IP with its own client certificate), a ClusterIP Service to
it answers from the host (kube-proxy's rules and the Service range routed into the lab bridge:
what the Slurm prologs on the host rely on), and its Service name resolves inside another Pod
(CoreDNS on the node IP, the kubelet's clusterDNS). Runs only on a DEPLOY=chart stack (marked
`chart` so that stack selects it, `real_node` so every other one skips it).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from devstack import kube, realnode
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.chart, pytest.mark.real_node]


def _pod(image: str, name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    key, value = realnode.LABEL
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {key: value},
            "tolerations": [{"key": key, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [
                # No registry: the image was imported into containerd by `make up`.
                {"name": "main", "image": image, "imagePullPolicy": "Never", "command": command}
            ],
            **spec,
        },
    }


def test_a_pod_on_the_real_node_serves_behind_a_service_and_its_name_resolves(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    image = realnode.tandem_image(stack_cfg)
    ns = h.unique("real-node")
    kube.ensure_namespace(core, ns)
    try:
        web = _pod(image, "web", ["sh", "-c", "echo serving; exec python3 -m http.server 8080"])
        web["spec"]["containers"][0]["readinessProbe"] = {
            "httpGet": {"path": "/", "port": 8080},
            "periodSeconds": 1,
        }
        core.create_namespaced_pod(ns, web)
        service = core.create_namespaced_service(
            ns,
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "web"},
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
            },
        )

        pod = h.wait_until("the web Pod Ready", lambda: _ready(core, "web", ns), 60)
        assert (pod.spec.node_name, pod.status.phase) == (realnode.NODE, "Running")
        assert pod.status.pod_ip.startswith("10.88.0.")
        # kube-proxy programs the endpoint a moment after the Pod is Ready: retried.
        url = f"http://{service.spec.cluster_ip}/"
        h.wait_until(f"{url} from the host", lambda: httpx.get(url, timeout=2).status_code == 200, 20)
        log = core.read_namespaced_pod_log("web", ns)
        assert log.startswith("serving") and '"GET / HTTP/1.1" 200' in log

        # The image's entry point runs as its own user; then the Service's names, short and full.
        lookup = (
            "import socket; print(socket.gethostbyname('web'), "
            f"socket.gethostbyname('web.{ns}.svc.cluster.local'))"
        )
        core.create_namespaced_pod(
            ns,
            _pod(
                image,
                "lookup",
                ["sh", "-c", f'tandem-scheduler --help > /dev/null && python3 -c "{lookup}"'],
                restartPolicy="Never",
            ),
        )
        h.wait_until("the lookup Pod done", lambda: _phase(core, "lookup", ns) in ("Succeeded", "Failed"), 60)
        answer = core.read_namespaced_pod_log("lookup", ns).strip()
        assert _phase(core, "lookup", ns) == "Succeeded", answer
        assert answer == f"{service.spec.cluster_ip} {service.spec.cluster_ip}"
    finally:
        core.delete_namespace(ns)


def _ready(core: k8s.CoreV1Api, name: str, ns: str) -> k8s.V1Pod | None:
    pod = core.read_namespaced_pod(name, ns)
    ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
    return pod if ready else None


def _phase(core: k8s.CoreV1Api, name: str, ns: str) -> str:
    return str(core.read_namespaced_pod(name, ns).status.phase)
