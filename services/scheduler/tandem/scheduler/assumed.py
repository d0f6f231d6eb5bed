"""What this scheduler wrote that its caches do not show yet (tandem.assume), one AssumeCache per
kind of write. The controller assumes each write as it makes it and forgets it once a reconcile
sees it; the watches forget an echo no reconcile will come for (tandem.scheduler.watches). Slurm
writes carry no resourceVersion: each is forgotten when the job stream shows it."""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.assume import AssumeCache
from tandem.kube import JSON


@dataclass
class Assumed:
    # Pod uid (or group key) -> the job this process submitted for it, until the stream shows the
    # job or the Pod carries its id.
    submitted: AssumeCache[int] = field(default_factory=AssumeCache)
    # Pod uid -> the job id this process wrote on it, until the informer shows that write.
    recorded: AssumeCache[int] = field(default_factory=AssumeCache)
    # Job id -> cancel sent: its script is shutting down; once is enough until the job ends.
    cancelled: AssumeCache[bool] = field(default_factory=AssumeCache)
    # Pod uid -> the Node this process bound it to, until the informer shows spec.nodeName: a
    # reconcile in between would bind it again (a 409 and a retry: a tenth of the bindings in a
    # burst, issue 22).
    bound: AssumeCache[str] = field(default_factory=AssumeCache)
    # Pod uid -> the claim this process made for its nvidia.com/gpu, until the claim informer shows
    # one (a reconcile in between would make a second).
    made_claims: AssumeCache[JSON] = field(default_factory=AssumeCache)
    # Job id -> the nodes this process last told Slurm to exclude (Slurm's own report wins).
    excludes: AssumeCache[frozenset[str]] = field(default_factory=AssumeCache)
