"""Submitting through `sbatch` as root, for what slurmrestd cannot carry.

slurmrestd v0.0.38 refuses `user_id`/`group_id` ("Disabled key"); a token for the user sets the
uid, and the gid then is the user's primary group. Only root's `sbatch --uid --gid` can give a job
another group, so a Pod's `group-id` goes this way where the Slurm client and munge are available.
"""

from __future__ import annotations

import shlex
import subprocess

from opentelemetry.trace import SpanKind

from tandem import tracing
from tandem.slurm.models import JobSpec
from tandem.slurm.rest import SlurmApiError

_EXCLUSIVE = {
    "none": "--exclusive",
    "user": "--exclusive=user",
    "mcs": "--exclusive=mcs",
    "topo": "--exclusive=topo",
    "ok": "--oversubscribe",
}


def sbatch_args(spec: JobSpec, uid: int, gid: int) -> list[str]:
    args = [
        "--parsable",
        f"--uid={uid}",
        f"--gid={gid}",
        f"--job-name={spec.name}",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={spec.cpus}",
        f"--mem={spec.memory_mb}M",
        f"--chdir={spec.working_dir}",
        "--export=NONE",
    ]
    if spec.gpus:
        args.append(f"--gres=gpu:{spec.gpu_type}:{spec.gpus}" if spec.gpu_type else f"--gres=gpu:{spec.gpus}")
    for flag, value in (
        ("--account", spec.account),
        ("--comment", spec.comment),
        ("--constraint", spec.constraints),
        ("--exclude", spec.excluded_nodes),
        ("--nodelist", spec.required_nodes),
        ("--partition", spec.partition),
        ("--prefer", spec.prefer),
        ("--qos", spec.qos),
        ("--reservation", spec.reservation),
        ("--output", spec.output),
        ("--error", spec.output),
    ):
        if value:
            args.append(f"{flag}={value}")
    if spec.exclusive:
        args.append(_EXCLUSIVE[spec.exclusive])
    if spec.priority is not None:
        args.append(f"--priority={spec.priority}")
    if spec.time_limit_minutes is not None:
        args.append(f"--time={spec.time_limit_minutes}")
    return args


def script_with_environment(spec: JobSpec) -> str:
    """The batch script with its environment set at its top (`--export=NONE` passes none)."""
    shebang, _, body = spec.script.partition("\n")
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in spec.environment.items())
    return f"{shebang}\n{exports}\n{body}"


def submit(spec: JobSpec, uid: int, gid: int, sbatch: str = "sbatch") -> int:
    with tracing.span("sbatch", kind=SpanKind.CLIENT, attributes={"slurm.uid": uid, "slurm.gid": gid}):
        try:
            res = subprocess.run(
                [sbatch, *sbatch_args(spec, uid, gid)],
                input=script_with_environment(spec),
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise SlurmApiError(f"sbatch failed to run: {e}") from e
    if res.returncode != 0:
        message = res.stderr.strip() or res.stdout.strip()
        # Slurm's refusal of the job is final; not reaching slurmctld is worth another try.
        unreachable = any(s in message for s in ("Unable to contact", "timed out", "Connection refused"))
        raise SlurmApiError(f"sbatch: {message}", 503 if unreachable else 400)
    return int(res.stdout.strip().split(";")[0])
