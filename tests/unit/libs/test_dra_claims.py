"""A Pod's GPU ResourceClaims -> the GRES its placeholder job asks for, or a refusal naming the field:
only what a GRES can say is translated, every other claim shape is refused, never approximated."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.dra.claims import (
    MAX_CEL_LENGTH,
    ClaimRequest,
    DraConfig,
    parse_product_types,
    parse_selector,
    pod_gpus,
)

H100 = "NVIDIA H100 80GB HBM3"
CFG = DraConfig(product_types={H100: "h100", "NVIDIA A100-SXM4-80GB": "a100"})
PRODUCT = f'device.attributes["gpu.nvidia.com"].productName == "{H100}"'


def request(
    count: Any = 1,
    device_class: str = "gpu.nvidia.com",
    selectors: list[str] | None = None,
    name: str = "gpus",
    **more: Any,
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count, **more}
    if selectors is not None:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": exactly}


def shares(n: Any) -> dict[str, Any]:
    return {"requests": {"shares": n}}


def claim_spec(*requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {"devices": {"requests": list(requests), **devices}}


def template(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "t"}, "spec": {"spec": spec}}


def claim(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "c"}, "spec": spec, "status": status or {}}


def pod(
    entries: list[dict[str, Any]],
    statuses: list[dict[str, Any]] | None = None,
    container_resources: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "p", "uid": "pod-uid"},
        "spec": {
            "resourceClaims": entries,
            "containers": [{"name": "c", "resources": container_resources or {}}],
        },
        "status": {"resourceClaimStatuses": statuses or []},
    }


def from_template(spec: dict[str, Any], generated: str = "p-gpus-x7k2q") -> Any:
    return pod_gpus(
        pod(
            [{"name": "gpus", "resourceClaimTemplateName": "t"}],
            [{"name": "gpus", "resourceClaimName": generated}] if generated else [],
        ),
        claims={},
        templates={"t": template(spec)},
        cfg=CFG,
    )


@pytest.mark.parametrize(
    ("spec", "count", "gres_type", "kind"),
    [
        (claim_spec(request(2, selectors=[PRODUCT])), 2, "h100", "gpu"),
        (claim_spec(request(1)), 1, "", "gpu"),
        # count defaults to 1, as the API server defaults it.
        (claim_spec({"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}}), 1, "", "gpu"),
        (
            claim_spec(
                request(
                    4,
                    selectors=[
                        "device.driver == 'gpu.nvidia.com' && "
                        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-80GB'",
                        "device.attributes['gpu.nvidia.com'].type == 'gpu'",
                    ],
                    allocationMode="ExactCount",
                )
            ),
            4,
            "a100",
            "gpu",
        ),
        (
            claim_spec(
                request(
                    1,
                    "mig.nvidia.com",
                    ['device.attributes["gpu.nvidia.com"].profile == "1g.10gb"', PRODUCT],
                )
            ),
            1,
            "1g.10gb",
            "mig",
        ),
        # A selector as YAML's block scalar leaves it: across lines.
        (claim_spec(request(1, selectors=[f"\n  {PRODUCT}\n  "])), 1, "h100", "gpu"),
    ],
)
def test_a_claim_slurm_can_allocate(spec: dict[str, Any], count: int, gres_type: str, kind: str) -> None:
    got = from_template(spec)
    assert got.ok, got.message()
    assert (got.count, got.gres_type) == (count, gres_type)
    assert got.requests == (
        ClaimRequest(
            pod_claim="gpus",
            claim_name="p-gpus-x7k2q",
            request="gpus",
            device_class="mig.nvidia.com" if kind == "mig" else "gpu.nvidia.com",
            kind=kind,
            count=count,
            gres_type=gres_type,
        ),
    )


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (claim_spec(), "asks for no device"),
        (claim_spec(request(1), request(1, name="more")), "2 requests in one claim"),
        (
            claim_spec(request(2), constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}]),
            "constraints are not translated",
        ),
        (
            claim_spec(
                {"name": "gpus", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}]}
            ),
            "firstAvailable",
        ),
        (claim_spec({"name": "gpus"}), "has no exactly request"),
        (
            claim_spec(request(1, "nic.example.com")),
            "'nic.example.com' is not gpu.nvidia.com or mig.nvidia.com",
        ),
        (claim_spec(request(1, "vfio.gpu.nvidia.com")), "is not gpu.nvidia.com"),
        (claim_spec(request(1, allocationMode="All")), "All: Slurm allocates an exact count"),
        (claim_spec(request(1, adminAccess=True)), "admin access"),
        (
            claim_spec(request(1, capacity={"requests": {"memory": "10Gi"}})),
            "'memory': only 'shares' (Slurm's shards of a GPU) and 'mps' (its MPS share) are translated",
        ),
        (claim_spec(request(1, capacity={"requests": {}})), "asks for no capacity"),
        (claim_spec(request(2, capacity=shares(4))), "2 GPUs' shares in one request: Slurm gives a job's"),
        (claim_spec(request(1, capacity=shares("4.5"))), "'4.5' is not a whole number of shares"),
        (claim_spec(request(1, capacity=shares("1k"))), "'1k' is not a whole number of shares"),
        (claim_spec(request(1, capacity=shares(0))), "0 is not a whole number of shares from 1"),
        (claim_spec(request(1, capacity=shares(True))), "True is not a whole number"),
        (
            claim_spec(
                request(
                    1,
                    "mig.nvidia.com",
                    ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"],
                    capacity=shares(2),
                )
            ),
            "shares are of a whole GPU (gpu.nvidia.com), not of a MIG slice",
        ),
        (claim_spec(request(0)), "0 is not a count from 1 to 32"),
        (claim_spec(request(-1)), "is not a count"),
        (claim_spec(request(33)), "33 is not a count from 1 to 32"),
        (claim_spec(request("2")), "'2' is not a count"),
        (claim_spec(request(True)), "True is not a count"),
        # Selectors: unknown shapes refused with what is translated.
        (
            claim_spec(
                request(
                    1, selectors=['device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0']
                )
            ),
            "capacity (memory) selectors are not translated",
        ),
        (claim_spec(request(1, selectors=[f"{PRODUCT} || true"])), "not a selector Tandem translates"),
        (claim_spec(request(1, selectors=[f"!({PRODUCT})"])), "not a selector Tandem translates"),
        (claim_spec(request(1, selectors=[f"{PRODUCT} &&"])), "not a selector Tandem translates"),
        (claim_spec(request(1, selectors=[""])), "not a selector Tandem translates"),
        (
            claim_spec(request(1, selectors=['device.attributes["gpu.nvidia.com"].productName != "x"'])),
            "not a selector Tandem translates",
        ),
        (
            claim_spec(request(1, selectors=['device.attributes["gpu.nvidia.com"].productName == "a\\"b"'])),
            "not a selector Tandem translates",
        ),
        (
            claim_spec(
                request(1, selectors=['device.attributes["gpu.nvidia.com"].architecture == "Hopper"'])
            ),
            "selecting on 'architecture' is not translated",
        ),
        (
            claim_spec(
                request(1, selectors=['device.attributes["resource.kubernetes.io"].pcieRoot == "pci0"'])
            ),
            "attributes of 'resource.kubernetes.io' are not translated",
        ),
        (claim_spec(request(1, selectors=["device.driver == 'gpu.example.com'"])), "is not 'gpu.nvidia.com'"),
        (
            claim_spec(request(1, selectors=[PRODUCT.replace(H100, "NVIDIA B200")])),
            "product 'NVIDIA B200' maps to no Slurm GRES type"
            " (known: NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3)",
        ),
        (
            claim_spec(request(1, selectors=[PRODUCT, PRODUCT.replace(H100, "NVIDIA A100-SXM4-80GB")])),
            "productName must equal both",
        ),
        (
            claim_spec(request(1, selectors=["device.attributes['gpu.nvidia.com'].type == 'mig'"])),
            "selects type 'mig', but its class selects 'gpu' devices",
        ),
        (claim_spec(request(1, "mig.nvidia.com", [PRODUCT])), "a MIG request must select its profile"),
        (
            claim_spec(request(1, selectors=["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"])),
            "its class is gpu.nvidia.com (use mig.nvidia.com)",
        ),
        (
            claim_spec(
                request(1, "mig.nvidia.com", ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb+me'"])
            ),
            "MIG profile '1g.10gb+me' maps to no Slurm GRES type",
        ),
        (claim_spec(request(1, selectors=[PRODUCT] * 33)), "33 selectors, more than 32"),
        (claim_spec({"name": "gpus", "exactly": {**request(1)["exactly"], "selectors": [{}]}}), "not a CEL"),
    ],
)
def test_a_claim_slurm_cannot_allocate_is_refused_with_why(spec: dict[str, Any], says: str) -> None:
    got = from_template(spec)
    assert not got.ok
    assert says in got.message()
    assert got.message().startswith("ResourceClaimTemplate t")


@pytest.mark.parametrize(
    ("expression", "parsed"),
    [
        (PRODUCT, [("productName", H100)]),
        (
            f'device.driver == "gpu.nvidia.com"&&{PRODUCT}',
            [("driver", "gpu.nvidia.com"), ("productName", H100)],
        ),
        ("device.attributes['gpu.nvidia.com'].profile=='3g.40gb'", [("profile", "3g.40gb")]),
    ],
)
def test_selector_forms_read(expression: str, parsed: list[tuple[str, str]]) -> None:
    assert parse_selector(expression) == parsed


@pytest.mark.parametrize(
    "expression",
    [
        "x" * (MAX_CEL_LENGTH + 1),
        PRODUCT + " && " * 5000,
        'device.attributes["gpu.nvidia.com"].productName == "' + "x" * 65 + '"',
        "device.attributes[\"gpu.nvidia.com'].productName == 'x'",
        'device.attributes["gpu.nvidia.com"].productName == "a\x00b"',
        'device.attributes["gpu.nvidia.com"].productName == "H100" && "x" == "x"',
        "device.driver in ['gpu.nvidia.com']",
    ],
)
def test_hostile_selectors_are_refused_not_guessed(expression: str) -> None:
    assert isinstance(parse_selector(expression), str)


def test_a_long_selector_is_refused_in_time_linear_in_its_length() -> None:
    # A selector at Kubernetes' bound made of clauses: read once, clause by clause.
    clause = "device.driver == 'gpu.nvidia.com' && "
    expression = (clause * (MAX_CEL_LENGTH // len(clause)))[: MAX_CEL_LENGTH - 40] + PRODUCT[:30]
    assert isinstance(parse_selector(expression), str)


def test_a_named_claim_is_read_from_the_cache() -> None:
    spec = claim_spec(request(2, selectors=[PRODUCT]))
    got = pod_gpus(pod([{"name": "gpus", "resourceClaimName": "c"}]), {"c": claim(spec)}, {}, CFG)
    assert got.ok and got.requests[0].claim_name == "c" and got.count == 2


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (
            {"reservedFor": [{"resource": "pods", "name": "other", "uid": "other-uid"}]},
            "reserved for other consumers",
        ),
        ({"allocation": {"devices": {"results": []}}}, "allocated already, not by Tandem"),
    ],
)
def test_a_claim_another_pod_holds_is_refused(status: dict[str, Any], says: str) -> None:
    spec = claim_spec(request(1))
    got = pod_gpus(pod([{"name": "gpus", "resourceClaimName": "c"}]), {"c": claim(spec, status)}, {}, CFG)
    assert says in got.message()


def test_a_claim_already_reserved_for_this_pod_is_its_own() -> None:
    # After a crash between the allocation write and the bind, the claim is the Pod's already.
    status = {
        "allocation": {"devices": {"results": []}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}],
    }
    got = pod_gpus(
        pod([{"name": "gpus", "resourceClaimName": "c"}]),
        {"c": claim(claim_spec(request(1)), status)},
        {},
        CFG,
    )
    assert got.ok


def test_claims_not_yet_in_the_cache_wait() -> None:
    got = pod_gpus(
        pod([{"name": "a", "resourceClaimName": "c"}, {"name": "b", "resourceClaimTemplateName": "t"}]),
        {},
        {},
        CFG,
    )
    assert not got.ok and not got.refusals
    assert got.waiting == ("ResourceClaim c", "ResourceClaimTemplate t")


def test_a_template_claim_not_yet_made_has_no_name() -> None:
    got = from_template(claim_spec(request(1)), generated="")
    assert got.ok and got.requests[0].claim_name == ""


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ([{"name": "gpus"}], "names neither or both"),
        ([{"name": "gpus", "resourceClaimName": "c", "resourceClaimTemplateName": "t"}], "neither or both"),
        ([{"name": f"c{i}", "resourceClaimName": "c"} for i in range(33)], "33 claims, more than 32"),
    ],
)
def test_malformed_pod_claim_entries(entries: list[dict[str, Any]], says: str) -> None:
    got = pod_gpus(pod(entries), {"c": claim(claim_spec(request(1)))}, {}, CFG)
    assert says in got.message()


def test_pod_without_claims_asks_for_nothing() -> None:
    got = pod_gpus({"spec": {}}, {}, {}, CFG)
    assert got.ok and got.count == 0 and got.requests == ()


def two_claims(first: dict[str, Any], second: dict[str, Any], **pod_args: Any) -> Any:
    return pod_gpus(
        pod([{"name": "a", "resourceClaimName": "a"}, {"name": "b", "resourceClaimName": "b"}], **pod_args),
        {"a": claim(claim_spec(first)), "b": claim(claim_spec(second))},
        {},
        CFG,
    )


def test_several_claims_of_one_type_add_up() -> None:
    got = two_claims(request(2, selectors=[PRODUCT]), request(1))
    assert got.ok and (got.count, got.gres_type) == (3, "h100")
    assert [r.pod_claim for r in got.requests] == ["a", "b"]


@pytest.mark.parametrize(
    ("first", "second", "says"),
    [
        (
            request(1, selectors=[PRODUCT]),
            request(1, selectors=[PRODUCT.replace(H100, "NVIDIA A100-SXM4-80GB")]),
            "types a100, h100",
        ),
        (
            request(1),
            request(1, "mig.nvidia.com", ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]),
            "whole GPUs and MIG slices",
        ),
        (request(32), request(1), "more than 32 devices"),
    ],
)
def test_claims_one_job_cannot_ask_for_together(
    first: dict[str, Any], second: dict[str, Any], says: str
) -> None:
    assert says in two_claims(first, second).message()


def test_a_claim_for_shares_of_a_gpu_asks_slurm_for_shards() -> None:
    got = from_template(claim_spec(request(1, selectors=[PRODUCT], capacity=shares("4"))))
    assert got.ok and (got.shares, got.count, got.gres_type) == (4, 0, "h100")
    assert not got.needs_whole_type  # shards name their GPUs' type only when the claim does


def test_shares_of_several_claims_add_up_on_one_gpu() -> None:
    got = two_claims(request(1, capacity=shares(4)), request(1, capacity=shares(2)))
    assert got.ok and (got.shares, got.count) == (6, 0)


def test_shares_and_whole_devices_in_one_pod_are_refused() -> None:
    got = two_claims(request(1, capacity=shares(4)), request(1))
    assert "asks for whole devices and for shares of a GPU" in got.message()


def mps(n: Any) -> dict[str, Any]:
    return {"requests": {"mps": n}}


def test_a_claim_for_an_mps_share_of_a_gpu_asks_slurm_for_mps() -> None:
    got = from_template(claim_spec(request(1, selectors=[PRODUCT], capacity=mps("30"))))
    assert got.ok and (got.shares, got.capacity, got.count, got.gres_type) == (30, "mps", 0, "h100")
    assert got.requests[0].share_gres == "mps"
    shards = from_template(claim_spec(request(1, capacity=shares(3))))
    assert (shards.capacity, shards.requests[0].share_gres) == ("shares", "shard")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (
            claim_spec(request(1, capacity={"requests": {"shares": "4", "mps": "30"}})),
            "asks for 'shares' or 'mps' of one GPU: Slurm counts neither against the other, ask for one",
        ),
        (
            claim_spec(request(2, capacity=mps(30))),
            "2 GPUs' mps in one request: Slurm gives a job's mps from one",
        ),
        (claim_spec(request(1, capacity=mps("0.5"))), "'0.5' is not a whole number of mps from 1"),
        (
            claim_spec(
                request(
                    1,
                    "mig.nvidia.com",
                    ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"],
                    capacity=mps(2),
                )
            ),
            "mps are of a whole GPU (gpu.nvidia.com), not of a MIG slice",
        ),
    ],
)
def test_an_mps_claim_slurm_cannot_allocate_is_refused_with_why(spec: dict[str, Any], says: str) -> None:
    got = from_template(spec)
    assert not got.ok and says in got.message()


def test_mps_and_shards_in_one_pod_are_refused() -> None:
    got = two_claims(request(1, capacity=shares(4)), request(1, capacity=mps(30)))
    assert "asks for mps and shares of a GPU: one Slurm job asks for one shared GRES" in got.message()


def test_gpus_by_claim_and_by_extended_resource_at_once_are_refused() -> None:
    got = two_claims(request(1), request(1), container_resources={"limits": {"nvidia.com/gpu": "1"}})
    assert "asks for nvidia.com/gpu and for GPUs by claim" in got.message()


@pytest.mark.parametrize(
    ("text", "mapping"),
    [
        ("NVIDIA H100 80GB HBM3=h100", {H100: "h100"}),
        (
            " NVIDIA H100 80GB HBM3 = h100 , NVIDIA A100-SXM4-80GB=a100,",
            {H100: "h100", "NVIDIA A100-SXM4-80GB": "a100"},
        ),
        ("", {}),
    ],
)
def test_product_types(text: str, mapping: dict[str, str]) -> None:
    assert parse_product_types(text) == mapping


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("NVIDIA H100", "must be PRODUCT_NAME=GRES_TYPE"),
        ("NVIDIA H100=h1:00", "is not a Slurm GRES type"),
        ("=h100", "is not an NVML product name"),
        ("A" * 65 + "=h100", "is not an NVML product name"),
        ("NVIDIA H100=h100,NVIDIA H100=a100", "mapped twice"),
    ],
)
def test_bad_product_types(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_product_types(text)


def test_mig_types_default_to_the_profile() -> None:
    cfg = DraConfig(product_types={}, mig_types={"1g.10gb": "nvidia_h100_80gb_hbm3_1g.10gb"})
    assert cfg.mig_type("1g.10gb") == "nvidia_h100_80gb_hbm3_1g.10gb"
    assert cfg.mig_type("3g.40gb") == "3g.40gb"
    assert cfg.mig_type("1g.10gb+me") == ""
