"""Redis-specific behaviour on a real redis-server: key layout, secrecy, lock expiry."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.sessions import RedisSessionStore, prefix_chain
from gateway.sessions.redis_store import aclose, connect, session_key
from tests.sessions.factories import history, record_for


@pytest.fixture
async def raw(redis_server: str) -> AsyncIterator[aioredis.Redis[bytes]]:
    """A plain client on the test server, to look at what the store wrote."""
    client = connect(redis_server)
    yield client
    await aclose(client)


async def _all_keys(client: aioredis.Redis[bytes]) -> list[bytes]:
    return [k async for k in client.scan_iter(match="*")]


async def test_every_key_is_namespaced(redis_server: str, raw: aioredis.Redis[bytes]) -> None:
    store = RedisSessionStore(redis_server)
    h = history(4)
    await store.put_compaction(record_for("ns", h, 2, "x"))
    await store.put_pending("ns", record_for("ns", h, 3, "y", kind="background"))
    await store.claim_owner("ns", "k")
    async with store.lock("ns", "k", ttl=30) as got:
        assert got
        keys = await _all_keys(raw)
    await store.close()
    # The session's five keys, and the one index of last writes (for retention).
    assert len([k for k in keys if k.startswith(b"gw:s:ns:")]) == 5
    assert set(keys) - {k for k in keys if k.startswith(b"gw:s:ns:")} == {b"gw:touched"}


async def test_client_keys_are_never_stored(redis_server: str, raw: aioredis.Redis[bytes]) -> None:
    store = RedisSessionStore(redis_server)
    assert await store.claim_owner("sec", "sk-live-SECRETSECRET")
    await store.close()
    for key in await _all_keys(raw):
        assert b"SECRETSECRET" not in key
        assert b"SECRETSECRET" not in (await raw.dump(key) or b"")


async def test_a_restarted_replica_sees_existing_records(redis_server: str) -> None:
    h = history(6)
    rec = record_for("re", h, 5, "persisted in redis")
    first = RedisSessionStore(redis_server)
    await first.put_compaction(rec)
    await first.close()
    second = RedisSessionStore(redis_server)
    try:
        assert await second.find_compaction("re", prefix_chain(h)) == rec
    finally:
        await second.close()


async def test_session_ids_with_separators_do_not_collide(redis_server: str) -> None:
    store = RedisSessionStore(redis_server)
    h = history(3)
    try:
        await store.put_compaction(record_for("a:idx", h, 2, "colon session"))
        assert await store.find_compaction("a", prefix_chain(h)) is None
        assert await store.claim_owner("a:owner", "k1")
        assert await store.claim_owner("a", "k2")
        async with (
            store.lock("a:lock", "k", ttl=30) as one,
            store.lock("a", "lock:k", ttl=30) as two,
        ):
            assert one and two
    finally:
        await store.close()


async def _wait_until_gone(client: aioredis.Redis[bytes], key: str) -> None:
    """Poll (bounded) until Redis itself has expired ``key``."""
    deadline = time.monotonic() + 10
    while await client.exists(key):
        assert time.monotonic() < deadline, "lock never expired"
        await asyncio.sleep(0.01)


async def test_lock_expires_and_stale_release_is_harmless(
    redis_server: str, raw: aioredis.Redis[bytes]
) -> None:
    a, b = RedisSessionStore(redis_server), RedisSessionStore(redis_server)
    key = session_key("exp", "lock:" + hashlib.sha256(b"k").hexdigest())
    try:
        async with a.lock("exp", "long", ttl=30):
            ttl_ms = await raw.pttl(
                session_key("exp", "lock:" + hashlib.sha256(b"long").hexdigest())
            )
            assert 0 < ttl_ms <= 30_000

        stale = a.lock("exp", "k", ttl=0.05)
        assert await stale.__aenter__() is True
        await _wait_until_gone(raw, key)

        fresh = b.lock("exp", "k", ttl=30)
        assert await fresh.__aenter__() is True
        # The expired holder leaves its block: the new holder's lock must stand.
        await stale.__aexit__(None, None, None)
        async with a.lock("exp", "k", ttl=30) as got:
            assert got is False
        await fresh.__aexit__(None, None, None)
        async with a.lock("exp", "k", ttl=30) as got:
            assert got is True
    finally:
        await a.close()
        await b.close()
