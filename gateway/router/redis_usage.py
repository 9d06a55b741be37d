"""Per-deployment rpm/tpm usage shared by every replica through Redis.

One hash per deployment and wall-clock minute (``gw:u:{deployment}:{minute}``, fields ``r``
requests and ``t`` tokens), expiring after two minutes (a fixed window, as LiteLLM's
``usage-based-routing``). A request is counted by :meth:`RedisUsage.reserve`, one Lua script
run atomically by Redis: it checks the deployment's ``rpm``/``tpm`` against the counts and
adds the request in the same step, so replicas racing for the last slot of a minute cannot
all pass (a read followed by an add would let every request between the two through).
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

# KEYS[1] the minute's hash; ARGV: rpm, tpm (-1: none), the request's tokens, the ttl.
# A tpm limit admits a first request of any size (LiteLLM: an oversized request is not
# refused forever), then only what fits.
_RESERVE_LUA = """
local r = tonumber(redis.call('HGET', KEYS[1], 'r') or '0')
local t = tonumber(redis.call('HGET', KEYS[1], 't') or '0')
local rpm, tpm, tokens = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if rpm >= 0 and r >= rpm then return 0 end
if tpm >= 0 and t > 0 and t + tokens > tpm then return 0 end
redis.call('HINCRBY', KEYS[1], 'r', 1)
redis.call('HINCRBY', KEYS[1], 't', tokens)
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""
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
        self._reserve = self._client.register_script(_RESERVE_LUA)
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

    async def reserve(self, deployment_id: str, rpm: int | None, tpm: int | None,
                      tokens: int) -> bool | None:
        """Count one request of ``tokens`` tokens to the deployment if it stays within its
        limits this minute, in one atomic step: True when counted, False when the deployment
        is at its ``rpm``/``tpm`` (nothing counted), None when Redis is unavailable."""
        key = usage_key(deployment_id, int(self.wall() // 60))
        args = [-1 if rpm is None else rpm, -1 if tpm is None else tpm, max(0, tokens), _TTL]
        try:
            passed = await self._reserve(keys=[key], args=args)
        except (RedisError, OSError) as err:
            self._down(err)
            return None
        self._warned = False
        return bool(passed)

    def seconds_left(self) -> float:
        """Seconds until the current wall-clock minute's counters no longer apply."""
        return 60.0 - self.wall() % 60.0

    async def close(self) -> None:
        """Close the connection pool."""
        await aclose(self._client)
