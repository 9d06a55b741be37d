"""Where the failed-auth budget lives: this process, every worker of this machine, or every
replica.

With one worker the token buckets are in memory (:class:`LocalLimit`). With
``--workers N`` each worker is its own process, so a per-process bucket would let an address
try N times the documented number of keys: the buckets are then kept in a small SQLite file
in the workers' shared directory (:class:`SqliteLimit`). With a Redis URL configured
(``router_settings.redis_url`` or ``sessions.redis_url``) they are kept in Redis
(:class:`RedisLimit`), shared by every replica. A shared store that fails falls back to
this process's buckets (logged once): authentication never fails because of it.

Every kind answers the same two questions, with the same token-bucket arithmetic:
:meth:`~Limit.wait` (may this address try a key now?) and :meth:`~Limit.fail` (take a token
for a failed attempt: was there one?). Taking is atomic, so concurrent guesses from one
address never get more answers than the budget allows.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger("gateway.auth")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"  # the workers' shared directory (the supervisor's)
FILE_NAME = "auth-failures.sqlite3"
# Seconds: a slow Redis must not hold authentication up for long, yet a busy replica must
# not fall back to its own budget (that would let a loaded fleet take more guesses).
_REDIS_TIMEOUT = 2.0
_RETRY_AFTER = 5.0  # seconds a store that failed is left alone before it is tried again


class Limit(Protocol):
    """A failed-auth budget per source address."""

    async def wait(self, address: str) -> int:
        """Seconds until ``address`` may try a key (0: it may now)."""
        ...

    async def fail(self, address: str) -> tuple[bool, int]:
        """Take a token for a failed attempt: ``(there was one, seconds until the next)``.
        Without a token the attempt is answered ``429``, like one refused up front."""
        ...

    async def close(self) -> None:
        """Release files and connections."""
        ...


def refill(tokens: float, at: float, now: float, burst: float, rate: float) -> float:
    """The tokens of a bucket that had ``tokens`` at ``at``, at time ``now``."""
    return min(burst, tokens + max(0.0, now - at) * rate)


def seconds_to_token(tokens: float, rate: float) -> int:
    """Whole seconds until a bucket with ``tokens`` has one (0: it has)."""
    return 0 if tokens >= 1.0 else max(1, math.ceil((1.0 - tokens) / rate))


class Buckets(Protocol):
    """This process's token buckets (:class:`gateway.server.auth.FailedAuthLimiter`)."""

    def retry_after(self, address: str) -> int: ...

    def fail(self, address: str) -> bool: ...


class LocalLimit:
    """This process's buckets (one worker)."""

    def __init__(self, limiter: Buckets) -> None:
        self.limiter = limiter

    async def wait(self, address: str) -> int:
        """See :class:`Limit`."""
        return self.limiter.retry_after(address)

    async def fail(self, address: str) -> tuple[bool, int]:
        """See :class:`Limit`."""
        if self.limiter.retry_after(address):
            return False, self.limiter.retry_after(address)
        self.limiter.fail(address)
        return True, self.limiter.retry_after(address)

    async def close(self) -> None:
        """Nothing to release."""


class _Fallback:
    """A shared limit's way back to this process's buckets while its store fails (tried
    again every few seconds, so an unreachable store does not slow every request)."""

    def __init__(self, local: LocalLimit, what: str) -> None:
        self.local = local
        self._what = what
        self._warned = False
        self._retry_at = 0.0

    def skipping(self) -> bool:
        """True while a recent failure says not to try the store."""
        return self._retry_at > time.monotonic()

    def down(self, err: BaseException) -> LocalLimit:
        self._retry_at = time.monotonic() + _RETRY_AFTER
        if not self._warned:
            self._warned = True
            log.warning("the shared failed-auth budget (%s) is unavailable (%s): counting "
                        "failed authentications in this worker", self._what,
                        err.__class__.__name__)
        return self.local

    def up(self) -> None:
        self._warned = False


_SCHEMA = ("CREATE TABLE IF NOT EXISTS buckets (address TEXT PRIMARY KEY, tokens REAL NOT NULL,"
           " at REAL NOT NULL)")


class SqliteLimit:
    """Buckets in a SQLite file shared by the workers of one machine.

    Reads run on the event loop (a WAL read of one row never waits for a writer); taking a
    token is one ``BEGIN IMMEDIATE`` transaction in a worker thread. Full buckets are
    deleted now and then, so the file stays small.
    """

    def __init__(self, path: Path, burst: int, per_minute: float, local: LocalLimit,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._burst = float(burst)
        self._rate = per_minute / 60.0
        self._clock = clock
        self._fallback = _Fallback(local, str(path))
        self._reader: sqlite3.Connection | None = None
        self._writer: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # one writer transaction at a time in this process
        self._writes = 0

    def _connect(self) -> sqlite3.Connection:
        if not self.path.exists():
            self.path.touch(mode=0o600, exist_ok=True)  # addresses: owner only
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=5.0,
                               check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=OFF")  # a lost bucket after a crash is harmless
        conn.execute(_SCHEMA)
        return conn

    def _read(self, address: str) -> float:
        if self._reader is None:
            self._reader = self._connect()
        row = self._reader.execute("SELECT tokens, at FROM buckets WHERE address = ?",
                                   (address,)).fetchone()
        if row is None:
            return self._burst
        return refill(row[0], row[1], self._clock(), self._burst, self._rate)

    def _take(self, address: str) -> tuple[bool, float]:
        with self._lock:
            if self._writer is None:
                self._writer = self._connect()
            conn = self._writer
            now = self._clock()
            conn.execute("BEGIN IMMEDIATE")
            try:
                row = conn.execute("SELECT tokens, at FROM buckets WHERE address = ?",
                                   (address,)).fetchone()
                tokens = (self._burst if row is None
                          else refill(row[0], row[1], now, self._burst, self._rate))
                took = tokens >= 1.0
                if took:
                    tokens -= 1.0
                conn.execute("INSERT OR REPLACE INTO buckets VALUES (?, ?, ?)",
                             (address, tokens, now))
                self._writes += 1
                if self._writes % 256 == 0:  # buckets full again are as good as absent
                    conn.execute("DELETE FROM buckets WHERE at < ?",
                                 (now - self._burst / self._rate,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return took, tokens

    async def wait(self, address: str) -> int:
        """See :class:`Limit`."""
        if self._fallback.skipping():
            return await self._fallback.local.wait(address)
        try:
            tokens = self._read(address)
        except sqlite3.Error as err:
            return await self._fallback.down(err).wait(address)
        return seconds_to_token(tokens, self._rate)

    async def fail(self, address: str) -> tuple[bool, int]:
        """See :class:`Limit`."""
        if self._fallback.skipping():
            return await self._fallback.local.fail(address)
        try:
            took, tokens = await asyncio.to_thread(self._take, address)
        except sqlite3.Error as err:
            return await self._fallback.down(err).fail(address)
        self._fallback.up()
        return took, seconds_to_token(tokens, self._rate)

    async def close(self) -> None:
        """Close the file's connections (the writer once a transaction a cancelled request
        left running in its thread is over: closing it under a statement crashes)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        await asyncio.to_thread(self._close_writer)

    def _close_writer(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.close()
                self._writer = None


# KEYS[1] bucket; ARGV burst, rate (tokens/s), now, ttl. Returns {took, tokens as text}.
_TAKE_LUA = """
local b = redis.call('HMGET', KEYS[1], 't', 'at')
local burst, rate, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tokens = burst
if b[1] then
  tokens = math.min(burst, tonumber(b[1]) + math.max(0, now - tonumber(b[2])) * rate)
end
local took = 0
if tokens >= 1 then
  tokens = tokens - 1
  took = 1
end
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]))
return {took, tostring(tokens)}
"""


class RedisLimit:
    """Buckets in Redis, shared by every replica (one hash per address, expiring once it
    would be full again); taking a token is one Lua script, so it is atomic."""

    def __init__(self, url: str, burst: int, per_minute: float, local: LocalLimit,
                 clock: Callable[[], float] = time.time) -> None:
        self._url = url
        self._burst = float(burst)
        self._rate = per_minute / 60.0
        self._ttl = max(1, math.ceil(burst / self._rate) + 1)
        self._clock = clock
        self._fallback = _Fallback(local, "Redis")
        self._client: Any = None
        self._take: Any = None

    def _redis(self) -> Any:
        if self._client is None:
            import redis.asyncio as aioredis  # only when a Redis URL is configured

            self._client = aioredis.Redis.from_url(
                self._url, decode_responses=False, socket_timeout=_REDIS_TIMEOUT,
                socket_connect_timeout=_REDIS_TIMEOUT)
            self._take = self._client.register_script(_TAKE_LUA)
        return self._client

    @staticmethod
    def key(address: str) -> str:
        """The Redis key of an address's bucket."""
        return f"gw:authfail:{address}"

    async def wait(self, address: str) -> int:
        """See :class:`Limit`."""
        from redis.exceptions import RedisError

        if self._fallback.skipping():
            return await self._fallback.local.wait(address)
        try:
            row = await self._redis().hmget(self.key(address), "t", "at")
        except (RedisError, OSError) as err:
            return await self._fallback.down(err).wait(address)
        if row[0] is None or row[1] is None:
            return 0
        tokens = refill(float(row[0]), float(row[1]), self._clock(), self._burst, self._rate)
        return seconds_to_token(tokens, self._rate)

    async def fail(self, address: str) -> tuple[bool, int]:
        """See :class:`Limit`."""
        from redis.exceptions import RedisError

        if self._fallback.skipping():
            return await self._fallback.local.fail(address)
        self._redis()
        try:
            took, tokens = await self._take(
                keys=[self.key(address)],
                args=[self._burst, self._rate, self._clock(), self._ttl])
        except (RedisError, OSError) as err:
            return await self._fallback.down(err).fail(address)
        self._fallback.up()
        return bool(took), seconds_to_token(float(tokens), self._rate)

    async def close(self) -> None:
        """Close the connection pool."""
        if self._client is not None:
            from gateway.sessions.redis_store import aclose

            await aclose(self._client)
            self._client = None


def shared_limit(local: LocalLimit, burst: int, per_minute: float,
                 redis_url: str | None) -> Limit:
    """The budget for this process: Redis when a URL is given, the workers' shared file
    under ``--workers N``, else ``local``."""
    if redis_url:
        return RedisLimit(redis_url, burst, per_minute, local)
    shared_dir = os.environ.get(MULTIPROC_ENV)
    if shared_dir:
        return SqliteLimit(Path(shared_dir) / FILE_NAME, burst, per_minute, local)
    return local
