"""Wrapping a gRPC method handler's behaviour for a grpc.aio server, whatever kind it is.

grpc.aio runs an `async def` behaviour (or an async generator) on its event loop, and a plain one
(function or generator) on its thread pool, with a context whose `abort` blocks until done. A
wrapper must be of the kind it wraps: a plain wrapper around a coroutine would hand grpc a coroutine
it never awaits, and a coroutine around a blocking behaviour would block the loop.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import grpc

# Why a call is refused before its behaviour runs: the status and its details.
Refusal = tuple[grpc.StatusCode, str]
Refuse = Callable[[Any], Refusal | None]
Behavior = Callable[[Any, Any], Any]

_KINDS = {
    "unary_unary": grpc.unary_unary_rpc_method_handler,
    "unary_stream": grpc.unary_stream_rpc_method_handler,
    "stream_unary": grpc.stream_unary_rpc_method_handler,
    "stream_stream": grpc.stream_stream_rpc_method_handler,
}


def guarded(handler: Any, refuse: Refuse) -> Any:
    """The handler, each call first asked `refuse(context)` and ended with its refusal if any."""
    for kind, make in _KINDS.items():
        behavior = getattr(handler, kind)
        if behavior is not None:
            return make(
                _guard(behavior, refuse, streams=kind.endswith("_stream")),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
    return handler


def spanned(handler: Any, scope: Callable[[], AbstractContextManager[Any]]) -> Any:
    """A unary handler whose behaviour runs inside `scope()` (a trace span); others unchanged."""
    behavior = handler.unary_unary
    if behavior is None:
        return handler
    wrapped: Behavior
    if inspect.iscoroutinefunction(behavior):

        async def wrapped(request: Any, context: Any) -> Any:
            with scope():
                return await behavior(request, context)

    else:

        def wrapped(request: Any, context: Any) -> Any:
            with scope():
                return behavior(request, context)

    return grpc.unary_unary_rpc_method_handler(
        wrapped,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def _guard(behavior: Behavior, refuse: Refuse, streams: bool) -> Behavior:
    if inspect.isasyncgenfunction(behavior):

        async def agen(request: Any, context: Any) -> AsyncIterator[Any]:
            if (refusal := refuse(context)) is not None:
                await context.abort(*refusal)
            # Closed with this stream, not whenever it is collected: its `finally` unsubscribes.
            async with contextlib.aclosing(behavior(request, context)) as items:
                async for item in items:
                    yield item

        return agen
    if inspect.iscoroutinefunction(behavior):

        async def coro(request: Any, context: Any) -> Any:
            if (refusal := refuse(context)) is not None:
                await context.abort(*refusal)
            return await behavior(request, context)

        return coro
    if streams:
        # grpc.aio calls a plain streaming behaviour on its loop and iterates what it returns on
        # the pool: a generator, so the check (and a blocking abort) runs on the pool too.
        def gen(request: Any, context: Any) -> Iterator[Any]:
            if (refusal := refuse(context)) is not None:
                context.abort(*refusal)
            yield from behavior(request, context)

        return gen

    def plain(request: Any, context: Any) -> Any:
        if (refusal := refuse(context)) is not None:
            context.abort(*refusal)
        return behavior(request, context)

    return plain
