"""`tandem-uninstall`: what `helm uninstall` runs before it deletes the release (the chart's
pre-delete hook Job, helm/tandem/templates/uninstall-hook.yaml), so that no placeholder job, lock
taint, lock annotation or Tandem Node annotation outlives it. The order matters:

1. Stop the scheduler (its Deployment to 0 replicas, and wait for its Pods to go): else it would
   submit a new placeholder job for each replacement Pod a controller makes after step 2.
2. Cancel this release's placeholder jobs (by AdminComment, never by name) and delete their Pods:
   a Pod never outlives its job. A controller's replacement stays Pending: its scheduler is gone.
3. Wait, bounded, until Slurm has ended those jobs, epilogs included: the placeholder scripts' and
   the epilogs' calls reach the gateway and the syncer, which still run, and the nodes' locks are
   released the normal way.
4. Stop the syncer: from here on nothing taints a Node or drains a Slurm node behind this cleanup
   (a Slurm job still running would have its Node locked again at the syncer's next resync).
5-7. Remove what is left: the lock taint from every Node, Tandem's annotation and SlurmCordon
   condition from every Node, the lock annotation from every slurmd Pod; resume the Slurm nodes
   whose drain is Tandem's and whose reason goes with it (uninstall_plan.drain_verdict).

A step that fails is reported and the next is still tried; the exit status is non-zero if anything
failed, and `helm uninstall` then stops and keeps the release, to be run again. Every outside call
has a timeout (--call-timeout), and the waits stop early enough to leave steps 5-7 their time
within --timeout. What to act on is decided in tandem.syncer.uninstall_plan (pure, table-tested);
this module reads, writes and waits.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from tandem import keys, logs, placeholder, settings, slurmd
from tandem.kube import JSON, KubeClient, KubeError, pod_path
from tandem.slurm.models import Job
from tandem.slurm.rest import SlurmApiError, SlurmRestClient
from tandem.syncer import uninstall_plan as plan
from tandem.syncer.cluster import slim_node, slim_pod
from tandem.syncer.facts import NodeFacts
from tandem.syncer.nodesync import CONDITION
from tandem.syncer.settings import UninstallSettings
from tandem.syncer.uninstall_report import Report
from tandem.syncer.writes import LockWrites

log = logging.getLogger("tandem.uninstall")
T = TypeVar("T")

# How often a wait looks again.
POLL_SECONDS = 1.0
# Of --timeout: the most a Deployment's Pods are waited for (their grace period is 30 s), and what
# the waits leave for steps 5-7, which only read and write.
STOP_SHARE, STOP_CAP = 0.25, 60.0
CLEANUP_SHARE, CLEANUP_CAP = 0.125, 30.0


class StepFailed(RuntimeError):
    """A step did not get where it should; the message says what is left."""


class Cleanup:
    def __init__(
        self,
        kube: KubeClient,
        slurm: SlurmRestClient | None,
        cfg: UninstallSettings,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        say: Callable[[str], None] = print,
    ) -> None:
        self.kube, self.slurm, self.cfg = kube, slurm, cfg
        self.clock, self.sleep, self.say = clock, sleep, say
        self.report = Report(scheduler=cfg.scheduler_name)
        # Step 2's cancels, which step 3 waits for (kept even when step 2 fails half-way).
        self.cancelled: list[int] = []
        self.deadline = clock() + cfg.timeout
        self.stop_wait = min(cfg.timeout * STOP_SHARE, STOP_CAP)
        self.cleanup_reserve = min(cfg.timeout * CLEANUP_SHARE, CLEANUP_CAP)

    def run(self) -> Report:
        cfg = self.cfg
        steps: list[tuple[str, Callable[[], None]]] = [
            ("stop the scheduler", lambda: self.stop(cfg.scheduler_deployment)),
            ("cancel the placeholder jobs and delete their Pods", self.cancel),
            ("wait for Slurm to end them", self.wait_ended),
            ("stop the syncer", lambda: self.stop(cfg.syncer_deployment)),
            ("remove the lock taints and Tandem's Node annotations", self.clean_nodes),
            ("remove the slurmd Pods' lock annotations", self.clean_slurmd_pods),
            ("resume the Slurm nodes Tandem drained", self.resume_drains),
        ]
        for number, (title, do) in enumerate(steps, 1):
            self.say(f"[{number}/{len(steps)}] {title}")
            self._step(title, do)
        return self.report

    def _step(self, title: str, do: Callable[[], None]) -> None:
        """Run one step; whatever stops it is reported, and the next step still runs (each does
        what it can without the ones before)."""
        try:
            do()
        except (StepFailed, KubeError, SlurmApiError) as e:
            self.report.problems.append(f"{title}: {e}")
        except Exception as e:  # an uninstall must get as far as it can: report, go on
            log.exception("step failed", extra={"step": title})
            self.report.problems.append(f"{title}: {type(e).__name__}: {e}")

    # -- steps 1 and 4 ----------------------------------------------------------------------------

    def stop(self, deployment: str) -> None:
        """Scale a Deployment to 0 through its scale subresource (all the RBAC allows) and wait
        until its Pods are gone; a Deployment that is not there is already stopped."""
        if not deployment:
            return
        path = f"/apis/apps/v1/namespaces/{self.cfg.release_namespace}/deployments/{deployment}/scale"
        try:
            scale = self.kube.get(path)
        except KubeError as e:
            if e.not_found:
                self.say(f"  {deployment}: not deployed")
                return
            raise
        if (scale.get("spec") or {}).get("replicas"):
            scale = self.kube.merge_patch(path, {"spec": {"replicas": 0}})
        self.report.stopped.append(deployment)
        selector = str((scale.get("status") or {}).get("selector") or "")
        if not selector:
            raise StepFailed(f"{deployment}: its scale subresource names no Pod selector")
        until = min(self.clock() + self.stop_wait, self.deadline - self.cleanup_reserve)
        left = self._wait(lambda: self._pod_names(selector), until)
        if left:
            raise StepFailed(f"{deployment}: Pods still there after the wait: {', '.join(left)}")

    def _pod_names(self, selector: str) -> list[str]:
        answer = self.kube.get(pod_path(self.cfg.release_namespace), {"labelSelector": selector})
        return sorted(str((p.get("metadata") or {}).get("name")) for p in answer.get("items") or [])

    # -- step 2 -----------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Cancel each of this scheduler's placeholder jobs that may still run, then delete the
        Pods of those cancelled or already finished. Never the Pods of a job that would not cancel:
        a Pod never outlives its job, and the job would be left with no Pod."""
        slurm = self._slurm()
        ours = plan.placeholder_jobs(slurm.list_jobs() or [], self.cfg.scheduler_name)
        problems = []
        for job in plan.to_cancel(ours):
            try:
                slurm.cancel_job(job.job_id)
            except SlurmApiError as e:
                problems.append(f"job {job.job_id}: {e}")
                continue
            self.cancelled.append(job.job_id)
            ref = placeholder.pod_of(job)
            self.report.cancelled.append(f"{job.job_id} ({ref.key if ref else '?'})")
        done = [j for j in ours if j.finished or j.job_id in self.cancelled]
        problems += self._delete_pods(done)
        if problems:
            raise StepFailed("; ".join(problems))

    def _delete_pods(self, jobs: list[Job]) -> list[str]:
        problems = []
        namespaces = sorted({ref.namespace for ref in map(placeholder.pod_of, jobs) if ref is not None})
        for namespace in namespaces:
            try:
                answer = self.kube.get(
                    pod_path(namespace), {"fieldSelector": f"spec.schedulerName={self.cfg.scheduler_name}"}
                )
            except KubeError as e:
                problems.append(f"cannot list the Pods of namespace {namespace}: {e}")
                continue
            for pod in plan.placeholder_pods(answer.get("items") or [], jobs, self.cfg.scheduler_name):
                meta = pod["metadata"]
                try:
                    # The uid precondition: never a new Pod that took the name meanwhile.
                    self.kube.delete(
                        pod_path(namespace, meta["name"]), {"preconditions": {"uid": meta["uid"]}}
                    )
                except KubeError as e:
                    # Gone already, or the name is another Pod's now: nothing of this job's left.
                    if not (e.not_found or e.conflict):
                        problems.append(f"cannot delete Pod {namespace}/{meta['name']}: {e}")
                    continue
                self.report.deleted.append(f"{namespace}/{meta['name']}")
        return problems

    # -- step 3 -----------------------------------------------------------------------------------

    def wait_ended(self) -> None:
        job_ids = list(self.cancelled)
        if not job_ids:
            return
        slurm = self._slurm()
        # The syncer is stopped after this wait: leave it its time, and steps 5-7 theirs.
        stop_after = self.stop_wait if self.cfg.syncer_deployment else 0.0
        until = self.deadline - self.cleanup_reserve - stop_after
        left = self._wait(lambda: plan.not_ended(job_ids, slurm.job_states(job_ids)), until)
        if left:
            self.report.still_running = left
            raise StepFailed(
                f"Slurm has not ended placeholder jobs {', '.join(map(str, left))} in time; their"
                " nodes' locks are removed anyway"
            )

    # -- steps 5-7 -----------------------------------------------------------------------------------

    def clean_nodes(self) -> None:
        writes = LockWrites(self.kube, self.cfg.slurmd_namespace, cached_node=lambda name: None)
        problems = []
        for node in self.kube.get("/api/v1/nodes").get("items") or []:
            left = plan.node_leftovers(node)
            if not left.any:
                continue
            path = f"/api/v1/nodes/{left.name}"
            try:
                if left.lock_taint:
                    # Taints are one list: a patch that holds only on the version read, retried.
                    writes.set_taint(left.name, False)
                    self.report.untainted.append(left.name)
                if left.annotations:
                    self.kube.merge_patch(
                        path, {"metadata": {"annotations": dict.fromkeys(left.annotations)}}
                    )
                    self.report.annotations_removed += [f"{left.name} {key}" for key in left.annotations]
                if left.cordon_condition:
                    condition = {"type": CONDITION, "$patch": "delete"}
                    self.kube.strategic_patch(f"{path}/status", {"status": {"conditions": [condition]}})
                    self.report.conditions_removed.append(left.name)
            except KubeError as e:
                problems.append(f"Node {left.name}: {e}")
        if problems:
            raise StepFailed("; ".join(problems))

    def clean_slurmd_pods(self) -> None:
        problems = []
        for name in plan.locked_slurmd_pods(self._slurmd_pods(), self.cfg.slurmd_namespace):
            try:
                self.kube.merge_patch(
                    pod_path(self.cfg.slurmd_namespace, name),
                    {"metadata": {"annotations": {keys.LOCK_KEY: None}}},
                )
            except KubeError as e:
                if not e.not_found:
                    problems.append(f"slurmd Pod {name}: {e}")
                continue
            self.report.unlocked.append(name)
        if problems:
            raise StepFailed("; ".join(problems))

    def resume_drains(self) -> None:
        slurm = self._slurm()
        drained = [n for n in slurm.list_nodes() or [] if n.drained]
        if not drained:
            return
        hosts = slurmd.hosting(self._slurmd_pods(), self.cfg.slurmd_namespace)
        nodes = {str(n["metadata"]["name"]): n for n in self.kube.get("/api/v1/nodes").get("items") or []}
        problems = []
        for node in drained:
            pod = hosts.get(node.name)
            host = slurmd.host_of(pod)
            try:
                killwait_pod = self._killwait_pod(node.reason)
            except KubeError as e:
                self.report.left_drained.append(f"{node.name} ({node.reason}): cannot read its Pod: {e}")
                continue
            facts = NodeFacts(
                slurm_node=node.name,
                slurm=node,
                kube_node_name=host,
                kube_node=slim_node(nodes[host], self.cfg.health_conditions) if host in nodes else None,
                slurmd_pod=slim_pod(dict(pod)) if pod is not None else None,
                killwait_pod=slim_pod(killwait_pod) if killwait_pod is not None else None,
                own_user=self.cfg.slurm_user,
                health_conditions=self.cfg.health_conditions,
            )
            verdict = plan.drain_verdict(facts)
            if verdict is None:
                continue
            if not verdict.resume:
                self.report.left_drained.append(f"{node.name} ({node.reason}): {verdict.why}")
                continue
            try:
                slurm.resume_node(node.name)
            except SlurmApiError as e:
                problems.append(f"cannot resume {node.name}: {e}")
                continue
            self.report.resumed.append(f"{node.name} ({node.reason}): {verdict.why}")
        if problems:
            raise StepFailed("; ".join(problems))

    def _killwait_pod(self, reason: str) -> JSON | None:
        """The Pod a KillWait drain names, as it is now; None when it is gone (or the drain is not
        a KillWait drain)."""
        named = keys.killwait_drain_of(reason)
        if named is None:
            return None
        try:
            return self.kube.get(pod_path(named[0], named[1]))
        except KubeError as e:
            if e.not_found:
                return None
            raise

    def _slurmd_pods(self) -> list[JSON]:
        selector = f"{keys.SLURMD_POD_LABEL}={keys.SLURMD_POD_LABEL_VALUE}"
        answer = self.kube.get(pod_path(self.cfg.slurmd_namespace), {"labelSelector": selector})
        return list(answer.get("items") or [])

    # -- helpers ----------------------------------------------------------------------------------

    def _slurm(self) -> SlurmRestClient:
        if self.slurm is None:
            raise StepFailed("no access to slurmrestd (see above)")
        return self.slurm

    def _wait(self, left: Callable[[], list[T]], until: float) -> list[T]:
        """Ask `left` until it answers nothing or `until` (monotonic) passes; its last answer."""
        while True:
            remaining = left()
            now = self.clock()
            if not remaining or now >= until:
                return remaining
            self.sleep(min(POLL_SECONDS, until - now))


def main(argv: Sequence[str] | None = None) -> None:
    cfg = settings.load(UninstallSettings, argv)
    if not cfg.scheduler_name or not cfg.release_namespace:
        raise SystemExit(
            "--scheduler-name and --release-namespace are required: they say which release is going"
        )
    logs.setup("uninstall", cfg.log_level)
    kube = KubeClient.from_kubeconfig(cfg.kubeconfig, timeout=cfg.call_timeout)
    slurm: SlurmRestClient | None = None
    early: list[str] = []
    try:
        slurm = SlurmRestClient.for_service(cfg, timeout=cfg.call_timeout)
    except (SystemExit, OSError) as e:  # no token, an expired one, no CA file: do what needs no Slurm
        early.append(f"no access to slurmrestd: {e}")
        print(early[-1], flush=True)
    try:
        report = Cleanup(kube, slurm, cfg, say=lambda line: print(line, flush=True)).run()
    finally:
        kube.close()
        if slurm is not None:
            slurm.close()
    report.problems[:0] = early
    print(report.render(), flush=True)
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
