"""Response state: the Responses API answers the gateway returned, kept so that
``previous_response_id`` works on every upstream.

A :class:`KeptResponse` is one answer: its id, the owner it belongs to, the full input it
was answered for (any ``previous_response_id`` already expanded) and its output items.
Continuing it means sending ``input + output + the new items``. Stores live beside the
sessions' (the same SQLite file, or the same Redis) and keep records as zstd-compressed
orjson; an answer whose input repeats one kept before (an agent's next turn, a continued
answer) holds only what it adds (:func:`~gateway.sessions.response_records.stored_over`).
Retention removes records older than ``sessions.retention_days``, as for sessions, but not
one that a record still kept is stored over. A deleted record others are stored over is
hidden (never shown or continued again) until the last of them goes.

:class:`ResponseState` is what a request handler uses: writes go to the store in the
background once the answer is complete (a store error never fails a request: it logs one
warning until the store works again), and a lookup of an answer whose write is still under
way waits for that write instead of missing it. What waits to be written is bounded
(``backlog_bytes``, counted in request bodies): past it a request waits for the writer
before it is served (:meth:`ResponseState.room`), and an answer that would take the backlog
past twice the bound is not kept (logged), so a store slower than the traffic slows the
traffic instead of filling the memory.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from gateway.sessions import SQLITE_FILE_NAME
from gateway.sessions.errors import store_errors
from gateway.sessions.response_records import (
    KeptResponse,
    decode_kept,
    encode_kept,
    resolved,
    stored_over,
    stored_owner,
)
from gateway.sessions.sqlite_store import SQLiteSessionStore

__all__ = ["LOOKUP_DEADLINE_SHARE", "KeptResponse", "Lookup", "ResponseState", "ResponseStore",
           "SQLiteResponseStore", "decode_kept", "encode_kept", "failures",
           "open_response_store"]

log = logging.getLogger("gateway.responses_state")
T = TypeVar("T")

# Bounds of the store calls a request or the background writer waits for.
LOOKUP_TIMEOUT = 5.0
# The share of the request's deadline a lookup may take at most (a 3 s deadline: 0.75 s).
LOOKUP_DEADLINE_SHARE = 0.25
WRITE_TIMEOUT = 30.0
# The request bodies of the answers a worker may have waiting for the store (see the module
# docstring): past it requests wait for the writer; past twice it answers are not kept.
BACKLOG_BYTES = 64 * 1024 * 1024

# ``base``: the record it is stored over; ``hidden``: set when it was deleted while others
# are stored over it.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    response_id TEXT PRIMARY KEY,
    owner       TEXT NOT NULL,
    items       BLOB NOT NULL,
    created_at  REAL NOT NULL,
    base        TEXT,
    hidden      INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS responses_created ON responses (created_at);
"""
# Added to a table made before records were stored over others.
_ADDED_COLUMNS = {"base": "TEXT", "hidden": "INTEGER NOT NULL DEFAULT 0"}
# Failed writes remembered, so that no later record is stored over one of them.
_UNWRITTEN_KEPT = 1024


def failures() -> tuple[type[Exception], ...]:
    """A store that is unavailable, or slower than the bound of the call."""
    return (TimeoutError, *store_errors())


class ResponseStore(Protocol):
    """Async storage of kept responses, by response id (both backends implement it).

    A later record for an id replaces the earlier one. ``get_response`` returns the record
    with its owner: scoping to an owner is the caller's (:class:`ResponseState`)."""

    async def put_response(self, record: KeptResponse) -> None:
        """Keep ``record`` (replacing any record of its id)."""
        ...

    async def put_responses(self, records: Sequence[KeptResponse]) -> None:
        """Keep ``records`` in one write, in order (a later record of an id replaces an
        earlier one)."""
        ...

    async def get_response(self, response_id: str) -> KeptResponse | None:
        """The record of ``response_id``, or ``None``."""
        ...

    async def delete_response(self, response_id: str) -> bool:
        """Remove the record of ``response_id``; whether there was one."""
        ...

    async def purge_responses(self, before: float) -> int:
        """Remove the records made before ``before`` (wall-clock seconds); how many."""
        ...

    async def close(self) -> None:
        """Release connections and threads."""
        ...


class SQLiteResponseStore(SQLiteSessionStore):
    """Kept responses in the sessions' SQLite file (table ``responses``), on the session
    store's own worker thread and connection rules (WAL, busy timeout, several processes)."""

    def _set_up(self, conn: sqlite3.Connection) -> None:
        super()._set_up(conn)
        conn.executescript(_SCHEMA)
        have = {str(row[1]) for row in conn.execute("PRAGMA table_info(responses)")}
        for name, kind in _ADDED_COLUMNS.items():
            if name not in have:
                try:
                    conn.execute(f"ALTER TABLE responses ADD COLUMN {name} {kind}")
                except sqlite3.OperationalError as err:  # (another process added it)
                    if "duplicate column" not in str(err):
                        raise
        conn.execute("CREATE INDEX IF NOT EXISTS responses_base ON responses (base)")

    async def put_response(self, record: KeptResponse) -> None:
        """Keep ``record`` (encoded on the store's thread, off the event loop)."""
        await self.put_responses((record,))

    async def put_responses(self, records: Sequence[KeptResponse]) -> None:
        """Keep ``records`` in one transaction (encoded on the store's thread). One whose
        chain is no longer all there (deleted, purged meanwhile) is stored whole."""

        def op(conn: sqlite3.Connection) -> None:
            blobs = [encode_kept(r) for r in records]  # (before the write lock is taken)

            def write() -> None:
                rows: list[tuple[Any, ...]] = []
                ahead: set[str] = set()
                for record, blob in zip(records, blobs, strict=True):
                    if record.chain and not _links_kept(conn, record.chain, ahead):
                        record = record.stored_whole()
                        blob = encode_kept(record)
                    rows.append((record.response_id, stored_owner(record), blob,
                                 record.created_at, record.chain[-1] if record.chain else None))
                    ahead.add(record.response_id)
                conn.executemany(
                    "INSERT OR REPLACE INTO responses (response_id, owner, items, created_at, "
                    "base, hidden) VALUES (?, ?, ?, ?, ?, 0)", rows)

            self._immediate(conn, write)

        await self._run(op)

    async def get_response(self, response_id: str) -> KeptResponse | None:
        """The record of ``response_id`` (its whole input), or ``None``."""

        def op(conn: sqlite3.Connection) -> KeptResponse | None:
            row = conn.execute("SELECT owner, items, created_at, hidden FROM responses "
                               "WHERE response_id = ?", (response_id,)).fetchone()
            if row is None or row[3]:
                return None
            record = decode_kept(response_id, str(row[0]), bytes(row[1]), float(row[2]))
            if not record.chain:
                return record
            marks = ", ".join("?" * len(record.chain))
            links = {str(r[0]): decode_kept(str(r[0]), str(r[1]), bytes(r[2]), float(r[3]))
                     for r in conn.execute(
                         "SELECT response_id, owner, items, created_at FROM responses "
                         f"WHERE response_id IN ({marks})", record.chain)}
            return resolved(record, links)

        return await self._run(op)

    async def delete_response(self, response_id: str) -> bool:
        """Remove the record of ``response_id``; whether there was one. One that others are
        stored over is hidden until the last of them goes."""

        def op(conn: sqlite3.Connection) -> bool:
            return self._immediate(conn, lambda: _delete(conn, response_id))

        return await self._run(op)

    async def purge_responses(self, before: float) -> int:
        """Remove the records made before ``before`` that no later record is stored over
        (the records a kept one is stored over stay as long as it does)."""

        def op(conn: sqlite3.Connection) -> int:
            removed = 0
            while True:  # (what the records removed were stored over, in the next round)
                gone = conn.execute(
                    "DELETE FROM responses WHERE created_at < ? AND NOT EXISTS (SELECT 1 "
                    "FROM responses AS later WHERE later.base = responses.response_id)",
                    (before,)).rowcount
                if not gone:
                    return removed
                removed += gone

        return await self._run(op)


def _links_kept(conn: sqlite3.Connection, chain: tuple[str, ...], ahead: set[str]) -> bool:
    """Whether every record of ``chain`` is kept, or written before in this transaction
    (``ahead``)."""
    rest = [link for link in chain if link not in ahead]
    if not rest:
        return True
    marks = ", ".join("?" * len(rest))
    return int(conn.execute(f"SELECT count(*) FROM responses WHERE response_id IN ({marks})",
                            rest).fetchone()[0]) == len(set(rest))


def _delete(conn: sqlite3.Connection, response_id: str) -> bool:
    """Hide the record, then remove each hidden record no other is stored over (the record,
    then its base, and so on)."""
    if conn.execute("UPDATE responses SET hidden = 1 WHERE response_id = ? AND hidden = 0",
                    (response_id,)).rowcount == 0:
        return False
    gone: str | None = response_id
    while gone is not None and conn.execute("SELECT 1 FROM responses WHERE base = ? LIMIT 1",
                                            (gone,)).fetchone() is None:
        row = conn.execute("DELETE FROM responses WHERE response_id = ? AND hidden = 1 "
                           "RETURNING base", (gone,)).fetchone()
        gone = None if row is None or row[0] is None else str(row[0])
    return True


def open_response_store(data_dir: str | Path, redis_url: str | None) -> ResponseStore:
    """The response store beside the sessions': Redis when a URL is given, else the SQLite
    file under ``data_dir`` (nothing is opened before the first call)."""
    if redis_url:
        from gateway.sessions.redis_responses import RedisResponseStore

        return RedisResponseStore(redis_url)
    return SQLiteResponseStore(Path(data_dir) / SQLITE_FILE_NAME)


@dataclass(frozen=True, slots=True)
class Lookup:
    """What the gateway knows of a ``previous_response_id`` for one client: ``kept`` when
    it is this client's, ``foreign`` when it was kept for another owner (never shown)."""

    kept: KeptResponse | None = None
    foreign: bool = False
    failed: bool = False  # the store could not be read


class ResponseState:
    """Kept responses for the request handlers (see the module docstring)."""

    def __init__(self, store: ResponseStore, backlog_bytes: int = BACKLOG_BYTES,
                 not_kept: Callable[[str, int], None] | None = None) -> None:
        self.store = store
        self.backlog_bytes = backlog_bytes
        # Told of answers not kept: why (``store_unavailable``, ``backlog``) and how many.
        self._not_kept = not_kept
        # response id -> the write that keeps it (done when that write is over)
        self._pending: dict[str, asyncio.Future[None]] = {}
        self._failing = False
        # Records waiting for the next write, and what that write completes; one writer
        # at a time: what comes in while one write is under way goes in the next one.
        self._queued: list[KeptResponse] = []
        self._next: asyncio.Future[None] | None = None
        self._writer: asyncio.Task[None] | None = None
        self._unwritten: OrderedDict[str, None] = OrderedDict()  # (the latest failed writes)
        # The body bytes of the records queued and of those being written; who waits for
        # the backlog to come back under the bound; whether a record was dropped since.
        self._queued_bytes = 0
        self._backlog = 0
        self._roomy: asyncio.Future[None] | None = None
        self._dropping = False

    @property
    def backlog(self) -> int:
        """The body bytes of the answers waiting to be written."""
        return self._backlog

    async def room(self, limit: float) -> bool:
        """Wait until the backlog is within its bound, at most ``limit`` seconds; whether it
        is (a request that would add to it waits here before it is served)."""
        if self._backlog <= self.backlog_bytes:
            return True
        if self._roomy is None:
            self._roomy = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(limit):
                await asyncio.shield(self._roomy)
        except TimeoutError:
            return False
        return True

    async def lookup(self, owners: Sequence[str | None], response_id: str, *,
                     limit: float | None = None) -> Lookup:
        """The kept response ``response_id`` if one of ``owners`` (the client's owner ids,
        its own first) kept it and it is finished (a background response under way
        continues only upstream); waits for its write when that is still under way, at
        most ``LOOKUP_TIMEOUT`` seconds or ``limit`` when shorter."""
        try:
            kept = await self._get(response_id, limit)
        except failures() as err:
            log.warning("response state unavailable: previous_response_id not read (%s)",
                        err.__class__.__name__)
            return Lookup(failed=True)
        if kept is None:
            return Lookup()
        if kept.owner not in {owner or "" for owner in owners}:
            return Lookup(foreign=True)
        return Lookup(kept) if kept.finished else Lookup()

    async def find(self, owners: Sequence[str | None], response_id: str, *,
                   limit: float | None = None) -> KeptResponse | None:
        """The record of ``response_id`` if one of ``owners`` kept it (finished or not),
        else None (another owner's record is never shown). Raises ``TimeoutError`` or the
        store's error when the store cannot say."""
        kept = await self._get(response_id, limit)
        if kept is None or kept.owner not in {owner or "" for owner in owners}:
            return None
        return kept

    async def delete(self, response_id: str, *, limit: float | None = None) -> bool:
        """Remove the record of ``response_id`` (its write under way first); whether there
        was one."""
        return await self._after_write(response_id, limit, self.store.delete_response)

    async def _get(self, response_id: str, limit: float | None) -> KeptResponse | None:
        return await self._after_write(response_id, limit, self.store.get_response)

    async def _after_write(self, response_id: str, limit: float | None,
                           call: Callable[[str], Awaitable[T]]) -> T:
        """``call(response_id)`` once the record's write under way (if any) is done, all
        within the lookup bound."""
        pending = self._pending.get(response_id)
        async with asyncio.timeout(self._wait(limit)):
            if pending is not None:
                await asyncio.wait({pending})  # (a failed write is the writer's to log)
            return await call(response_id)

    @staticmethod
    def _wait(limit: float | None) -> float:
        return LOOKUP_TIMEOUT if limit is None else max(0.01, min(LOOKUP_TIMEOUT, limit))

    def keep(self, record: KeptResponse, over: Sequence[KeptResponse] = (),
             size: int = 0) -> KeptResponse:
        """Write ``record`` in the background (the answer is already on its way): with the
        others kept meanwhile, in one write once the one under way is over. ``over``: kept
        records its input may repeat (it is then stored over the first it repeats, unless
        that one's write failed). ``size``: the bytes of the request body it answers, its
        share of the backlog; past twice the bound the record is not kept. Returns the
        record as it is kept."""
        if size and self._backlog + size > 2 * self.backlog_bytes:
            self._lost([record], "backlog")
            if not self._dropping:
                self._dropping = True
                log.warning("response state not kept: %d MB of answers are waiting for the "
                            "session store, which is slower than the traffic; "
                            "previous_response_id cannot continue these answers (further "
                            "ones are not logged until the backlog clears)",
                            self._backlog >> 20)
            return record
        for base in over:
            stored = stored_over(record, base)
            if stored is not record and not self._over_lost(stored):
                record = stored
                break
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        self._queued.append(record)
        self._queued_bytes += size
        self._backlog += size
        self._pending[record.response_id] = self._next
        if self._writer is None:
            self._writer = asyncio.create_task(self._drain(), name="gateway-keep-responses")
        return record

    async def _drain(self) -> None:
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                size, self._queued_bytes = self._queued_bytes, 0
                done, self._next = self._next, None
                try:
                    await self._write(batch)
                finally:
                    if done is not None:
                        done.set_result(None)
                    for record in batch:
                        if self._pending.get(record.response_id) is done:
                            del self._pending[record.response_id]
                    self._written(size)
        finally:
            self._writer = None

    async def _write(self, records: list[KeptResponse]) -> None:
        if self._unwritten:  # (a record queued over one whose write has failed since)
            records = [r.stored_whole() if self._over_lost(r) else r for r in records]
        try:
            async with asyncio.timeout(WRITE_TIMEOUT):
                await self.store.put_responses(records)
        except failures() as err:
            self._lost(records, "store_unavailable")
            if not self._failing:
                self._failing = True
                log.warning("response state not kept: the session store is unavailable "
                            "(%s); previous_response_id cannot continue these answers "
                            "(further failures are not logged until a write succeeds)",
                            err.__class__.__name__)
            return
        except Exception:  # a background write must never take anything else down
            self._lost(records, "store_unavailable")
            log.exception("response state not kept for %s",
                          ", ".join(r.response_id for r in records))
            return
        self._failing = False

    def _written(self, size: int) -> None:
        """A batch of ``size`` body bytes is off the backlog: wake who waits for room."""
        self._backlog -= size
        if self._backlog <= self.backlog_bytes:
            self._dropping = False
            if self._roomy is not None:
                self._roomy.set_result(None)
                self._roomy = None

    def _over_lost(self, record: KeptResponse) -> bool:
        """Whether ``record`` is stored over one whose write failed."""
        return any(link in self._unwritten for link in record.chain)

    def _lost(self, records: list[KeptResponse], reason: str) -> None:
        """Remember records not kept (``reason``): no later one is stored over them."""
        if self._not_kept is not None:
            self._not_kept(reason, len(records))
        for record in records:
            self._unwritten[record.response_id] = None
        while len(self._unwritten) > _UNWRITTEN_KEPT:
            self._unwritten.popitem(last=False)

    async def flush(self) -> None:
        """Wait for the writes under way (and those queued behind them)."""
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)

    async def close(self) -> None:
        """Finish the writes under way, then close the store."""
        await self.flush()
        await self.store.close()
