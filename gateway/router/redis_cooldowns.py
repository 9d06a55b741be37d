"""Deployment cooldowns shared by every replica through Redis.

A replica that takes a deployment out of rotation writes ``gw:cd:{deployment}`` with the
cooldown as its expiry; every replica looks at its groups' keys when it picks a deployment,
at most once a second per group (a cooldown lasts seconds: a second's staleness is the price
of not asking Redis on every request), and cools the deployment for what is left of it. When
Redis cannot be reached, cooldowns stay per replica (one warning); a request never fails
because of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.sessions.redis_store import aclose

log = logging.getLogger("gateway.router")

_TIMEOUT = 0.5  # seconds: cooldown lookups must never hold a request up for long
REFRESH = 1.0  # seconds between two looks at one group's cooldowns


def cooldown_key(deployment_id: str) -> str:
    """The Redis key of a deployment's shared cooldown."""
    return f"gw:cd:{deployment_id}"


class SharedCooldowns:
    """Publishes this replica's cooldowns and reads the others' (see the module docstring)."""

    def __init__(self, url: str, clock: Callable[[], float]) -> None:
        self._client: aioredis.Redis[bytes] = aioredis.Redis.from_url(
            url, decode_responses=False, socket_timeout=_TIMEOUT,
            socket_connect_timeout=_TIMEOUT)
        self._clock = clock
        self._looked: dict[str, float] = {}  # group -> when its keys were last read
        self._tasks: set[asyncio.Task[None]] = set()
        self._warned = False

    def _down(self, err: Exception) -> None:
        if not self._warned:
            self._warned = True
            log.warning("shared deployment cooldowns unavailable (%s): cooling down per "
                        "replica", err.__class__.__name__)

    def publish(self, deployment_id: str, seconds: float) -> None:
        """Tell the other replicas (in the background) that ``deployment_id`` cools down."""
        task = asyncio.get_running_loop().create_task(self._publish(deployment_id, seconds))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish(self, deployment_id: str, seconds: float) -> None:
        try:
            await self._client.set(cooldown_key(deployment_id), b"1",
                                   px=max(1, int(seconds * 1000)))
        except (RedisError, OSError) as err:
            self._down(err)
            return
        self._warned = False

    async def remaining(self, group: str, deployment_ids: Iterable[str],
                        ) -> dict[str, float] | None:
        """Seconds of shared cooldown left per deployment of ``group`` (only those cooling),
        or None when the group was looked at less than :data:`REFRESH` ago or Redis is
        unavailable."""
        now = self._clock()
        if now - self._looked.get(group, float("-inf")) < REFRESH:
            return None
        self._looked[group] = now
        ids = list(deployment_ids)
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for dep in ids:
                    pipe.pttl(cooldown_key(dep))
                ttls = await pipe.execute()
        except (RedisError, OSError) as err:
            self._down(err)
            return None
        self._warned = False
        return {dep: ms / 1000 for dep, ms in zip(ids, ttls, strict=True)
                if isinstance(ms, int) and ms > 0}

    async def close(self) -> None:
        """Finish the pending writes and close the connection pool."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await aclose(self._client)
