from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from tandem.quantity import parse_quantity
from tandem.scheduler.validation import effective_requests


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", Decimal(2)),
        ("0", Decimal(0)),
        ("1.5", Decimal("1.5")),
        (".5", Decimal("0.5")),
        ("5.", Decimal(5)),
        ("+3", Decimal(3)),
        ("-3", Decimal(-3)),
        ("250m", Decimal("0.25")),
        ("100u", Decimal("0.0001")),
        ("7n", Decimal("0.000000007")),
        ("2k", Decimal(2000)),
        ("3M", Decimal(3_000_000)),
        ("4G", Decimal(4 * 10**9)),
        ("5T", Decimal(5 * 10**12)),
        ("6P", Decimal(6 * 10**15)),
        ("1E", Decimal(10**18)),
        ("1Ki", Decimal(1024)),
        ("1.5Mi", Decimal(1572864)),
        ("2Gi", Decimal(2 * 2**30)),
        ("1Ti", Decimal(2**40)),
        ("1Pi", Decimal(2**50)),
        ("1Ei", Decimal(2**60)),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("12e-1", Decimal("1.2")),
        ("1e+2", Decimal(100)),
        ("9223372036854775807", Decimal(2**63 - 1)),
    ],
)
def test_parses_every_kubernetes_form(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


def test_binary_suffixes_stay_exact_beyond_default_decimal_precision() -> None:
    # 28 significant digits is Decimal's default; this needs more.
    assert parse_quantity("1.000000000000000000000000000001Ki") == Decimal(
        "1024.000000000000000000000000001024"
    )


@pytest.mark.parametrize(
    "text",
    ["", "abc", " 1", "1 ", "1.2.3", "1e", "1e3.5", "1K", "1KB", "1Ki2", "Mi", ".", "+", "1_000", "\u0661"],
)
def test_garbage_is_a_value_error_that_quotes_the_input(text: str) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity") as err:
        parse_quantity(text)
    assert repr(text) in str(err.value)


@pytest.mark.parametrize("text", ["9223372036854775808", "8Ei", "1e19", "-1e19", "1e99999999999999"])
def test_values_beyond_what_kubernetes_holds_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "millis"),
    [("1", 1000), ("250m", 250), ("0.1m", 1), ("1n", 1), ("1.0001", 1001), ("0", 0), ("110", 110_000)],
)
def test_cpu_requests_round_up_to_millicores(text: str, millis: int) -> None:
    assert effective_requests(_pod(cpu=text))["cpu"] == millis


@pytest.mark.parametrize(
    ("text", "size"),
    [("1Gi", 2**30), ("1G", 10**9), ("960Gi", 960 * 2**30), ("1500m", 2), ("100", 100), ("0.1", 1)],
)
def test_memory_requests_round_up_to_bytes(text: str, size: int) -> None:
    assert effective_requests(_pod(memory=text))["memory"] == size


def _pod(**requests: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]}}
