"""SQLite session store: one file, WAL mode, safe for several processes on one host.

All sqlite calls run on one dedicated worker thread that owns the connection, so the
event loop never blocks on disk or on another process's write lock. Several processes
may open the same file: WAL plus a busy timeout serialize their writes, and locks are
rows with an expiry, taken inside ``BEGIN IMMEDIATE`` transactions.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from gateway.backoff import backoff_delay
from gateway.sessions.hashing import hash_client_key
from gateway.sessions.lease import holder_alive, new_token, renewing
from gateway.sessions.records import CompactionRecord, decode_record, encode_record
from gateway.sessions.store import best_prefix

__all__ = ["SQLiteSessionStore"]

_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS compactions (
    session_id      TEXT    NOT NULL,
    prefix_hash     TEXT    NOT NULL,
    prefix_len      INTEGER NOT NULL,
    replacement_raw BLOB    NOT NULL,
    tokens_before   INTEGER NOT NULL,
    tokens_after    INTEGER NOT NULL,
    created_at      REAL    NOT NULL,
    archive_from    INTEGER NOT NULL,
    archive_to      INTEGER NOT NULL,
    kind            TEXT    NOT NULL,
    PRIMARY KEY (session_id, prefix_hash)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS owners (
    session_id TEXT PRIMARY KEY,
    owner_hash TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS pending (
    session_id TEXT PRIMARY KEY,
    record     BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS locks (
    name       TEXT PRIMARY KEY,
    token      TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""

_RECORD_COLUMNS = (
    "session_id, prefix_hash, prefix_len, replacement_raw, tokens_before, tokens_after, "
    "created_at, archive_from, archive_to, kind"
)


class SQLiteSessionStore:
    """:class:`~gateway.sessions.store.SessionStore` on a SQLite file.

    The file and schema are created on first use. ``busy_timeout`` (seconds) bounds how
    long a call waits for another process's write. ``clock`` (wall-clock seconds, shared
    meaning across processes) is injectable for lock-expiry tests.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._path = Path(path)
        self._busy_ms = int(busy_timeout * 1000)
        self._clock = clock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gw-sqlite")
        self._conn: sqlite3.Connection | None = None  # touched only by the worker thread
        self._closed = False
        # Locks this process holds: name -> (token, expires_at). Checked before the
        # database so two tasks of one process exclude each other without a disk trip.
        self._held: dict[str, tuple[str, float]] = {}

    # -- plumbing ---------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            # A new data dir is the gateway user's only (it holds conversations).
            self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            # Owner only, like the data dir (SQLite gives its -wal/-shm files the same mode).
            self._path.touch(mode=0o600, exist_ok=True)
            conn = sqlite3.connect(self._path, isolation_level=None, timeout=self._busy_ms / 1000)
            try:
                conn.execute(f"PRAGMA busy_timeout={self._busy_ms}")
                self._set_up(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _set_up(self, conn: sqlite3.Connection) -> None:
        """WAL mode and the schema. Switching a new file to WAL takes an exclusive lock that
        SQLite does not wait for (busy_timeout does not apply): when several connections
        open the same new file at once, retry for up to the busy timeout. This runs on the
        store's worker thread, never on the event loop."""
        deadline = time.monotonic() + self._busy_ms / 1000
        retry = 0
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise RuntimeError(f"cannot enable WAL on {self._path}: {mode}")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
                return
            except sqlite3.OperationalError as err:
                delay = backoff_delay(retry, base=0.01, cap=0.1) or 0.0
                if "locked" not in str(err) or time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                retry += 1

    async def _run(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        if self._closed:
            raise RuntimeError("SQLiteSessionStore is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, lambda: fn(self._connection()))

    @staticmethod
    def _immediate(conn: sqlite3.Connection, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` in a write transaction (taken up front: no upgrade deadlocks)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn()
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    # -- compactions --------------------------------------------------------------

    async def put_compaction(self, record: CompactionRecord) -> None:
        """Store ``record``; ignored if its (session, prefix_hash) is already stored."""
        row = (
            record.session_id,
            record.prefix_hash,
            record.prefix_len,
            record.replacement_raw,
            record.tokens_before,
            record.tokens_after,
            record.created_at,
            record.archive_from,
            record.archive_to,
            record.kind,
        )

        def op(conn: sqlite3.Connection) -> None:
            conn.execute(
                f"INSERT OR IGNORE INTO compactions ({_RECORD_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )

        await self._run(op)

    async def find_compaction(
        self, session_id: str, chain: Sequence[str]
    ) -> CompactionRecord | None:
        """Return the record of the longest stored prefix of ``chain``, or ``None``."""
        if not chain:
            return None

        def op(conn: sqlite3.Connection) -> CompactionRecord | None:
            entries = conn.execute(
                "SELECT prefix_len, prefix_hash FROM compactions WHERE session_id = ?",
                (session_id,),
            ).fetchall()
            best = best_prefix(entries, chain)
            if best is None:
                return None
            row = conn.execute(
                f"SELECT {_RECORD_COLUMNS} FROM compactions "
                "WHERE session_id = ? AND prefix_hash = ?",
                (session_id, best[1]),
            ).fetchone()
            return None if row is None else _row_to_record(row)

        return await self._run(op)

    async def has_records(self, session_id: str) -> bool:
        """True when the session has a compaction or a parked result."""

        def op(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM compactions WHERE session_id = ?) "
                "OR EXISTS (SELECT 1 FROM pending WHERE session_id = ?)",
                (session_id, session_id),
            ).fetchone()
            return bool(row[0])

        return await self._run(op)

    # -- background results ---------------------------------------------------------

    async def put_pending(self, session_id: str, record: CompactionRecord) -> None:
        """Park a background result for the session, replacing any parked one."""
        blob = encode_record(record)

        def op(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR REPLACE INTO pending (session_id, record) VALUES (?, ?)",
                (session_id, blob),
            )

        await self._run(op)

    async def take_pending(self, session_id: str) -> CompactionRecord | None:
        """Remove and return the parked result (atomic across processes), or ``None``."""

        def op(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "DELETE FROM pending WHERE session_id = ? RETURNING record", (session_id,)
            ).fetchone()
            return None if row is None else bytes(row[0])

        blob = await self._run(op)
        return None if blob is None else decode_record(blob)

    # -- owners -------------------------------------------------------------------

    async def claim_owner(self, session_id: str, owner: str) -> bool:
        """Claim the session for the client key ``owner`` (stored hashed)."""
        owner_hash = hash_client_key(owner)
        now = self._clock()

        def op(conn: sqlite3.Connection) -> bool:
            conn.execute(
                "INSERT OR IGNORE INTO owners (session_id, owner_hash, created_at) "
                "VALUES (?, ?, ?)",
                (session_id, owner_hash, now),
            )
            row = conn.execute(
                "SELECT owner_hash FROM owners WHERE session_id = ?", (session_id,)
            ).fetchone()
            return row is not None and row[0] == owner_hash

        return await self._run(op)

    async def get_owner(self, session_id: str) -> str | None:
        """Return the owning key's hash, or ``None``."""

        def op(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                "SELECT owner_hash FROM owners WHERE session_id = ?", (session_id,)
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._run(op)

    # -- locks ----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lock(
        self, session_id: str, key: str, ttl: float, *, renew: bool = False
    ) -> AsyncIterator[bool]:
        """Try the lock ``(session_id, key)``; yields True if acquired, else False.

        A lock whose holder was a process of this host that is gone is taken over at once.
        With ``renew`` the lease is extended every ``ttl / 3`` seconds while held.
        """
        name = f"{len(session_id)}:{session_id}:{key}"
        token = new_token()
        acquired = await self._acquire(name, token, ttl)
        try:
            if acquired and renew:
                async with renewing(lambda: self._renew(name, token, ttl), ttl / 3):
                    yield True
            else:
                yield acquired
        finally:
            if acquired:
                await self._release(name, token)

    async def _acquire(self, name: str, token: str, ttl: float) -> bool:
        now = self._clock()
        held = self._held.get(name)
        if held is not None and held[1] > now:
            return False
        expires_at = now + ttl
        # Reserve locally before the first await so a second task of this process sees it.
        self._held[name] = (token, expires_at)

        def op(conn: sqlite3.Connection) -> bool:
            def txn() -> bool:
                row = conn.execute(
                    "SELECT token, expires_at FROM locks WHERE name = ?", (name,)
                ).fetchone()
                if row is not None and row[1] > now and holder_alive(str(row[0])):
                    return False
                conn.execute(
                    "INSERT OR REPLACE INTO locks (name, token, expires_at) VALUES (?, ?, ?)",
                    (name, token, expires_at),
                )
                return True

            return self._immediate(conn, txn)

        ok = False
        try:
            ok = await self._run(op)
        finally:
            if not ok and self._held.get(name, ("", 0.0))[0] == token:
                del self._held[name]
        return ok

    async def _renew(self, name: str, token: str, ttl: float) -> bool:
        expires_at = self._clock() + ttl
        if self._held.get(name, ("", 0.0))[0] == token:
            self._held[name] = (token, expires_at)

        def op(conn: sqlite3.Connection) -> bool:
            cur = conn.execute("UPDATE locks SET expires_at = ? WHERE name = ? AND token = ?",
                               (expires_at, name, token))
            return cur.rowcount == 1

        return not self._closed and await self._run(op)

    async def _release(self, name: str, token: str) -> None:
        if self._held.get(name, ("", 0.0))[0] == token:
            del self._held[name]
        if self._closed:
            return

        def op(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM locks WHERE name = ? AND token = ?", (name, token))

        await self._run(op)

    # -- retention ------------------------------------------------------------------

    async def last_writes(self) -> dict[str, float]:
        """Every stored session (store key) and the time of its last write."""

        def op(conn: sqlite3.Connection) -> dict[str, float]:
            out: dict[str, float] = {}
            rows = conn.execute(
                "SELECT session_id, MAX(t) FROM (SELECT session_id, created_at AS t FROM "
                "compactions UNION ALL SELECT session_id, created_at FROM owners) "
                "GROUP BY session_id"
            ).fetchall()
            for sid, when in rows:
                out[str(sid)] = float(when)
            for sid, blob in conn.execute("SELECT session_id, record FROM pending"):
                when = decode_record(bytes(blob)).created_at
                out[str(sid)] = max(out.get(str(sid), 0.0), when)
            return out

        return await self._run(op)

    async def delete_session(self, session_id: str) -> bool:
        """Remove every record, owner and parked result of a session (store key)."""

        def op(conn: sqlite3.Connection) -> bool:
            def txn() -> bool:
                removed = 0
                for table in ("compactions", "owners", "pending"):
                    removed += conn.execute(
                        f"DELETE FROM {table} WHERE session_id = ?", (session_id,)
                    ).rowcount
                return removed > 0

            return self._immediate(conn, txn)

        return await self._run(op)

    # -- lifecycle ------------------------------------------------------------------

    async def close(self) -> None:
        """Close the connection and stop the worker thread (idempotent)."""
        if self._closed:
            return

        def op() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        # Refuse new work first; work already queued runs before ``op`` (one FIFO worker).
        self._closed = True
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, op)
        finally:
            self._executor.shutdown(wait=False)


def _row_to_record(row: tuple[object, ...]) -> CompactionRecord:
    (sid, phash, plen, raw, tb, ta, created, afrom, ato, kind) = row
    assert isinstance(raw, bytes)
    return CompactionRecord.from_meta(
        {
            "session_id": sid,
            "prefix_hash": phash,
            "prefix_len": plen,
            "tokens_before": tb,
            "tokens_after": ta,
            "created_at": created,
            "archive_from": afrom,
            "archive_to": ato,
            "kind": kind,
        },
        raw,
    )
