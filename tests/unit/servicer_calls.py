"""Calling the syncer's gRPC servicer from a test as grpc.aio does: the calls that wait are
coroutines (tandem.syncer.service), run here on an event loop of their own; the rest are plain."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from tandem.syncer.steps import Steps

T = TypeVar("T")


def call(method: Callable[[Any, Any], Any], request: Any, context: Any) -> Any:
    """The method's reply (or what it raised), whichever kind of method it is."""
    result = method(request, context)
    return asyncio.run(result) if inspect.iscoroutine(result) else result


def steps_done(value: T) -> Steps[T]:
    """Steps (tandem.syncer.steps) that wait for nothing: a stand-in lock's at-once answer."""
    return value
    yield  # a generator: what the servicer drives
