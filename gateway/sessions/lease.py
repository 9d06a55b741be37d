"""Lock leases: who holds a lock, whether that holder is still alive, and renewal.

A lock's token is a holder id ``host/pid/start/random``: the host name, the process id, the
process's start time (so a recycled pid is not mistaken for the holder) and a random part.
A waiter that finds a lock held by a process of its own host that no longer runs (killed,
crashed) takes the lock over at once instead of waiting for the lease to run out. Holders
on other hosts are trusted until their lease expires; a holder that works long renews its
lease (:func:`renewing`) so the lease can stay short.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import cache

__all__ = ["holder_alive", "new_token", "renewing"]


@cache
def _host() -> str:
    return socket.gethostname().replace("/", "_") or "localhost"


def _start_time(pid: int) -> str:
    """The process start time in clock ticks since boot (Linux), "" when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return ""
    fields = stat[stat.rfind(")") + 2 :].split()
    # fields[0] is the state (field 3 of stat); the start time is field 22.
    if fields and fields[0] in ("Z", "X"):
        return "dead"
    return fields[19] if len(fields) > 19 else ""


@cache
def _me() -> str:
    pid = os.getpid()
    return f"{_host()}/{pid}/{_start_time(pid)}"


def new_token() -> str:
    """A lock token naming this process as the holder."""
    if os.getpid() != int(_me().split("/")[1]):  # forked since: name the child
        _me.cache_clear()
    return f"{_me()}/{secrets.token_hex(8)}"


def holder_alive(token: str) -> bool:
    """False only when ``token`` names a process of this host that is gone (or a recycled
    pid); True for other hosts, unreadable tokens and running processes."""
    parts = token.split("/")
    if len(parts) != 4 or parts[0] != _host():
        return True
    try:
        pid = int(parts[1])
    except ValueError:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it runs
        pass
    started = _start_time(pid)
    if started == "dead":
        return False
    return not (started and parts[2] and started != parts[2])


@contextlib.asynccontextmanager
async def renewing(renew: Callable[[], Awaitable[bool]], every: float) -> AsyncIterator[None]:
    """Call ``renew`` every ``every`` seconds while the block runs (stops when it returns
    False: the lease was lost)."""

    async def loop() -> None:
        while True:
            await asyncio.sleep(every)
            try:
                if not await renew():
                    return
            except Exception:  # a store hiccup: the lease may still run out, keep trying
                continue

    task = asyncio.create_task(loop(), name="lease-renewal")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.wait([task])  # (a cancellation of the caller still propagates)
