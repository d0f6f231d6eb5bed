"""How far a Pod's placement key travels through the scheduler (issue 52): a Pod alone and a gang
followed from their informer events to their binds, every call whose arguments carry the key
(the key itself, or a value that holds it: a group, an observation) recorded in order.

    python -m tests.unit.key_walk    # each walk, call by call, and its counts

`functions`: the distinct functions the key passed through; `returns`: how often the walk came
back into a module it had left (consecutive calls in one module count once)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any
from unittest import mock

from tandem import placeholder
from tandem.scheduler import groups
from tandem.scheduler.controller import Controller
from tandem.scheduler.watches import SchedulerWatches
from tandem.slurm.models import Job, JobStatus
from tandem.workqueue import WorkQueue
from tests.unit.scheduler.scheduler_world import (
    POD,
    SCHEDULER,
    FakePodCache,
    make_controller,
    make_gang,
    make_member,
    make_pod,
    make_tracker,
    report,
)

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = (ROOT / "services", ROOT / "libs")


@dataclass(frozen=True)
class Walk:
    key: str
    calls: tuple[str, ...]  # module:function, in call order
    # The calls that came back into a module deeper down the same call: module A calls B, and B
    # (or what B calls) calls A again with the key.
    reentries: tuple[str, ...]
    bound: tuple[str, ...]  # the Pods the walk ended by binding

    @property
    def functions(self) -> int:
        return len(set(self.calls))

    @property
    def returns(self) -> int:
        return len(self.reentries)

    def apart(self, prefix: str) -> Walk:
        """The calls marked with `prefix` (a lock call's node pass: "pass "), or (prefix "") the others."""
        mine = tuple(c for c in self.calls if c.startswith("pass ") == bool(prefix))
        return Walk(self.key, mine, tuple(r for r in self.reentries if r in mine), self.bound)


def _carries(value: object, key: str, depth: int = 0) -> bool:
    if isinstance(value, str):
        return value == key
    if depth > 1 or value is None or isinstance(value, int | float | bool | bytes | dict | list):
        return False
    if isinstance(value, tuple):
        return any(_carries(v, key, depth + 1) for v in value)
    try:
        if str(value) == key:
            return True
        own = getattr(value, "key", None)
        node = getattr(value, "slurm_node", None)
    except AttributeError:
        return False  # an object being made (its __post_init__): its fields come next
    return key in (own, node)


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).parts[-2:]).removesuffix(".py")


@contextmanager
def _following(key: str) -> Iterator[tuple[list[str], list[str]]]:
    calls: list[str] = []
    reentries: list[str] = []
    lock = threading.Lock()

    def each_thread(frame: FrameType, event: str, arg: object) -> None:
        # Every thread's own stack (the node sync's workers, the call's steps), one list of calls.
        mine = local.__dict__.setdefault("stack", [])
        with lock:
            _profile(frame, event, mine)

    local = threading.local()

    def _profile(frame: FrameType, event: str, stack: list[tuple[FrameType, str, bool]]) -> None:
        if event == "return":
            if stack and stack[-1][0] is frame:
                stack.pop()
            return
        if event != "call":
            return
        path = Path(frame.f_code.co_filename)
        if not any(path.is_relative_to(p) for p in PRODUCT):
            return
        code = frame.f_code
        module = _module(path)
        args = [frame.f_locals.get(n) for n in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]]
        carries = any(_carries(a, key) for a in args)
        if carries:
            call = f"{module}:{code.co_qualname}"
            # The node sync's passes run on its runner's workers: marked, so that a lock call's
            # own walk (the call until it waits) reads apart from the pass it waits for.
            if threading.current_thread().name.startswith("node-sync"):
                call = "pass " + call
            calls.append(call)
            carrying = [m for _, m, c in stack if c]
            if carrying and carrying[-1] != module and module in carrying:
                reentries.append(call)
        stack.append((frame, module, carries))

    sys.setprofile(each_thread)
    threading.setprofile(each_thread)
    try:
        yield calls, reentries
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


def _drain(queue: WorkQueue, reconcile: Callable[[str], Any]) -> None:
    while len(queue):
        key = queue.get()
        if key is None:
            return
        try:
            reconcile(str(key))
        finally:
            queue.done(key)


def _walk(controller: Controller, kube: Any, members: list[dict[str, Any]], key: str, job: JobStatus) -> Walk:
    queue = WorkQueue()
    watches = SchedulerWatches(controller.caches, controller.jobs, controller.assumed, queue)
    controller.jobs.on_change = watches.on_job
    groups.target.cache_clear()  # a key seen for the first time: its resolution is on the walk
    with _following(key) as (calls, reentries):
        for pod in members:
            watches.on_pod(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", None, pod)
        _drain(queue, controller.reconcile)  # the submit
        report(controller.jobs, job)  # the job's script started: the stream says so
        _drain(queue, controller.reconcile)  # the bind
    bound = tuple(
        c.args[0].split("/")[-2] for c in kube.post.call_args_list if c.args[0].endswith("/binding")
    )
    return Walk(key, tuple(calls), tuple(reentries), bound)


def pod_alone() -> Walk:
    from tandem.scheduler.caches import Caches

    pods = FakePodCache()
    pods.synced = True
    pod = make_pod()
    pods.pods = {POD.key: pod}
    controller, slurm, kube = make_controller(pods, make_tracker(hosts={"cpu-001": "node-001"}))
    assert isinstance(controller.caches, Caches)
    slurm.submit_job.return_value = 7
    name = placeholder.job_name(POD, SCHEDULER)
    job = JobStatus(
        Job(job_id=7, name=name, admin_comment=name, state="RUNNING", nodes=("cpu-001",)), started=True
    )
    return _walk(controller, kube, [pod], POD.key, job)


def gang() -> Walk:
    members = [make_member(0), make_member(1)]
    controller, _, kube = make_gang(*members)
    ref = placeholder.PodRef(POD.namespace, "pg:train", "pg-uid")
    name = placeholder.job_name(ref, SCHEDULER)
    job = JobStatus(
        Job(job_id=9, name=name, admin_comment=name, state="RUNNING", nodes=("cpu-001", "cpu-002")),
        started=True,
    )
    return _walk(controller, kube, members, f"{POD.namespace}/pg:train", job)


def lock_call() -> Walk:
    """A prolog's AcquireNodeLock for cpu-001, from the call to the lock written (the syncer)."""
    from tandem.v1 import syncer_pb2
    from tests.unit.servicer_calls import call
    from tests.unit.syncer_world import Stack, World, _mirror, _slurmd, node_token_for

    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_node("node-001")
    context = mock.Mock()
    context.time_remaining.return_value = 10.0
    with _following("cpu-001") as (calls, reentries):
        stack = Stack(world, _mirror(synced=True))
        begin = len(calls)  # what the stack's start did is not the call's
        answer = call(
            stack.servicer.AcquireNodeLock,
            syncer_pb2.AcquireNodeLockRequest(
                slurm_node="cpu-001", job_id=42, strict=True, node_token=node_token_for("cpu-001")
            ),
            context,
        )
        stack.close()
    locked = ("cpu-001",) if world.lock_of("cpu-001") == "locked_strict" and answer is not None else ()
    made = calls[begin:]
    return Walk("cpu-001", tuple(made), tuple(r for r in reentries if r in made), locked)


if __name__ == "__main__":
    lock = lock_call()
    for walk in (pod_alone(), gang(), lock.apart(""), lock.apart("pass ")):
        counts = f"{walk.functions} functions, {walk.returns} returns into a module left"
        print(f"# {walk.key}: {counts}; bound {', '.join(walk.bound)}")
        for i, call in enumerate(walk.calls, 1):
            print(f"{i:3} {call}")
        print("# returns:", ", ".join(walk.reentries))
