"""The scheduler's ResourceClaim writes: each guarded by what was read."""

from __future__ import annotations

from typing import Any
from unittest import mock

from tandem import keys
from tandem.dra.allocation import FINALIZER
from tandem.kube import KubeError
from tandem.scheduler.claimwrites import ClaimApi, claim_path
from tandem.scheduler.gpuclaims import ClaimWrite

POD = {"metadata": {"namespace": "team-a", "name": "infer", "uid": "pod-uid"}}


def _claim(finalizers: list[str]) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "team-a",
            "name": "infer-gpu",
            "uid": "claim-uid",
            "resourceVersion": "5",
            "finalizers": finalizers,
        }
    }


def test_a_claim_path_names_the_served_dra_version() -> None:
    collection = f"/apis/{keys.DRA_GROUP}/{keys.DRA_VERSIONS[0]}/namespaces/team-a/{keys.RESOURCE_CLAIMS}"
    assert claim_path("team-a") == collection
    assert claim_path("team-a", "infer-gpu") == f"{collection}/infer-gpu"


def test_an_allocation_writes_the_finalizer_then_the_status_each_at_the_version_read() -> None:
    kube = mock.Mock()
    kube.json_patch.return_value = {"metadata": {"resourceVersion": "6"}}
    write = ClaimWrite(_claim(["other"]), {"allocation": {}}, ("gpu-0",))
    ClaimApi(kube).allocate(POD, (write,))
    path = claim_path("team-a", "infer-gpu")
    kube.json_patch.assert_called_once_with(
        path,
        [
            {"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
            {"op": "add", "path": "/metadata/finalizers", "value": ["other", FINALIZER]},
        ],
    )
    kube.merge_patch.assert_called_once_with(
        f"{path}/status", {"metadata": {"resourceVersion": "6"}, "status": {"allocation": {}}}
    )


def test_a_stale_claim_loses_its_finalizer_then_goes_and_one_gone_already_is_no_error() -> None:
    kube = mock.Mock()
    kube.delete.side_effect = KubeError(404, "NotFound", "gone")
    ClaimApi(kube).drop(_claim(["other", FINALIZER]), "placed elsewhere")
    (path, patch), _ = kube.json_patch.call_args
    assert path == claim_path("team-a", "infer-gpu")
    assert patch[0] == {"op": "test", "path": "/metadata/uid", "value": "claim-uid"}
    assert patch[1]["value"] == ["other"]
    kube.delete.assert_called_once_with(path, {"preconditions": {"uid": "claim-uid"}})
