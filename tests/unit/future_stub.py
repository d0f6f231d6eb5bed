"""A stand-in syncer in the shape of a generated gRPC stub: each method callable, and with the
`.future(...)` form the hooks gateway starts its calls with (tandem.hooks.routes). The stand-in's
method runs on a thread of its own, so one that blocks (a lock held until the test says) keeps
only its own thread waiting, as a real call keeps none of the gateway's."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class FutureStub:
    def __init__(self, fake: Any) -> None:
        self.fake = fake

    def __getattr__(self, name: str) -> _Method:
        return _Method(getattr(self.fake, name))


class _Method:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def future(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """What a grpc future gives: `result()` (the reply, or the RpcError raised) and
        `add_done_callback`."""
        done: Future[Any] = Future()

        def run() -> None:
            try:
                done.set_result(self.fn(*args, **kwargs))
            except BaseException as e:
                done.set_exception(e)

        threading.Thread(target=run, name="fake-syncer-call", daemon=True).start()
        return done
