"""CPU-heavy steps on a big request body, off the event loop.

Parsing, checking, repairing or counting a body of many megabytes takes whole seconds of
CPU; on the event loop that stalls every other request of the worker (``/healthz``
included). :func:`off_loop` runs such a step in a worker thread when the body is big, and
inline when it is small (a thread hop costs more than the step then).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ParamSpec, TypeVar

# Bodies up to this size are handled on the event loop (well under 10 ms of work).
INLINE_BYTES = 512 * 1024

P = ParamSpec("P")
T = TypeVar("T")


async def off_loop(size: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``: in a worker thread when ``size`` (the body's bytes) is over
    :data:`INLINE_BYTES`, else right here. ``fn`` must only touch what it is given."""
    if size <= INLINE_BYTES:
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)
