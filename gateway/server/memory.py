"""Handing memory freed by finished requests back to the system.

A request's parsed history is thousands of objects and long strings, freed when the request
ends. glibc's allocator keeps freed pages for reuse, so after a burst of large histories the
process stays at its peak: about 35 MB more than needed after the benchmark's latency part.
``malloc_trim(0)`` returns the free pages. :class:`MemoryTrimmer` calls it every ``interval``
seconds in a worker thread (ctypes releases the GIL; a call takes a few milliseconds when
there is memory to return and a fraction of one when there is none). Without glibc (musl,
macOS) it does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
from collections.abc import Callable

log = logging.getLogger("gateway.server")


def glibc_trim() -> Callable[[], int] | None:
    """glibc's ``malloc_trim(0)`` as a callable, or None when the C library has none."""
    try:  # the symbols the process already has (no library search at start-up)
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: int(trim(0))


class MemoryTrimmer:
    """Trims the allocator every ``interval`` seconds until closed."""

    def __init__(self, interval: float, trim: Callable[[], int]) -> None:
        self._interval = interval
        self._trim = trim
        self.runs = 0
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def trim_now(self) -> None:
        """One trim, off the event loop."""
        await asyncio.to_thread(self._trim)
        self.runs += 1

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.trim_now()
            except Exception:  # never let housekeeping take the worker down
                log.exception("memory trim failed")

    async def close(self) -> None:
        """Stop trimming."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


def start_memory_trim(interval: float) -> MemoryTrimmer | None:
    """Start trimming (inside a running loop); None when ``interval`` is 0 or the C library
    cannot trim."""
    trim = glibc_trim() if interval > 0 else None
    if trim is None:
        if interval > 0:
            log.debug("no malloc_trim in this C library: freed memory is not trimmed")
        return None
    return MemoryTrimmer(interval, trim)
