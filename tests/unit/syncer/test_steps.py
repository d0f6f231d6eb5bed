"""A hook call is written once as steps around its waits (tandem.syncer.steps): driven on one
thread, or for grpc.aio with each step on a worker thread and each wait on the event loop, the
same steps come to the same answer; a call cancelled while it waits runs none of its later steps."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Callable, Collection

import pytest

from tandem.syncer.steps import Steps, Wait, run, run_async
from tandem.syncer.waiters import Key, node_key


class Recorded:
    """Steps that wait twice, recording which thread ran each step."""

    def __init__(self) -> None:
        self.threads: list[str] = []
        self.finished = False

    def steps(self, fail: bool = False) -> Steps[str]:
        self.threads.append(threading.current_thread().name)
        first = yield Wait((node_key("cpu-001"),), lambda: True, 1.0)
        self.threads.append(threading.current_thread().name)
        second = yield Wait((node_key("cpu-002"),), lambda: False, 1.0)
        self.threads.append(threading.current_thread().name)
        if fail:
            raise LookupError("no slurmd Pod")
        self.finished = True
        return f"{first} {second}"


def _answer(keys: Collection[Key], ready: Callable[[], bool], timeout: float) -> bool:
    return ready()


async def _answer_async(keys: Collection[Key], ready: Callable[[], bool], timeout: float) -> bool:
    return ready()


def test_on_one_thread_every_step_runs_there() -> None:
    call = Recorded()
    assert run(call.steps(), _answer) == "True False"
    assert set(call.threads) == {threading.current_thread().name}


def test_for_grpc_aio_the_steps_run_on_worker_threads_and_come_to_the_same_answer() -> None:
    call = Recorded()
    loop_thread: list[str] = []

    async def main() -> str:
        loop_thread.append(threading.current_thread().name)
        return await run_async(call.steps(), _answer_async)

    assert asyncio.run(main()) == "True False"
    assert len(call.threads) == 3 and loop_thread[0] not in call.threads


def test_a_step_that_raises_raises_either_way() -> None:
    with pytest.raises(LookupError, match="no slurmd Pod"):
        run(Recorded().steps(fail=True), _answer)
    with pytest.raises(LookupError, match="no slurmd Pod"):
        asyncio.run(run_async(Recorded().steps(fail=True), _answer_async))


def test_a_call_cancelled_while_it_waits_runs_none_of_its_later_steps() -> None:
    call = Recorded()
    steps = call.steps()
    waiting = asyncio.Event()

    async def never(keys: Collection[Key], ready: Callable[[], bool], timeout: float) -> bool:
        waiting.set()
        await asyncio.sleep(3600)
        return False

    async def main() -> None:
        task = asyncio.ensure_future(run_async(steps, never))
        await waiting.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert inspect.getgeneratorstate(steps) == inspect.GEN_CLOSED
    assert len(call.threads) == 1 and not call.finished
