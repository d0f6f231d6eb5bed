"""BENCHMARKS.md, written from the recorded runs (bench/results/*.jsonl, kept by bench/record.py):
each table row is one run, naming its commit, its date and the stack it ran on, so a reader can
run the same command and compare.

    .venv/bin/python bench/report.py            # writes BENCHMARKS.md at the repository's root
    .venv/bin/python bench/report.py --check    # fails when BENCHMARKS.md is not what the runs say
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import manifest, report_arms, report_curve
from bench.record import RESULTS

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "BENCHMARKS.md"

# The figures each kind of run shows, in order: (JSON key, column title, format).
Column = tuple[str, str, str]
SCHEDULE: Sequence[Column] = (
    ("bare_rate", "bare Slurm jobs/s", "{:.1f}"),
    ("tandem_rate", "Tandem Pods/s", "{:.1f}"),
    ("limit_ratio", "of this machine's limit", "{:.2f}"),
    ("bare_p50", "bare p50 s", "{:.2f}"),
    ("tandem_p50", "Tandem p50 s", "{:.2f}"),
    ("bare_p99", "bare p99 s", "{:.2f}"),
    ("tandem_p99", "Tandem p99 s", "{:.2f}"),
    ("own_cpu_ms_per_pod", "Tandem CPU ms/Pod", "{:.1f}"),
    ("api_requests_per_pod", "API requests/Pod", "{:.2f}"),
)
# A steady load: what was offered tells runs apart (half the bare burst rate differs by machine).
HALF_LOAD: Sequence[Column] = (("offered_rate", "offered Pods/s", "{:g}"), *SCHEDULE)
SCALE: Sequence[Column] = (
    ("pods", "Pods", "{:d}"),
    ("rate", "Pods bound/s", "{:.1f}"),
    ("rate_vs_64", "vs 64 nodes", "{:.2f}"),
    ("errors", "errors", "{}"),
    ("rss_mib.tandem-scheduler", "scheduler peak MiB", "{:.0f}"),
    ("rss_mib.tandem-syncer", "syncer peak MiB", "{:.0f}"),
)
# A gang run is a row per group size (its result's "sizes"); "het" is the heterogeneous row.
GANG: Sequence[Column] = (
    ("size", "members (nodes)", "{}"),
    ("bare_p50", "bare Slurm job p50 s", "{:.2f}"),
    ("tandem_p50", "Tandem gang p50 s", "{:.2f}"),
    ("bare_max", "bare max s", "{:.2f}"),
    ("tandem_max", "Tandem max s", "{:.2f}"),
    ("runs", "runs", "{}"),
)
TOPOLOGY: Sequence[Column] = (
    ("gangs", "gangs of 2-8", "{}"),
    ("share_in_one_domain", "Tandem gangs in one rack", "{:.2f}"),
    ("bare_p50", "bare p50 s", "{:.2f}"),
    ("tandem_p50", "Tandem p50 s", "{:.2f}"),
    ("bare_p99", "bare p99 s", "{:.2f}"),
    ("tandem_p99", "Tandem p99 s", "{:.2f}"),
    ("big_gang_bare.seconds", "big gang bare start s", "{:.2f}"),
    ("big_gang_tandem.seconds", "big gang Tandem start s", "{:.2f}"),
    ("big_gang_tandem.racks_touched", "racks Tandem's big gang preempted in", "{}"),
)
COLUMNS: dict[str, Sequence[Column]] = {
    "burst": SCHEDULE,
    "half-load": HALF_LOAD,
    "scale": SCALE,
    "gang": GANG,
    "topology": TOPOLOGY,
}
# Runs whose result holds one row per element of these lists; an elastic row (bench/elastic.py)
# is named by what it measures, in the size column.
ROWS_OF = {"gang": ("sizes", "elastic")}
SECTIONS = {
    "curve": "Load curve: latency against offered load, four arms on the same Nodes, interleaved",
    "burst": "Burst: N at once, on four arms: truly bare Slurm, bare Slurm, kube-scheduler, Tandem",
    "half-load": "Half load: Pods offered at a steady rate, about half the bare burst rate",
    "scale": "Scale: waves of Pods (or jobs) with plain Slurm jobs mixed in, on four arms",
    "gang": "Gangs: a group placed as one, beside one multi-node Slurm job and kube-scheduler's gang",
    "topology": "Topology: gangs asking one rack among churn, and a big gang freeing a rack, on four arms",
}

# What a section's rows measure, on the arms method (bench/report_arms.py).
ABOUT = {
    "scale": (
        "Each round is one wave per arm: that many Pods (kube-scheduler, Tandem) or one-second jobs"
        " (the Slurm arms) at once, with plain 2-second Slurm jobs beside them; the figure is the"
        " wave's start rate, from its first create or submit to its last start. A wave with an"
        " error (not started in time, an API call refused, a plain job not completed) failed."
    ),
    "topology": (
        "64 nodes labelled into 8 racks of 8. Among a churn of plain whole-node jobs, a gang asks for"
        " one rack: for the Slurm arms one job with the constraint Tandem gives such a gang, from"
        " submit to its script running; for kube-scheduler (its topology-aware workload scheduling)"
        " and Tandem the same PodGroup, from the last member's creation to all bound. Then, with"
        " QOS preemption and a normal-QOS job on every node, a gang of 8 with QOS high (no"
        " kube-scheduler arm: it cannot preempt Slurm's jobs). `in one rack` is the share of trials"
        " whose nodes were all in one rack."
    ),
    "burst": (
        "A row is N jobs or Pods all meant for one instant, each living a few seconds once it runs"
        " and then going, inside the window: latency from that instant to each one running (a"
        " script started, a Pod bound); the start rate is N over the time to the last start; CPU"
        " per Pod over the whole window (create to gone) minus each process's idle rate measured"
        " just before; API requests per Pod as the API server's audit log counts them, by the"
        " arm's scheduler."
    ),
    "gang": (
        "A row is a gang of that many members, one node each (a het row: a leader component and a"
        " worker component): for the Slurm arms one multi-node job, from its submit to its script"
        " running; for kube-scheduler (its gang scheduling, the same PodGroup, members kept one"
        " per Node) and Tandem, from the last member's creation to every member bound. Each trial"
        " starts from an idle cluster."
    ),
}

# Sections whose runs a newer method's section replaces: said, their rows not published.
SUPERSEDED = {
    "half-load": "A steady offered load is now the load curve's (above): open-loop, four arms, intervals.",
}


def load(results: Path) -> dict[str, list[dict[str, Any]]]:
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(results.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                record = json.loads(line)
                runs.setdefault(str(record["name"]), []).append(record)
    return runs


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    try:
        return fmt.format(value)
    except (ValueError, TypeError):
        return str(value)


def _value(result: dict[str, Any], key: str) -> Any:
    """`key` of the result; `a.b` reads b of the object under a."""
    value: Any = result
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _scale_vs_64(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A scale run's rate against a 64-node run of the same commit on the same machine (of as
    many Pods where there is one: a wave's rate holds steady from the first wave to the
    twentieth), where the run was not given that rate itself (`--rate-64`)."""
    at_64: dict[tuple[Any, Any, Any], Any] = {}
    for r in records:
        if r.get("nodes") == 64:
            ran = (r.get("commit"), _cpu(r))
            at_64[(*ran, r["result"].get("pods"))] = r["result"].get("rate")
            at_64.setdefault((*ran, None), r["result"].get("rate"))
    out = []
    for r in records:
        result = r["result"]
        ran = (r.get("commit"), _cpu(r))
        base = at_64.get((*ran, result.get("pods"))) or at_64.get((*ran, None))
        if result.get("rate_vs_64") is None and r.get("nodes") != 64 and base and result.get("rate"):
            r = {**r, "result": {**result, "rate_64": base, "rate_vs_64": round(result["rate"] / base, 3)}}
        out.append(r)
    return out


def _cpu(record: dict[str, Any]) -> Any:
    return (record.get("machine") or {}).get("cpu_model")


DERIVED = {"scale": _scale_vs_64}


def _rows(name: str, result: dict[str, Any]) -> list[dict[str, Any]]:
    listed = ROWS_OF.get(name.split("-")[0])
    if listed is None:
        return [result]
    rows = []
    for key in listed:
        for row in result.get(key) or []:
            if isinstance(row, dict):
                named = {"size": f"elastic: {row['what']}"} if "what" in row and "size" not in row else {}
                rows.append({**result, **row, **named})
    return rows or [result]


def _columns(name: str, records: list[dict[str, Any]]) -> Sequence[Column]:
    known = COLUMNS.get(name) or COLUMNS.get(name.split("-")[0])
    if known:
        return known
    keys = [
        k for k, v in records[-1]["result"].items() if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    return [(k, k, "{}") for k in keys]


def _machine_key(record: dict[str, Any]) -> str:
    return json.dumps(record.get("machine") or {}, sort_keys=True)


def table(name: str, records: list[dict[str, Any]], machines: Mapping[str, str] | None = None) -> list[str]:
    """One row per run (per group size and elastic measure, for gangs); `machines` names each
    run's machine (by its record's `machine`), as the Machine section lists them."""
    records = DERIVED.get(name, lambda rs: rs)(records)
    columns = _columns(name, records)
    machines = machines or {}
    head = ["run", "commit", "date", "nodes", *(title for _, title, _ in columns), "machine"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        for result in _rows(name, r["result"]):
            cells = [
                _run_cell(r),
                _commit_cell(r),
                str(r.get("at", ""))[:10],
                str(r.get("nodes") or "-"),
                *(_cell(_value(result, key), fmt) for key, _, fmt in columns),
                machines.get(_machine_key(r), "-"),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def _run_cell(record: dict[str, Any]) -> str:
    """The run's label, and the checks it failed (its figures do not count)."""
    label = str(record.get("label") or "-")
    failed = (record.get("result") or {}).get("checks_failed") or []
    return f"{label} (**failed**: {'; '.join(map(str, failed[:3]))})" if failed else label


def _commit_cell(record: dict[str, Any]) -> str:
    """The run's commit, and what its manifest says made the figures not that commit's own."""
    cell = f"`{record.get('commit') or '?'}`"
    said = manifest.caveats(record["manifest"]) if isinstance(record.get("manifest"), dict) else []
    return f"{cell} ({'; '.join(said)})" if said else cell


def _portable(command: Sequence[str]) -> list[str]:
    """The command as a reader runs it from a checkout of the row's commit: no environment
    prefix, the repository's own virtualenv."""
    args = list(command)
    if args[:1] == ["env"]:
        args = args[1:]
        while args and "=" in args[0] and not args[0].startswith("-"):
            args = args[1:]
    return [".venv/bin/python" if a.endswith("/bin/python") else a for a in args]


def _up(nodes: int) -> str:
    return f"NODES={nodes} make up && " if nodes else "make up && "


def render(runs: dict[str, list[dict[str, Any]]]) -> str:
    out = [
        "# Benchmarks",
        "",
        "Written by `bench/report.py` from the runs `bench/record.py` kept in `bench/results/`: do not",
        "edit by hand. Every row is one run, on the machine its last column names (below), against",
        "bare Slurm on the same stack in the same run where the benchmark has a bare phase: these",
        "machines are noisy, so compare ratios within a run, or runs on one machine, rather than",
        "figures across machines.",
        "",
    ]
    # Lettered in the order first used, so that a new run never renames an earlier run's machine.
    machines: dict[str, str] = {}
    for r in sorted((r for rs in runs.values() for r in rs), key=lambda r: str(r.get("at", ""))):
        machines.setdefault(_machine_key(r), chr(ord("A") + len(machines)))
    out += ["## Machines", ""]
    for m, letter in machines.items():
        d = json.loads(m)
        out.append(
            f"- {letter}: {d.get('cpus')} CPUs ({d.get('cpu_model') or 'unknown model'}),"
            f" {d.get('memory_gib')} GiB, Linux {d.get('kernel')}, Python {d.get('python')}"
        )
    out += [
        "",
        "The whole lab runs on a run's one machine: kube-apiserver, etcd, the controllers, kwok as the",
        "Nodes' kubelets, slurmctld, one slurmd per node, slurmrestd, slurmdbd and MariaDB, and Tandem's",
        "three services.",
        "",
    ]
    for name in sorted(runs, key=lambda n: (list(SECTIONS).index(n) if n in SECTIONS else 99, n)):
        records = runs[name]
        out += [f"## {SECTIONS.get(name, name)}", ""]
        if name == "curve":
            out += report_curve.section(records, lambda r: _describe(r, machines))
        elif name in SUPERSEDED:
            out += [f"{SUPERSEDED[name]} The {len(records)} runs on the earlier method are kept in"]
            out += [f"`bench/results/{name}.jsonl`.", ""]
            continue
        elif newer := [r for r in records if report_arms.is_arms(r)]:
            # Runs on the earlier method (one sample per arm, no intervals) stay in their file,
            # not beside these: their figures are not comparable.
            earlier = len(records) - len(newer)
            out += report_arms.section(newer, lambda r: _describe(r, machines), ABOUT.get(name, ""))
            if earlier:
                kept = f"`bench/results/{name}.jsonl`"
                out += [f"{earlier} earlier runs, on the earlier method, are kept in {kept}.", ""]
            records = newer
        else:
            out += [*table(name, records, machines), ""]
        out += [
            "Reproduce (from a checkout of the row's commit):",
            "",
        ]
        commands = sorted({(int(r.get("nodes") or 0), " ".join(_portable(r["command"]))) for r in records})
        out += ["```sh", *(_up(nodes) + command for nodes, command in commands), "```", ""]
    return "\n".join(out).rstrip() + "\n"


def _describe(record: dict[str, Any], machines: Mapping[str, str]) -> str:
    """A run as one line: its label and checks, commit, date, nodes and machine."""
    return (
        f"{_run_cell(record)}, {_commit_cell(record)}, {str(record.get('at', ''))[:10]}, "
        f"{record.get('nodes') or '-'} nodes, machine {machines.get(_machine_key(record), '-')}"
    )


def images(runs: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """The images BENCHMARKS.md shows (path from the repository's root -> SVG text): the latest
    load curve's."""
    records = runs.get("curve") or []
    return report_curve.images(records[-1]["result"]) if records else {}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="fail if the file is not what the runs say")
    args = parser.parse_args()
    runs = load(args.results)
    text = render(runs)
    drawn = {args.out.parent / path: svg for path, svg in images(runs).items()}
    if args.check:
        stale = [str(p) for p, svg in drawn.items() if not p.exists() or p.read_text() != svg]
        if not args.out.exists() or args.out.read_text() != text or stale:
            sys.exit(
                f"{', '.join([str(args.out), *stale])} not what {args.results} says: run bench/report.py"
            )
        return
    args.out.write_text(text)
    for path, svg in drawn.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(svg)
    print(f"wrote {args.out}" + (f" and {len(drawn)} images" if drawn else ""))


if __name__ == "__main__":
    main()
