"""The annotation prefix (TANDEM_ANNOTATION_PREFIX) renames every key, or is refused clearly."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tandem import keys

PRINT_KEYS = "from tandem import keys; print(keys.LOCK_KEY, keys.JOB_ID_ANNOTATION, keys.PARTITION)"


def _import_keys(prefix: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TANDEM_ANNOTATION_PREFIX": prefix}
    return subprocess.run([sys.executable, "-c", PRINT_KEYS], env=env, capture_output=True, text=True)


def test_the_default_prefix_is_sunks() -> None:
    assert keys.prefix_from_env(None) == keys.prefix_from_env("") == "sunk.coreweave.com/"


def test_a_custom_prefix_renames_every_key() -> None:
    out = _import_keys("gpu.example.org/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "gpu.example.org/lock",
        "gpu.example.org/job-id",
        "gpu.example.org/partition",
    ]


@pytest.mark.parametrize("bad", ["gpu.example.org", "Upper.Case/", "has space/", "-dash.org/"])
def test_a_prefix_that_is_not_a_dns_subdomain_and_slash_is_refused(bad: str) -> None:
    out = _import_keys(bad)
    assert out.returncode != 0
    assert "TANDEM_ANNOTATION_PREFIX" in out.stderr and "DNS subdomain" in out.stderr
