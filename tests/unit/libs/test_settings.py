from __future__ import annotations

import pytest

from tandem.scheduler.settings import SchedulerSettings
from tandem.settings import Seconds, load, split_host_port
from tandem.syncer.settings import SyncerSettings, UninstallSettings


def test_flag_beats_environment_beats_default() -> None:
    env = {"TANDEM_SCHEDULER_NAME": "from-env", "TANDEM_SLURM_KILL_WAIT": "45s"}
    cfg = load(SchedulerSettings, ["--scheduler-name", "from-flag"], env)
    assert cfg.scheduler_name == "from-flag"
    assert cfg.slurm_kill_wait == 45.0
    # Not given: read from Slurm (tandem.scheduler.killwait_source); blank is not given either.
    assert load(SchedulerSettings, [], {}).slurm_kill_wait is None
    assert load(SchedulerSettings, [], {"TANDEM_SLURM_KILL_WAIT": ""}).slurm_kill_wait is None
    assert load(SchedulerSettings, ["--slurm-kill-wait="], {}).slurm_kill_wait is None


def test_the_slurm_conf_file_is_a_path_empty_by_default() -> None:
    assert load(SchedulerSettings, [], {}).slurm_conf_file == ""
    cfg = load(SchedulerSettings, ["--slurm-conf-file", "/etc/tandem/slurm-conf/slurm.conf"], {})
    assert cfg.slurm_conf_file == "/etc/tandem/slurm-conf/slurm.conf"


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


def test_health_conditions_are_a_comma_separated_list_for_the_syncer_and_its_cleanup() -> None:
    assert load(SyncerSettings, [], {}).health_conditions == ()
    cfg = load(SyncerSettings, ["--health-conditions", "GpuUnhealthy, KernelDeadlock,"], {})
    assert cfg.health_conditions == ("GpuUnhealthy", "KernelDeadlock")
    env = {"TANDEM_HEALTH_CONDITIONS": "GpuUnhealthy"}
    assert load(SyncerSettings, [], env).health_conditions == ("GpuUnhealthy",)
    assert load(UninstallSettings, [], env).health_conditions == ("GpuUnhealthy",)


@pytest.mark.parametrize("refused", ["Ready", "SlurmCordon"])
def test_ready_and_slurm_cordon_are_no_health_conditions(
    refused: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ready is True on every healthy Node; SlurmCordon is Tandem's own showing of a drain (it
    would drain the node again for being drained)."""
    with pytest.raises(SystemExit):
        load(SyncerSettings, ["--health-conditions", f"GpuUnhealthy,{refused}"], {})
    err = capsys.readouterr().err
    assert "--health-conditions" in err and refused in err


def test_an_extra_members_nice_below_zero_stops_the_scheduler_saying_why() -> None:
    """Below 0 an elastic gang's extras would rank above their core (issue 53)."""
    from tandem.scheduler.main import placeholder_config

    base = ["--scheduler-name", "tandem"]
    assert load(SchedulerSettings, base, {}).extra_member_nice == 1000
    with pytest.raises(SystemExit, match="--extra-member-nice must be 0 or more, not -5"):
        placeholder_config(load(SchedulerSettings, [*base, "--extra-member-nice", "-5"], {}))


def test_a_topology_interval_below_a_second_is_a_clear_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert load(SyncerSettings, [], {}).topology_min_interval == 10.0
    assert load(SyncerSettings, ["--topology-min-interval", "3s"], {}).topology_min_interval == 3.0
    with pytest.raises(SystemExit):
        load(SyncerSettings, ["--topology-min-interval", "0"], {})
    assert "--topology-min-interval" in capsys.readouterr().err
