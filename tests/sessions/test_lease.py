"""Lock leases: holder ids that tell a dead holder from a live one, and renewal."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import redis.asyncio as aioredis

from gateway.sessions import RedisSessionStore, SQLiteSessionStore
from gateway.sessions.lease import holder_alive, new_token
from gateway.sessions.redis_store import aclose, session_key


def test_a_live_holder_is_alive_and_a_dead_one_is_not() -> None:
    assert holder_alive(new_token())
    me = new_token().split("/")
    with subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                          stdin=subprocess.PIPE) as child:
        start = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        token = f"{me[0]}/{child.pid}/{start}/abc"
        assert holder_alive(token)
        child.kill()
        child.wait()
    assert not holder_alive(token)
    # Its pid with another start time is a recycled pid: not the holder either.
    assert not holder_alive(f"{me[0]}/{me[1]}/1/abc")


def test_other_hosts_and_unreadable_tokens_are_trusted() -> None:
    assert holder_alive("another-host/1/2/abc")
    assert holder_alive("0123456789abcdef")  # a token written before holder ids
    assert holder_alive(f"{new_token().split('/')[0]}/notapid/1/abc")


def _expiry(db: Path) -> float:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT expires_at FROM locks").fetchone()
    return float(row[0]) if row else 0.0


async def test_a_renewed_lease_outlives_its_ttl(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    a, b = SQLiteSessionStore(db), SQLiteSessionStore(db)
    try:
        async with a.lock("s", "k", ttl=0.3, renew=True) as got:
            assert got
            first = _expiry(db)
            for _ in range(400):  # bounded: until the lease was extended twice
                await asyncio.sleep(0.01)
                if _expiry(db) >= first + 0.15:
                    break
            assert _expiry(db) > first
            async with b.lock("s", "k", ttl=0.3) as other:
                assert other is False  # past the first ttl, still held
        async with b.lock("s", "k", ttl=0.3) as other:
            assert other is True  # released on exit
    finally:
        await a.close()
        await b.close()


def dead_holder_token() -> str:
    """The token a process of this host wrote before it was killed."""
    me = new_token().split("/")
    with subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                          stdin=subprocess.PIPE) as child:
        start = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        child.kill()
        child.wait()
    return f"{me[0]}/{child.pid}/{start}/dead"


async def test_redis_lock_of_a_dead_holder_is_taken_over(redis_server: str) -> None:
    store = RedisSessionStore(redis_server)
    raw = aioredis.Redis.from_url(redis_server)
    name = session_key("dead", "lock:" + hashlib.sha256(b"k").hexdigest())
    try:
        await raw.set(name, "another-host/1/2/alive", px=600_000)
        async with store.lock("dead", "k", ttl=30) as got:
            assert got is False  # a holder elsewhere is trusted until its lease runs out
        await raw.set(name, dead_holder_token(), px=600_000)
        async with store.lock("dead", "k", ttl=30) as got:
            assert got is True  # its holder is gone: taken over at once
            assert 0 < await raw.pttl(name) <= 30_000
        assert await raw.exists(name) == 0
    finally:
        await store.close()
        await aclose(raw)


# A replica on another host: its lock token names that host, so holder_alive() cannot look
# its process up and only the lease's expiry frees the lock once it is killed.
_REMOTE_HOLDER = """
import asyncio, sys
from gateway.sessions import lease
lease._host = lambda: "replica-on-another-host"
from gateway.compaction.service import LEASE
from gateway.sessions import RedisSessionStore

async def main() -> None:
    store = RedisSessionStore(sys.argv[1])
    async with store.lock("busy", "prefix", LEASE, renew=True) as got:
        print("held" if got else "refused", flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_a_killed_replica_on_another_host_frees_the_session_within_a_short_lease(
        redis_server: str) -> None:
    from gateway.compaction.service import LEASE

    assert LEASE <= 10  # a session stalls for seconds, not the old 30
    store = RedisSessionStore(redis_server)
    raw = aioredis.Redis.from_url(redis_server)
    name = session_key("busy", "lock:" + hashlib.sha256(b"prefix").hexdigest())
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _REMOTE_HOLDER, redis_server, stdout=asyncio.subprocess.PIPE)
    try:
        assert holder.stdout is not None
        line = await asyncio.wait_for(holder.stdout.readline(), 60)
        assert line == b"held\n"
        assert (await raw.get(name) or b"").startswith(b"replica-on-another-host/")
        # Alive, it renews its lease: past a renewal period the lease was extended.
        previous, renewed = await raw.pttl(name), False
        for _ in range(int(LEASE * 20)):  # bounded: a renewal comes every LEASE / 3
            await asyncio.sleep(0.05)
            now = await raw.pttl(name)
            renewed, previous = now > previous, now
            if renewed:
                break
        assert renewed
        async with store.lock("busy", "prefix", LEASE) as got:
            assert got is False  # a live holder elsewhere keeps its session
        holder.kill()  # SIGKILL: no release, no more renewals
        await holder.wait()
        left = await raw.pttl(name)
        assert 0 < left <= LEASE * 1000  # the longest the session can stall from here
        taken = False
        for _ in range(int(LEASE * 40)):  # bounded: well past the lease
            async with store.lock("busy", "prefix", LEASE) as got:
                taken = got
            if taken:
                break
            await asyncio.sleep(0.05)
        assert taken  # served again once the dead holder's short lease ran out
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
        await store.close()
        await aclose(raw)
