"""A call's context as its checks and steps see it, on whichever thread they run: refusing it
(grpc.aio's `abort` is a coroutine a worker thread cannot await) and the time it has left; and
`waiting_call`, which serves a call written as steps around its waits (tandem.syncer.steps)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, Protocol, TypeVar

import grpc

from tandem.syncer.steps import Steps, WaitAsync, run_async

Request = TypeVar("Request")
Response = TypeVar("Response")


class CallContext(Protocol):
    """What a call's checks read of its gRPC context, on whichever thread they run."""

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn: ...

    def time_remaining(self) -> float | None: ...


class Refused(Exception):
    """A call refused in a step on a worker thread: its coroutine ends it with this status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class StepContext:
    """The call's context as its steps see it on a worker thread. grpc.aio's `abort` is a coroutine
    that a thread cannot await (called, it would do nothing): here it raises `Refused`."""

    def __init__(self, context: Any) -> None:
        self._context = context

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise Refused(code, details)

    def time_remaining(self) -> float | None:
        left = self._context.time_remaining()
        return float(left) if left is not None else None


def abort(context: CallContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("context.abort returned")  # it raises; this says so to the type checker


def require(context: CallContext, ok: object, message: str) -> None:
    if not ok:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)


def time_left(context: CallContext) -> float:
    left = context.time_remaining()
    return float(left) if left is not None else 3600.0


class Waits(Protocol):
    """A servicer whose calls wait on the caches (the waiters' `wait_async`)."""

    @property
    def wait_async(self) -> WaitAsync: ...


def waiting_call(
    steps_of: Callable[[Any, Request, CallContext], Steps[Response]],
) -> Callable[[Any, Request, Any], Awaitable[Response]]:
    """The gRPC method for a call written as steps: a coroutine on grpc.aio's loop that runs each
    step on the server's pool and each wait on the loop (tandem.syncer.steps.run_async), holding no
    thread while it waits; a refusal in a step (`Refused`) ends the call with its status."""

    @functools.wraps(steps_of)
    async def call(servicer: Waits, request: Request, context: Any) -> Response:
        try:
            return await run_async(steps_of(servicer, request, StepContext(context)), servicer.wait_async)
        except Refused as e:
            await context.abort(e.code, e.details)
            raise AssertionError("context.abort returned") from e

    return call
