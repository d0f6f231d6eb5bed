"""PodGroups are read in whichever version the apiserver serves (issue 21): Kubernetes 1.37 serves
scheduling.k8s.io/v1beta1 (and v1alpha3), 1.36 only v1alpha2. Before, the scheduler read v1alpha2
only, so on 1.37 no gang was ever seen and each member was placed alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tandem import keys
from tandem.discovery import Versioned
from tandem.informer import Informer
from tandem.kube import JSON, KubeError

PODGROUPS = Versioned(keys.PODGROUP_GROUP, keys.PODGROUP_RESOURCE, keys.PODGROUP_VERSIONS)


def _resources(*names: str) -> JSON:
    return {"kind": "APIResourceList", "resources": [{"name": n} for n in names]}


class FakeApi:
    """An apiserver's discovery and one PodGroup list, as a Kubernetes release serves them."""

    def __init__(self, served: Mapping[str, JSON]) -> None:
        self.served = dict(served)
        self.gets: list[str] = []

    def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
        self.gets.append(path)
        version = path.split("/")[3]
        if version not in self.served:
            raise KubeError(404, "NotFound", "the server could not find the requested resource")
        if path.endswith("/podgroups"):
            return {
                "apiVersion": f"scheduling.k8s.io/{version}",
                "kind": "PodGroupList",
                "metadata": {"resourceVersion": "7"},
                "items": [{"metadata": {"name": "train", "namespace": "default", "resourceVersion": "5"}}],
            }
        return self.served[version]

    def watch(self, path: str, params: Mapping[str, str]) -> Iterator[JSON]:
        threading.Event().wait(0.05)
        return iter(())


KUBERNETES_1_37 = {
    "v1": _resources("priorityclasses"),
    "v1beta1": _resources("podgroups", "podgroups/status", "workloads"),
    "v1alpha3": _resources("compositepodgroups", "podgroups", "workloads"),
}
KUBERNETES_1_36 = {"v1": _resources("priorityclasses"), "v1alpha2": _resources("podgroups", "workloads")}


@pytest.mark.parametrize(
    ("served", "expected"),
    [
        (KUBERNETES_1_37, "scheduling.k8s.io/v1beta1"),
        (KUBERNETES_1_36, "scheduling.k8s.io/v1alpha2"),
        # A release that serves v1beta1 for something else (PriorityClass, long ago) only.
        (
            {"v1beta1": _resources("priorityclasses"), "v1alpha2": _resources("podgroups")},
            "scheduling.k8s.io/v1alpha2",
        ),
        ({"v1": _resources("priorityclasses")}, None),
    ],
)
def test_the_newest_version_that_serves_podgroups_is_chosen(
    served: dict[str, JSON], expected: str | None
) -> None:
    assert PODGROUPS.served(FakeApi(served)) == expected  # type: ignore[arg-type]


def test_a_discovery_that_fails_otherwise_than_not_found_is_raised() -> None:
    class Down(FakeApi):
        def get(self, path: str, params: Mapping[str, str] | None = None) -> JSON:
            raise KubeError(503, "ServiceUnavailable", "etcd is restarting")

    with pytest.raises(KubeError):
        PODGROUPS.served(Down({}))  # type: ignore[arg-type]


def _synced_informer(api: FakeApi) -> Informer:
    informer = Informer(api, ["/apis/{api}/podgroups"], {}, api=PODGROUPS)  # type: ignore[arg-type]
    stop = threading.Event()
    informer.start(stop)
    try:
        assert informer.wait_synced(5)
        deadline = time.monotonic() + 0.5
        while not informer.items() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
    return informer


@pytest.mark.parametrize("served", [KUBERNETES_1_37, KUBERNETES_1_36])
def test_the_informer_lists_podgroups_in_the_served_version_and_names_it(served: dict[str, Any]) -> None:
    api = FakeApi(served)
    informer = _synced_informer(api)
    (podgroup,) = informer.items()
    version = PODGROUPS.served(api)  # type: ignore[arg-type]
    assert f"/apis/{version}/podgroups" in api.gets
    # Each object names its apiVersion and kind: the status write and the Events use them.
    assert (podgroup["apiVersion"], podgroup["kind"]) == (version, "PodGroup")


def test_a_cluster_that_serves_no_podgroups_counts_as_synced_and_empty() -> None:
    informer = _synced_informer(FakeApi({"v1": _resources("priorityclasses")}))
    assert informer.synced and informer.items() == []
