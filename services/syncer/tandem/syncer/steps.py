"""A hook call written once, waited on two ways.

A lock call works in steps around a wait: review the node's credential and ask Slurm about the job,
record the hold, wait for the node sync to settle it, then read the outcome (and perhaps ask Slurm
again). Such a call is a generator: it yields each `Wait` and is sent back whether it ended ready.

`run` drives one on the caller's thread. `run_async` drives one for grpc.aio: each step on a worker
thread (a step may block on the API server or slurmrestd for seconds), each wait on the event loop,
where it holds no thread (issue 40: hundreds of prologs wait at once, each for up to a minute).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Generator
from dataclasses import dataclass
from typing import Generic, TypeVar

from tandem.syncer.waiters import Key

T = TypeVar("T")


@dataclass(frozen=True)
class Wait:
    """Until `ready()` holds, looked at again on each change to one of `keys`, or `timeout`
    seconds; the call is sent whether `ready()` held."""

    keys: tuple[Key, ...]
    ready: Callable[[], bool]
    timeout: float


Steps = Generator[Wait, bool, T]
WaitFor = Callable[[Collection[Key], Callable[[], bool], float], bool]
WaitAsync = Callable[[Collection[Key], Callable[[], bool], float], Awaitable[bool]]


def run(steps: Steps[T], wait_for: WaitFor) -> T:
    """Every step and every wait on this thread."""
    try:
        wait = next(steps)
        while True:
            wait = steps.send(wait_for(wait.keys, wait.ready, wait.timeout))
    except StopIteration as done:
        result: T = done.value
        return result


@dataclass(frozen=True)
class _Returned(Generic[T]):
    value: T


def _advance(steps: Steps[T], ready: bool | None) -> Wait | _Returned[T]:
    """One step: up to the next wait, or the end (a StopIteration cannot cross a Future)."""
    try:
        return next(steps) if ready is None else steps.send(ready)
    except StopIteration as done:
        return _Returned(done.value)


async def run_async(steps: Steps[T], wait_async: WaitAsync) -> T:
    """Each step on the loop's default executor (the server's bounded pool), each wait on the loop.
    Cancelled while it waits, the call ends there; cancelled during a step, that step still runs
    to its end on its thread (a bounded call to the API server or Slurm), and nothing after it."""
    outcome = await asyncio.to_thread(_advance, steps, None)
    while isinstance(outcome, Wait):
        try:
            ready = await wait_async(outcome.keys, outcome.ready, outcome.timeout)
        except BaseException:
            steps.close()  # suspended at its yield: none of it runs any more
            raise
        outcome = await asyncio.to_thread(_advance, steps, ready)
    return outcome.value
