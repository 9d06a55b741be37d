"""Redis session store: gateway replicas sharing one Redis see each other's state.

Key layout (``{sid}`` is the session id verbatim; every suffix is colon-free or ends in
a hex digest, so two sessions can never map to the same key)::

    gw:s:{sid}:idx              hash  prefix_hash -> prefix_len
    gw:s:{sid}:rec              hash  prefix_hash -> encode_record(record)
    gw:s:{sid}:owner            str   hash_client_key(owner)
    gw:s:{sid}:pending          str   encode_record(background result)
    gw:s:{sid}:archive          list  the archive (see ``archive.py``)
    gw:s:{sid}:lock:{sha(key)}  str   holder token (gateway.sessions.lease), PX ttl
    gw:touched                  zset  sid -> time of its last write (retention)

Records are written with HSETNX inside MULTI, so the first record for a prefix wins.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.sessions.hashing import hash_client_key
from gateway.sessions.lease import holder_alive, new_token, renewing
from gateway.sessions.records import CompactionRecord, decode_record, encode_record
from gateway.sessions.store import best_prefix

__all__ = ["TOUCHED_KEY", "RedisSessionStore", "aclose", "connect", "session_key"]

TOUCHED_KEY = "gw:touched"
SESSION_SUFFIXES = ("idx", "rec", "owner", "pending", "archive")
_KEY_PATTERN = re.compile(r"gw:s:(.+):(?:idx|rec|owner|pending|archive|lock:[0-9a-f]{64})")

_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""
_RENEW_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
_TAKEOVER_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
    return 1
end
return 0
"""


def session_key(session_id: str, suffix: str) -> str:
    """Return the Redis key ``gw:s:{session_id}:{suffix}``."""
    if not session_id:
        raise ValueError("session_id must be non-empty")
    return f"gw:s:{session_id}:{suffix}"


def connect(url: str) -> aioredis.Redis[bytes]:
    """Open a bytes-mode client (replacement bytes must come back unchanged)."""
    # Bounded waits: a store that went away must fail a call in seconds, not hang it (the
    # compaction service then degrades to memory). One retry on a new connection: after a
    # restart of Redis the pooled connections are dead, the server is not.
    client: aioredis.Redis[bytes] = aioredis.Redis.from_url(
        url, decode_responses=False, socket_connect_timeout=2.0, socket_timeout=5.0,
        retry=Retry(NoBackoff(), 1))
    return client


async def aclose(client: Any) -> None:
    """Close a client with ``aclose()`` (``close()`` is deprecated since redis-py 5).

    Typed ``Any`` because the installed ``types-redis`` stubs predate ``aclose``.
    """
    await client.aclose()


class RedisSessionStore:
    """:class:`~gateway.sessions.store.SessionStore` on Redis (``redis.asyncio``)."""

    def __init__(self, url: str) -> None:
        self._client = connect(url)
        self._release = self._client.register_script(_RELEASE_LUA)
        self._renew = self._client.register_script(_RENEW_LUA)
        self._takeover = self._client.register_script(_TAKEOVER_LUA)

    async def put_compaction(self, record: CompactionRecord) -> None:
        """Store ``record``; ignored if its (session, prefix_hash) is already stored."""
        sid = record.session_id
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hsetnx(session_key(sid, "rec"), record.prefix_hash, encode_record(record))
            pipe.hsetnx(session_key(sid, "idx"), record.prefix_hash, str(record.prefix_len))
            pipe.zadd(TOUCHED_KEY, {sid: time.time()})
            await pipe.execute()

    async def find_compaction(
        self, session_id: str, chain: Sequence[str]
    ) -> CompactionRecord | None:
        """Return the record of the longest stored prefix of ``chain``, or ``None``."""
        if not chain:
            return None
        raw_idx: dict[Any, Any] = await self._client.hgetall(session_key(session_id, "idx"))
        entries = ((int(v), _text(k)) for k, v in raw_idx.items())
        best = best_prefix(entries, chain)
        if best is None:
            return None
        blob = await self._client.hget(session_key(session_id, "rec"), best[1])
        return None if blob is None else decode_record(blob)

    async def has_records(self, session_id: str) -> bool:
        """True when the session has a compaction or a parked result."""
        found = await self._client.exists(session_key(session_id, "idx"),
                                          session_key(session_id, "pending"))
        return bool(found)

    async def put_pending(self, session_id: str, record: CompactionRecord) -> None:
        """Park a background result for the session, replacing any parked one."""
        await self._client.set(session_key(session_id, "pending"), encode_record(record))
        await self._client.zadd(TOUCHED_KEY, {session_id: time.time()})

    async def take_pending(self, session_id: str) -> CompactionRecord | None:
        """Remove and return the parked result (GETDEL: one replica gets it), or ``None``."""
        blob = await self._client.getdel(session_key(session_id, "pending"))
        return None if blob is None else decode_record(blob)

    async def claim_owner(self, session_id: str, owner: str) -> bool:
        """Claim the session for the client key ``owner`` (stored hashed)."""
        key = session_key(session_id, "owner")
        owner_hash = hash_client_key(owner)
        if await self._client.set(key, owner_hash, nx=True):
            await self._client.zadd(TOUCHED_KEY, {session_id: time.time()})
            return True
        current = await self._client.get(key)
        return current is not None and _text(current) == owner_hash

    async def get_owner(self, session_id: str) -> str | None:
        """Return the owning key's hash, or ``None``."""
        current = await self._client.get(session_key(session_id, "owner"))
        return None if current is None else _text(current)

    @contextlib.asynccontextmanager
    async def lock(
        self, session_id: str, key: str, ttl: float, *, renew: bool = False
    ) -> AsyncIterator[bool]:
        """Try the lock ``(session_id, key)`` (SET NX PX); yields True if acquired.

        Release deletes the key only if it still holds this holder's token (Lua), so a
        holder whose lock expired cannot release the next holder's lock. A lock held by a
        process of this host that is gone is taken over at once (compare-and-set). With
        ``renew`` the lease is extended every ``ttl / 3`` seconds while held.
        """
        name = session_key(session_id, "lock:" + hashlib.sha256(key.encode()).hexdigest())
        token = new_token()
        ttl_ms = max(1, int(ttl * 1000))
        acquired = bool(await self._client.set(name, token, nx=True, px=ttl_ms))
        if not acquired:
            current = await self._client.get(name)
            if current is not None and not holder_alive(_text(current)):
                acquired = bool(await self._takeover(keys=[name], args=[current, token, ttl_ms]))
        try:
            if acquired and renew:
                async with renewing(lambda: self._renew_lease(name, token, ttl_ms), ttl / 3):
                    yield True
            else:
                yield acquired
        finally:
            if acquired:
                await self._release(keys=[name], args=[token])

    async def last_writes(self) -> dict[str, float]:
        """Every stored session and the time of its last write. Sessions written before
        writes were tracked are adopted now (their retention starts today)."""
        tracked = {_text(k): float(v)
                   for k, v in await self._client.zrange(TOUCHED_KEY, 0, -1, withscores=True)}
        now = time.time()
        async for raw in self._client.scan_iter(match="gw:s:*", count=1000):
            found = _KEY_PATTERN.fullmatch(_text(raw))
            if found is not None and found.group(1) not in tracked:
                tracked[found.group(1)] = now
                await self._client.zadd(TOUCHED_KEY, {found.group(1): now}, nx=True)
        return tracked

    async def delete_session(self, session_id: str) -> bool:
        """Remove every key of a session (records, owner, parked result, archive)."""
        keys = [session_key(session_id, suffix) for suffix in SESSION_SUFFIXES]
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.delete(*keys)
            pipe.zrem(TOUCHED_KEY, session_id)
            removed, _ = await pipe.execute()
        return int(removed) > 0

    async def _renew_lease(self, name: str, token: str, ttl_ms: int) -> bool:
        return bool(await self._renew(keys=[name], args=[token, ttl_ms]))

    async def close(self) -> None:
        """Close the client's connections."""
        await aclose(self._client)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
