"""What the uninstall cleanup did and what it could not do, as the operator reads it in the hook
Job's log (`kubectl logs job/<fullname>-uninstall`): the summary `tandem-uninstall` prints last."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Report:
    scheduler: str = ""
    stopped: list[str] = field(default_factory=list)  # Deployments scaled to 0
    cancelled: list[str] = field(default_factory=list)  # "<job id> (<namespace>/<pod or group>)"
    deleted: list[str] = field(default_factory=list)  # Pods, "<namespace>/<name>"
    still_running: list[int] = field(default_factory=list)  # placeholder jobs not ended in time
    untainted: list[str] = field(default_factory=list)  # Nodes
    annotations_removed: list[str] = field(default_factory=list)  # "<Node> <key>"
    conditions_removed: list[str] = field(default_factory=list)  # Nodes
    unlocked: list[str] = field(default_factory=list)  # slurmd Pods
    resumed: list[str] = field(default_factory=list)  # "<Slurm node>: <why>"
    left_drained: list[str] = field(default_factory=list)  # "<Slurm node> (<reason>): <why>"
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self) -> str:
        lines = ["tandem-uninstall summary:"]
        rows = [
            ("Deployments scaled to 0", self.stopped),
            ("placeholder jobs cancelled", self.cancelled),
            ("placeholder Pods deleted", self.deleted),
            ("placeholder jobs still not ended", [str(j) for j in self.still_running]),
            ("lock taints removed from Nodes", self.untainted),
            ("Tandem annotations removed from Nodes", self.annotations_removed),
            ("SlurmCordon conditions removed from Nodes", self.conditions_removed),
            ("lock annotations removed from slurmd Pods", self.unlocked),
            ("Slurm nodes resumed", self.resumed),
            ("Slurm nodes left drained", self.left_drained),
        ]
        for title, items in rows:
            lines.append(f"  {title}: {len(items) or 'none'}")
            lines.extend(f"    {item}" for item in items)
        if self.deleted:
            lines.append(
                f"  A controller's replacement for a deleted Pod stays Pending: it names scheduler"
                f" {self.scheduler}, which is gone. Point the controller at another scheduler, or delete it."
            )
        if self.problems:
            lines.append(f"FAILED ({len(self.problems)}):")
            lines.extend(f"  - {p}" for p in self.problems)
            lines.append(
                "Fix the above and run `helm uninstall` again (the cleanup starts over and skips what is"
                " done), or `helm uninstall --no-hooks` to delete the release without it."
            )
        else:
            lines.append(
                "OK: no placeholder job, lock taint, lock annotation or Tandem Node annotation is left."
            )
        return "\n".join(lines)
