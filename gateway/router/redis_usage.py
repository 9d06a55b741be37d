"""Per-deployment rpm/tpm usage shared by every replica through Redis.

One hash per deployment and wall-clock minute (``gw:u:{deployment}:{minute}``, fields ``r``
requests and ``t`` tokens), incremented when a request is sent and expiring after two minutes.
When Redis cannot be reached the fleet falls back to this process's own counts (limits are
then enforced per replica) and logs it once; a request never fails because of it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.router.selection import Usage
from gateway.sessions.redis_store import aclose

log = logging.getLogger("gateway.router")

_TTL = 120
_TIMEOUT = 0.5  # seconds: usage counters must never hold a request up for long


def usage_key(deployment_id: str, minute: int) -> str:
    """The Redis key of a deployment's usage in one wall-clock minute."""
    return f"gw:u:{deployment_id}:{minute}"


class RedisUsage:
    """Shared current-minute usage counters."""

    def __init__(self, url: str) -> None:
        self._client: aioredis.Redis[bytes] = aioredis.Redis.from_url(
            url, decode_responses=False, socket_timeout=_TIMEOUT,
            socket_connect_timeout=_TIMEOUT)
        self._warned = False
        self.wall: Callable[[], float] = time.time  # wall-clock minutes, shared by replicas

    def _down(self, err: Exception) -> None:
        if not self._warned:
            self._warned = True
            log.warning("shared rpm/tpm counters unavailable (%s): counting in this process",
                        err.__class__.__name__)

    async def read(self, deployment_ids: list[str], now: float) -> dict[str, Usage] | None:
        """Current-minute usage by deployment (None when Redis is unavailable). ``now`` is
        unused: minutes are wall-clock so that every replica agrees on them."""
        minute = int(self.wall() // 60)
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for dep in deployment_ids:
                    pipe.hmget(usage_key(dep, minute), "r", "t")
                rows = await pipe.execute()
        except (RedisError, OSError) as err:
            self._down(err)
            return None
        self._warned = False
        return {dep: Usage(int(r or 0), int(t or 0))
                for dep, (r, t) in zip(deployment_ids, rows, strict=True)}

    async def add(self, deployment_id: str, tokens: int, now: float) -> None:
        """Count one request of ``tokens`` tokens to the deployment."""
        key = usage_key(deployment_id, int(self.wall() // 60))
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.hincrby(key, "r", 1)
                pipe.hincrby(key, "t", tokens)
                pipe.expire(key, _TTL)
                await pipe.execute()
        except (RedisError, OSError) as err:
            self._down(err)

    async def close(self) -> None:
        """Close the connection pool."""
        await aclose(self._client)
