"""SQLite-specific behaviour: WAL, restart, off-loop I/O, lock expiry, other processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import sys
import textwrap
import zlib
from pathlib import Path

import orjson
import pytest

from gateway.sessions import CompactionRecord, SQLiteSessionStore, prefix_chain
from gateway.sessions.response_records import KeptResponse, stored_over
from gateway.sessions.responses_state import SQLiteResponseStore
from tests.sessions.factories import history, record_for

REPO_ROOT = Path(__file__).resolve().parents[2]


async def test_wal_mode_is_on(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    store = SQLiteSessionStore(db)
    await store.put_compaction(record_for("w", history(3), 2, "x"))
    await store.close()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


async def test_records_survive_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "nested" / "dir" / "s.sqlite3"
    h = history(9)
    rec = record_for("r", h, 7, "kept across restarts")
    store = SQLiteSessionStore(db)
    await store.put_compaction(rec)
    assert await store.claim_owner("r", "sk-owner")
    await store.put_pending("r", record_for("r", h, 8, "bg", kind="background"))
    await store.close()

    restarted = SQLiteSessionStore(db)
    try:
        found = await restarted.find_compaction("r", prefix_chain(h))
        assert found == rec
        assert found is not None and found.replacement_raw == rec.replacement_raw
        assert await restarted.claim_owner("r", "sk-intruder") is False
        pending = await restarted.take_pending("r")
        assert pending is not None and pending.prefix_len == 8
    finally:
        await restarted.close()


async def test_client_keys_never_reach_the_file(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    store = SQLiteSessionStore(db)
    assert await store.claim_owner("k", "sk-live-SECRETSECRET")
    await store.close()
    for f in tmp_path.iterdir():
        assert b"SECRETSECRET" not in f.read_bytes(), f


async def test_sqlite_runs_off_the_event_loop(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    store = SQLiteSessionStore(db, busy_timeout=60)
    await store.put_compaction(record_for("b", history(3), 1, "warm-up"))
    # Another connection holds the write lock: the store's write must wait for it
    # without blocking the loop (else this test could never commit and would hang).
    other = sqlite3.connect(db, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        task = asyncio.create_task(store.put_compaction(record_for("b", history(3), 2, "late")))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done()
        other.execute("COMMIT")
        await task
    finally:
        other.close()
    found = await store.find_compaction("b", prefix_chain(history(3)))
    assert found is not None and found.replacement[0]["content"] == "late"
    await store.close()


async def test_lock_expires_after_ttl(tmp_path: Path) -> None:
    now = [1000.0]
    a = SQLiteSessionStore(tmp_path / "s.sqlite3", clock=lambda: now[0])
    b = SQLiteSessionStore(tmp_path / "s.sqlite3", clock=lambda: now[0])
    try:
        first = a.lock("x", "k", ttl=10)
        assert await first.__aenter__() is True
        async with b.lock("x", "k", ttl=10) as got:
            assert got is False
        now[0] += 11  # the holder stalled past its ttl
        second = b.lock("x", "k", ttl=10)
        assert await second.__aenter__() is True
        async with a.lock("x", "k", ttl=10) as got:
            assert got is False  # same process as the stale holder: still excluded
        # The stale holder exits: it must not free the new holder's lock.
        await first.__aexit__(None, None, None)
        async with a.lock("x", "k", ttl=10) as got:
            assert got is False
        await second.__aexit__(None, None, None)
        async with a.lock("x", "k", ttl=10) as got:
            assert got is True
    finally:
        await a.close()
        await b.close()


_HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from gateway.sessions import SQLiteSessionStore

    async def main() -> None:
        store = SQLiteSessionStore(sys.argv[1])
        async with store.lock("proc", "k", ttl=600) as got:
            print("held" if got else "refused", flush=True)
            await asyncio.to_thread(sys.stdin.readline)
        await store.close()
        print("released", flush=True)

    asyncio.run(main())
    """
)


async def test_lock_excludes_another_process(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _HOLDER,
        str(db),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
        cwd=REPO_ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    store = SQLiteSessionStore(db)
    try:
        assert (await proc.stdout.readline()).strip() == b"held"
        async with store.lock("proc", "k", ttl=600) as got:
            assert got is False
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        assert (await proc.stdout.readline()).strip() == b"released"
        async with store.lock("proc", "k", ttl=600) as got:
            assert got is True
    finally:
        if proc.returncode is None:
            proc.stdin.close()
            await proc.wait()
        await store.close()
    assert proc.returncode == 0


async def test_closed_store_refuses_work(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "s.sqlite3")
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        await store.find_compaction("s", ["0" * 64])


async def test_many_records_in_one_session(tmp_path: Path) -> None:
    store = SQLiteSessionStore(tmp_path / "s.sqlite3")
    h = history(300)
    chain = prefix_chain(h)
    for n in range(1, 300, 3):
        await store.put_compaction(
            CompactionRecord.create(
                session_id="big",
                prefix_len=n,
                prefix_hash=chain[n - 1],
                replacement=[{"role": "user", "content": str(n)}],
                tokens_before=n,
                tokens_after=1,
            )
        )
    found = await store.find_compaction("big", chain[:200])
    assert found is not None and found.prefix_len == 199
    await store.close()


async def test_a_response_table_made_before_records_were_stored_over_others_is_upgraded(
        tmp_path: Path) -> None:
    # A file written by an earlier gateway: its records read back, later ones are stored
    # over them, deleted and purged as on a new file.
    path = tmp_path / "sessions.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.executescript("""
            CREATE TABLE responses (response_id TEXT PRIMARY KEY, owner TEXT NOT NULL,
                                    items BLOB NOT NULL, created_at REAL NOT NULL);
            CREATE INDEX responses_created ON responses (created_at);""")
        old = KeptResponse.create("resp_old", "o", [{"role": "user", "content": "hi"},
                                                    {"role": "user", "content": "again"}],
                                  [{"type": "message"}])
        blob = zlib.compress(orjson.dumps({"input": old.input, "output": old.output}), 1)
        db.execute("INSERT INTO responses VALUES (?, ?, ?, ?)", ("resp_old", "o", blob, 5.0))
        db.commit()
    store = SQLiteResponseStore(path)
    try:
        found = await store.get_response("resp_old")
        assert found is not None and found.input == old.input and found.created_at == 5.0
        later = stored_over(KeptResponse.create("resp_new", "o", [*found.conversation(), {
            "role": "user", "content": "more"}], []), found)
        assert later.chain == ("resp_old",)
        await store.put_response(later)
        assert await store.delete_response("resp_old") is True
        back = await store.get_response("resp_new")
        assert back is not None and back.input == later.input
        assert await store.purge_responses(10.0) == 0  # (resp_new is stored over it)
        assert await store.delete_response("resp_new") is True
        assert await store.get_response("resp_old") is None
    finally:
        await store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT count(*) FROM responses").fetchone() == (0,)
