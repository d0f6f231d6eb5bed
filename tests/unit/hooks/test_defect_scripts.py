"""Every outside call the scripts Slurm runs make is bounded: a hung slurmctld or gateway must not
hang a prolog, an epilog or a placeholder job (Slurm would wait on it, and then kill it late)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).parents[3] / "libs/tandem/scripts").glob("*.sh"))


def _calls(tool: str) -> list[tuple[str, str]]:
    found = []
    for script in SCRIPTS:
        for line in script.read_text().splitlines():
            code = line.split("#", 1)[0]
            if re.search(rf"(^|[\s|&;(]){tool}\s", code):
                found.append((script.name, code.strip()))
    return found


def test_the_scripts_call_scontrol_and_curl_at_all() -> None:
    assert _calls("scontrol") and _calls("curl")


@pytest.mark.parametrize(("script", "line"), _calls("scontrol"))
def test_every_scontrol_has_a_timeout(script: str, line: str) -> None:
    assert re.search(r"\btimeout \d+ scontrol\b", line), f"{script}: {line}"


@pytest.mark.parametrize(("script", "line"), _calls("curl"))
def test_every_curl_has_a_deadline(script: str, line: str) -> None:
    # --max-time bounds one try; retries can start a new one just before the end: `timeout` too.
    assert "--max-time" in line and re.search(r"\btimeout \S+ curl\b", line), f"{script}: {line}"
