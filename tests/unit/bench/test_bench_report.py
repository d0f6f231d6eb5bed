"""BENCHMARKS.md is written from the recorded runs (bench/record.py, bench/report.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench import manifest, record, report


def _run(
    path: Path,
    name: str,
    label: str,
    result: dict[str, object],
    nodes: int = 64,
    command: tuple[str, ...] = ("bench/schedule.py", "--n", "200"),
    commit: str = "abc1234",
    cpu_model: str = "AMD EPYC",
) -> None:
    with (path / f"{name}.jsonl").open("a") as f:
        f.write(
            json.dumps(
                {
                    "name": name,
                    "label": label,
                    "nodes": nodes,
                    "command": [".venv/bin/python", *command],
                    "commit": commit,
                    "at": "2026-11-28T05:00:00+00:00",
                    "machine": {
                        "cpus": 2,
                        "cpu_model": cpu_model,
                        "memory_gib": 23.5,
                        "kernel": "6",
                        "python": "3.11",
                    },
                    "result": result,
                }
            )
            + "\n"
        )


def test_every_run_is_a_row_naming_its_commit_and_figures(tmp_path: Path) -> None:
    _run(tmp_path, "burst", "before", {"tandem_rate": 15.03, "bare_rate": 25.78, "own_cpu_ms_per_pod": 26.05})
    _run(tmp_path, "burst", "after", {"tandem_rate": 17.5, "bare_rate": 25.0, "own_cpu_ms_per_pod": 12.0})
    text = report.render(report.load(tmp_path))
    rows = [line for line in text.splitlines() if line.startswith("| before") or line.startswith("| after")]
    assert len(rows) == 2
    assert "15.0" in rows[0] and "26.1" in rows[0] and "`abc1234`" in rows[0]
    assert "12.0" in rows[1]
    assert "2 CPUs (AMD EPYC), 23.5 GiB" in text
    assert "NODES=64 make up && .venv/bin/python bench/schedule.py --n 200" in text


def test_a_superseded_sections_runs_are_not_published_and_it_says_where_they_are(tmp_path: Path) -> None:
    # The steady-rate runs of the earlier method (one sample per arm) beside the load curve's
    # intervals would read as comparable: they are not.
    for rate in (12, 17):
        command = ("bench/schedule.py", "--rate", str(rate), "--seconds", "30")
        _run(
            tmp_path, "half-load", "after", {"offered_rate": float(rate), "tandem_p50": 1.0}, command=command
        )
    text = report.render(report.load(tmp_path))
    assert not [line for line in text.splitlines() if line.startswith("| after")]
    assert "The 2 runs on the earlier method are kept in\n`bench/results/half-load.jsonl`." in text
    assert "bench/schedule.py --rate 17" not in text


def test_a_run_of_an_unknown_kind_shows_its_numbers(tmp_path: Path) -> None:
    _run(tmp_path, "soak", "", {"gangs_per_s": 3.5, "ok": True})
    text = report.render(report.load(tmp_path))
    assert "gangs_per_s" in text and "3.5" in text and "ok" not in text.split("## soak")[1].split("\n")[2]


def test_a_gang_run_is_a_row_per_group_size(tmp_path: Path) -> None:
    sizes = [
        {"size": 2, "bare_p50": 0.61, "tandem_p50": 0.83, "bare_max": 0.7, "tandem_max": 1.0, "runs": 5},
        {
            "size": "het 1+3",
            "bare_p50": 0.9,
            "tandem_p50": 1.25,
            "bare_max": 1.0,
            "tandem_max": 1.4,
            "runs": 5,
        },
    ]
    elastic = [
        {"what": "room -> extra running", "bare_p50": 0.17, "tandem_p50": 0.16, "bare_max": 0.19, "runs": 5}
    ]
    _run(tmp_path, "gang", "after", {"sizes": sizes, "elastic": elastic, "target_met": True})
    section = report.render(report.load(tmp_path)).split("## Gangs")[1]
    rows = [line for line in section.splitlines() if line.startswith("| after")]
    assert len(rows) == 3
    assert "| 2 | 0.61 | 0.83 |" in rows[0]
    assert "| het 1+3 | 0.90 | 1.25 |" in rows[1]
    assert "| elastic: room -> extra running | 0.17 | 0.16 | 0.19 | - | 5 |" in rows[2]


def test_a_topology_run_shows_the_big_gangs_figures(tmp_path: Path) -> None:
    result = {
        "gangs": 21,
        "share_in_one_domain": 1.0,
        "tandem_p50": 1.5,
        "big_gang_bare": {"seconds": 2.5, "racks_touched": 3},
        "big_gang_tandem": {"seconds": 3.1, "racks_touched": 1},
    }
    _run(tmp_path, "topology", "after", result)
    section = report.render(report.load(tmp_path)).split("## Topology")[1]
    (row,) = [line for line in section.splitlines() if line.startswith("| after")]
    assert row.endswith("| 21 | 1.00 | - | 1.50 | - | - | 2.50 | 3.10 | 1 | A |")


def test_a_scale_run_is_compared_with_the_same_waves_on_64_nodes_of_its_commit(tmp_path: Path) -> None:
    scale = ("bench/scale.py", "--pods", "3000")
    for commit, nodes, rate in (
        ("old", 64, 10.0),
        ("old", 1000, 7.0),
        ("new", 64, 12.0),
        ("new", 1000, 11.4),
    ):
        _run(tmp_path, "scale", commit, {"pods": 3000, "rate": rate}, nodes, scale, commit)
    _run(tmp_path, "scale", "new", {"pods": 10000, "rate": 6.0}, 1000, scale, "new")  # waves more
    _run(tmp_path, "scale", "other", {"pods": 3000, "rate": 5.0}, 1000, scale, "other")  # no 64-node run
    section = report.render(report.load(tmp_path)).split("## Scale")[1]
    rows = [line for line in section.splitlines() if line.startswith(("| old", "| new", "| other"))]
    assert [row.split(" | ")[6] for row in rows] == ["-", "0.70", "-", "0.95", "0.50", "-"]
    assert "NODES=64 make up && .venv/bin/python bench/scale.py --pods 3000" in section
    assert "NODES=1000 make up && .venv/bin/python bench/scale.py --pods 3000" in section


def test_a_scale_run_is_not_compared_with_a_64_node_run_on_another_machine(tmp_path: Path) -> None:
    """Session 29: the same commit's 64-node figure came from an AMD machine, the 1,000-node one
    from an Intel one; a ratio between them would say nothing about Tandem."""
    scale = ("bench/scale.py", "--pods", "10000")
    _run(tmp_path, "scale", "after", {"pods": 10000, "rate": 13.0}, 64, scale, "new", "Intel Xeon")
    _run(tmp_path, "scale", "after", {"pods": 10000, "rate": 10.0}, 64, scale, "new", "AMD EPYC")
    _run(tmp_path, "scale", "after", {"pods": 10000, "rate": 14.0}, 1000, scale, "new", "Intel Xeon")
    section = report.render(report.load(tmp_path)).split("## Scale")[1]
    rows = [line for line in section.splitlines() if line.startswith("| after")]
    assert [row.split(" | ")[6] for row in rows] == ["-", "-", "1.08"]
    # Each row names its machine, and the Machines section says which is which.
    assert [row.rstrip(" |").split(" | ")[-1] for row in rows] == ["A", "B", "A"]
    text = report.render(report.load(tmp_path))
    assert "- A: 2 CPUs (Intel Xeon)" in text and "- B: 2 CPUs (AMD EPYC)" in text


def test_the_last_json_line_is_the_result() -> None:
    assert record.last_json('table\n{"a": 1}\na note after it\n') == {"a": 1}
    assert record.last_json('{"a": 1}\n{"b": 2}\n') == {"b": 2}
    assert record.last_json("no json here\n") is None


def test_a_run_is_recorded_with_the_machine_and_nothing_when_it_fails(tmp_path: Path) -> None:
    script = Path(record.__file__)
    ok = [sys.executable, "-c", "print('table'); print('{\"tandem_rate\": 9.5}')"]
    subprocess.run(
        [
            sys.executable,
            str(script),
            "--name",
            "burst",
            "--label",
            "after",
            "--results",
            str(tmp_path),
            "--",
            *ok,
        ],
        check=True,
        capture_output=True,
    )
    failing = [sys.executable, "-c", "import sys; print('{\"x\": 1}'); sys.exit(3)"]
    done = subprocess.run(
        [sys.executable, str(script), "--name", "burst", "--results", str(tmp_path), "--", *failing],
        capture_output=True,
    )
    assert done.returncode != 0
    lines = (tmp_path / "burst.jsonl").read_text().splitlines()
    assert len(lines) == 1
    kept = json.loads(lines[0])
    assert kept["label"] == "after" and kept["result"] == {"tandem_rate": 9.5} and kept["machine"]["cpus"]
    assert "manifest" in kept  # the releases and the code the services ran, or why not read


def test_a_services_build_is_read_from_its_metrics() -> None:
    text = (
        "# HELP tandem_build_info 1, labelled with the commit\n"
        "# TYPE tandem_build_info gauge\n"
        'tandem_build_info{commit="4725da2e",dirty="false",python="3.11.7"} 1.0\n'
        "tandem_other 3.0\n"
    )
    assert manifest.build_info(text) == {"commit": "4725da2e", "dirty": "false"}
    assert manifest.build_info("tandem_other 3.0\n") is None


def _manifest(services: dict[str, dict[str, str]], dirty: str = "false") -> dict[str, object]:
    return {"harness": {"commit": "aaaa", "dirty": dirty}, "services": services}


def test_a_run_says_when_its_figures_are_not_its_commits_own() -> None:
    same = {"commit": "aaaa", "dirty": "false"}
    assert manifest.caveats(_manifest({"tandem-scheduler": same, "tandem-syncer": same})) == []
    assert manifest.caveats(_manifest({"tandem-scheduler": same}, dirty="true")) == [
        "the harness's tree had changes"
    ]
    older = {"commit": "bbbbbbbbbbbbbbbb", "dirty": "false"}
    assert manifest.caveats(_manifest({"tandem-scheduler": older, "tandem-hooks": manifest.UNANSWERED})) == [
        "tandem-hooks did not say which code it ran",
        "tandem-scheduler ran bbbbbbbbbbbb",
    ]
    assert manifest.caveats(_manifest({"tandem-syncer": {"commit": "aaaa", "dirty": "true"}})) == [
        "tandem-syncer ran a tree with changes"
    ]


def test_a_row_whose_services_ran_other_code_says_so(tmp_path: Path) -> None:
    _run(tmp_path, "burst", "after", {"tandem_rate": 17.5})
    lines = (tmp_path / "burst.jsonl").read_text().splitlines()
    run = json.loads(lines[0])
    run["manifest"] = _manifest({"tandem-scheduler": {"commit": "cccccccccccccccc", "dirty": "false"}})
    (tmp_path / "burst.jsonl").write_text(json.dumps(run) + "\n")
    (row,) = [
        line for line in report.render(report.load(tmp_path)).splitlines() if line.startswith("| after")
    ]
    assert "`abc1234` (tandem-scheduler ran cccccccccccc)" in row
