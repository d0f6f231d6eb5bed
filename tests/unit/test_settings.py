from __future__ import annotations

import pytest

from tandem.scheduler.settings import SchedulerSettings
from tandem.settings import Seconds, load, split_host_port


def test_flag_beats_environment_beats_default() -> None:
    env = {"TANDEM_SCHEDULER_NAME": "from-env", "TANDEM_SLURM_KILL_WAIT": "45s"}
    cfg = load(SchedulerSettings, ["--scheduler-name", "from-flag"], env)
    assert cfg.scheduler_name == "from-flag"
    assert cfg.slurm_kill_wait == 45.0
    assert load(SchedulerSettings, [], {}).slurm_kill_wait == 30.0


def test_namespaces_are_a_comma_separated_list() -> None:
    cfg = load(SchedulerSettings, ["--watch-namespace", "a, b,,c"], {})
    assert cfg.watch_namespaces == ("a", "b", "c")


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30.0), ("500ms", 0.5), ("2m", 120.0), ("7", 7.0)])
def test_durations(text: str, seconds: float) -> None:
    assert Seconds.parse(text) == seconds


def test_a_bad_duration_is_a_clear_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        load(SchedulerSettings, ["--slurm-kill-wait", "soon"], {})
    assert "--slurm-kill-wait" in capsys.readouterr().err


def test_bind_addresses() -> None:
    assert split_host_port(":8000") == ("", 8000)
    assert split_host_port("127.0.0.1:8000") == ("127.0.0.1", 8000)
    assert split_host_port("[::1]:9") == ("::1", 9)
