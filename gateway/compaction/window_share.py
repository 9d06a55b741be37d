"""Learned context windows shared between replicas through Redis (when configured).

One string key per route, ``gw:window:<route>``. Reads are throttled per route so the
hot path asks Redis at most once per ``LOOKUP_EVERY`` seconds; a store error only means
the window is not shared (each replica then learns it from its own first refusal).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from gateway.sessions.errors import store_errors

log = logging.getLogger("gateway.compaction")

LOOKUP_EVERY = 30.0
_PREFIX = "gw:window:"


class SharedWindows:
    """Get and put learned windows in Redis."""

    def __init__(self, url: str, clock: Callable[[], float] = time.monotonic) -> None:
        from gateway.sessions.redis_store import connect  # (Redis only when configured)

        self._client = connect(url)
        self._clock = clock
        self._looked: dict[str, float] = {}

    async def lookup(self, route: str) -> int | None:
        """The window another replica learned for ``route`` (throttled), or None."""
        now = self._clock()
        if now - self._looked.get(route, -LOOKUP_EVERY) < LOOKUP_EVERY:
            return None
        self._looked[route] = now
        try:
            raw = await self._client.get(_PREFIX + route)
        except store_errors():
            log.warning("could not read the learned window of %s from redis", route)
            return None
        try:
            return int(raw) if raw is not None else None
        except ValueError:
            return None

    async def put(self, route: str, window: int) -> None:
        """Share ``window`` as the learned window of ``route``."""
        try:
            await self._client.set(_PREFIX + route, str(window))
        except store_errors():
            log.warning("could not share the learned window of %s through redis", route)

    async def close(self) -> None:
        """Close the connection pool."""
        from gateway.sessions.redis_store import aclose

        await aclose(self._client)
