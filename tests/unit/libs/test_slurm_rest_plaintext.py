"""A service's Slurm token (SlurmUser's or root's) never crosses the network in the clear unless
the operator says the path is safe (issue 39)."""

from __future__ import annotations

import pytest

from tandem.settings import ClusterAccess
from tandem.slurm.rest import SlurmRestClient, plaintext_problem


def test_http_is_refused_unless_allowed_and_https_always_passes() -> None:
    assert "would cross the network in the clear" in plaintext_problem("http://slurm:6820", False)
    assert "--slurm-api-allow-plaintext" in plaintext_problem("HTTP://slurm:6820", False)
    assert plaintext_problem("http://127.0.0.1:6820", True) == ""
    assert plaintext_problem("https://slurm:6820", False) == ""
    assert "neither https:// nor http://" in plaintext_problem("ftp://slurm", True)


def test_a_service_with_an_http_url_does_not_start(tmp_path: pytest.TempPathFactory) -> None:
    cfg = ClusterAccess(slurm_api_base="http://slurm:6820", slurm_token_file="/nonexistent")
    with pytest.raises(SystemExit, match="in the clear"):
        SlurmRestClient.for_service(cfg)
