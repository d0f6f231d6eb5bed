"""The fuzz tests at full size: 10,000 random cases each (the test suite runs a few hundred).

    .venv/bin/python bench/fuzz.py --cases 10000

Runs tests/unit/hooks/test_fuzz_gateway.py (raw HTTP requests against the hooks API),
tests/unit/scheduler/test_fuzz_validation.py (random Pods through validation, the decision and job building)
and tests/unit/libs/test_fuzz_slurm_answers.py (garbled slurmrestd answers to every call) with
FUZZ_EXAMPLES=N. Prints a table, then one JSON line: {"cases", "<target>": "passed"|"failed", ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from devstack.table import format_table

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {
    "hooks_api": "tests/unit/hooks/test_fuzz_gateway.py",
    "pod_validation": "tests/unit/scheduler/test_fuzz_validation.py",
    "slurm_answers": "tests/unit/libs/test_fuzz_slurm_answers.py",
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=10_000)
    args = parser.parse_args()
    rows, result = [["target", "cases", "result", "seconds"]], {"cases": args.cases}
    for name, path in TARGETS.items():
        began = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", path],
            cwd=ROOT,
            env={**os.environ, "FUZZ_EXAMPLES": str(args.cases)},
            capture_output=True,
            text=True,
        )
        outcome = "passed" if run.returncode == 0 else "failed"
        if run.returncode:
            print(run.stdout[-3000:], flush=True)
        rows.append([name, str(args.cases), outcome, f"{time.monotonic() - began:.0f}"])
        result[name] = outcome
    print(format_table(rows))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
