"""Session store outages: compaction degrades, never refuses.

* :class:`StoreOutage` knows whether the store is up. The first error of an outage is one
  warning line (per process), its end another; the errors between are not logged again.
  While the store is down, calls fail at once (:class:`StoreUnavailable`) instead of
  waiting for a connection on every request; one call per ``PROBE_EVERY`` seconds is let
  through to see whether it is back.
* :class:`GuardedStore` / :class:`GuardedArchive` put every store and archive call through
  it.
* :class:`MemoryCompactions` keeps the compactions made while the store was down (in
  memory, per process, bounded), so the session's next turns reuse them, until they are
  written to the store when it returns (their messages archived with them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from gateway.compaction.recovery_io import SessionWrites
from gateway.projection.anomalies import Message
from gateway.sessions import Archive, CompactionRecord, SessionStore, best_prefix
from gateway.sessions.errors import StoreUnavailable, store_errors

log = logging.getLogger("gateway.compaction")

PROBE_EVERY = 1.0  # while down, one store call per this many seconds tries the store
MAX_UNSTORED_SESSIONS = 2_000
# The longest one store call a request waits for may take (a locked SQLite file waits out
# its 10 s busy timeout, an unreachable host its connect timeout), and the share of what is
# left of the request's deadline it may take: a store that does not answer in time is an
# outage (the compaction is made in memory), never the request's 504. Calls no request
# waits for (background compactions, catch-up writes of a large archive) get longer.
STORE_CALL_CAP = 5.0
BACKGROUND_CALL_CAP = 30.0
STORE_DEADLINE_SHARE = 0.25
MIN_STORE_CALL = 0.05
_T = TypeVar("_T")
# (the task of the request that waits, its deadline on the monotonic clock)
_REQUEST_DEADLINE: ContextVar[tuple[asyncio.Task[Any] | None, float] | None] = ContextVar(
    "gateway_store_deadline", default=None)


@contextlib.contextmanager
def store_deadline(until: float) -> Iterator[None]:
    """Within this block, store calls made by the current task give up in time for the
    request deadline ``until`` (monotonic); tasks started meanwhile (background
    compactions) keep the plain cap."""
    token = _REQUEST_DEADLINE.set((asyncio.current_task(), until))
    try:
        yield
    finally:
        _REQUEST_DEADLINE.reset(token)


def call_limit() -> float:
    """Seconds the next store call may take: within a request (see :func:`store_deadline`)
    ``STORE_CALL_CAP``, less when its deadline is near; elsewhere ``BACKGROUND_CALL_CAP``."""
    held = _REQUEST_DEADLINE.get()
    if held is None or held[0] is not asyncio.current_task():
        return BACKGROUND_CALL_CAP
    left = held[1] - time.monotonic()
    return min(STORE_CALL_CAP, max(MIN_STORE_CALL, left * STORE_DEADLINE_SHARE))


class StoreTimeout(TimeoutError):
    """A store call that did not answer within its limit (an ``OSError``, so
    ``store_errors()`` catches it)."""


def describe(error: BaseException) -> str:
    """A short, key-free description of a store error (its type and first words)."""
    text = str(error).splitlines()[0][:160] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _request_task() -> asyncio.Task[Any] | None:
    """The request task whose store calls this is (see :func:`store_deadline`), else None
    (a background task: it probes as the interval allows)."""
    held = _REQUEST_DEADLINE.get()
    if held is None or held[0] is None or held[0] is not asyncio.current_task():
        return None
    return held[0]


class StoreOutage:
    """Whether the session store is up, with one log line per outage."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.down_since: float | None = None
        self.reason = ""
        self.outages = 0
        self._probed = 0.0
        # Requests that already waited out a failed store call: they do not probe the
        # store again while it is down (one request pays for one wait, not one per probe
        # interval: a locked SQLite file would otherwise eat its whole deadline).
        self._paid: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        self.on_recovered: Callable[[], None] | None = None

    @property
    def down(self) -> bool:
        """True while the store is known to be unavailable."""
        return self.down_since is not None

    def failed(self, error: BaseException) -> None:
        """A store call failed: the first failure of an outage is logged (a warning)."""
        now = self._clock()
        self._probed = now
        task = _request_task()
        if task is not None:
            self._paid.add(task)
        if self.down_since is not None:
            return
        self.down_since = now
        self.outages += 1
        self.reason = describe(error)
        log.warning("session store unavailable (%s): compactions are made in memory and "
                    "stored when it returns", self.reason)

    def succeeded(self) -> None:
        """A store call succeeded: ends an outage (logged) and starts the catch-up."""
        if self.down_since is None:
            return
        seconds = self._clock() - self.down_since
        self.down_since = None
        self.reason = ""
        self._paid = weakref.WeakSet()
        log.info("session store available again after %.1fs", seconds)
        if self.on_recovered is not None:
            self.on_recovered()

    def check(self) -> None:
        """Raise :class:`StoreUnavailable` while down, except once per ``PROBE_EVERY`` for
        a task that has not waited for the store in this outage yet."""
        if self.down_since is None:
            return
        now = self._clock()
        if now - self._probed < PROBE_EVERY or _request_task() in self._paid:
            raise StoreUnavailable(f"the session store is unavailable ({self.reason})")
        self._probed = now

    async def run(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """Run one store call through the tracker."""
        self.check()
        limit = call_limit()
        try:
            try:
                async with asyncio.timeout(limit):
                    result = await call()
            except TimeoutError:  # (only this call's own limit: an outer one cancels)
                raise StoreTimeout(f"no answer within {limit:.2g}s") from None
        except StoreUnavailable:
            raise
        except store_errors() as exc:
            self.failed(exc)
            raise
        self.succeeded()
        return result


class GuardedStore:
    """A :class:`SessionStore` whose calls go through a :class:`StoreOutage`."""

    def __init__(self, store: SessionStore, outage: StoreOutage) -> None:
        self.inner = store
        self.outage = outage

    async def put_compaction(self, record: CompactionRecord) -> None:
        """See :class:`SessionStore`."""
        await self.outage.run(lambda: self.inner.put_compaction(record))

    async def find_compaction(self, session_id: str, chain: Sequence[str]
                              ) -> CompactionRecord | None:
        """See :class:`SessionStore`."""
        return await self.outage.run(lambda: self.inner.find_compaction(session_id, chain))

    async def has_records(self, session_id: str) -> bool:
        """See :class:`SessionStore`."""
        return await self.outage.run(lambda: self.inner.has_records(session_id))

    async def put_pending(self, session_id: str, record: CompactionRecord) -> None:
        """See :class:`SessionStore`."""
        await self.outage.run(lambda: self.inner.put_pending(session_id, record))

    async def take_pending(self, session_id: str) -> CompactionRecord | None:
        """See :class:`SessionStore`."""
        return await self.outage.run(lambda: self.inner.take_pending(session_id))

    async def claim_owner(self, session_id: str, owner: str) -> bool:
        """See :class:`SessionStore`."""
        return await self.outage.run(lambda: self.inner.claim_owner(session_id, owner))

    async def get_owner(self, session_id: str) -> str | None:
        """See :class:`SessionStore`."""
        return await self.outage.run(lambda: self.inner.get_owner(session_id))

    @contextlib.asynccontextmanager
    async def lock(self, session_id: str, key: str, ttl: float, *, renew: bool = False
                   ) -> AsyncIterator[bool]:
        """See :class:`SessionStore`. A release the store cannot take is left to the
        lease's expiry (the work done under the lock stands)."""
        self.outage.check()
        manager = self.inner.lock(session_id, key, ttl, renew=renew)
        limit = call_limit()
        try:
            try:
                async with asyncio.timeout(limit):
                    got = await manager.__aenter__()
            except TimeoutError:  # a lease taken meanwhile is left to expire
                raise StoreTimeout(f"no answer within {limit:.2g}s") from None
        except store_errors() as exc:
            if not isinstance(exc, StoreUnavailable):
                self.outage.failed(exc)
            raise
        self.outage.succeeded()
        try:
            yield got
        finally:
            try:
                await manager.__aexit__(None, None, None)
            except store_errors() as exc:
                self.outage.failed(exc)

    async def close(self) -> None:
        """See :class:`SessionStore`."""
        await self.inner.close()


class GuardedArchive:
    """An :class:`Archive` whose calls go through a :class:`StoreOutage`."""

    def __init__(self, archive: Archive, outage: StoreOutage) -> None:
        self.inner = archive
        self.outage = outage

    async def append(self, session_id: str, messages: Sequence[Any]) -> tuple[int, int]:
        """See :class:`Archive`."""
        return await self.outage.run(lambda: self.inner.append(session_id, messages))

    async def read(self, session_id: str, from_line: int, to_line: int) -> list[dict[str, Any]]:
        """See :class:`Archive`."""
        return await self.outage.run(lambda: self.inner.read(session_id, from_line, to_line))

    async def line_count(self, session_id: str) -> int:
        """See :class:`Archive`."""
        return await self.outage.run(lambda: self.inner.line_count(session_id))

    async def close(self) -> None:
        """See :class:`Archive`."""
        await self.inner.close()


@dataclass(frozen=True, slots=True)
class Unstored:
    """A compaction made while the store was down, and the messages to archive with it."""

    record: CompactionRecord
    archived: list[Message]


class MemoryCompactions:
    """Compactions not stored yet, per session key (an LRU of ``max_sessions``), and the
    stored compaction each recent session was last served with (``seen``): while the store
    is down a session goes on with it instead of being compacted again."""

    def __init__(self, max_sessions: int = MAX_UNSTORED_SESSIONS) -> None:
        self._by_key: OrderedDict[str, list[Unstored]] = OrderedDict()
        self._seen: OrderedDict[str, CompactionRecord] = OrderedDict()
        self._max = max_sessions

    def saw(self, key: str, record: CompactionRecord) -> None:
        """Remember the stored compaction the session was just served with."""
        self._seen[key] = record
        self._seen.move_to_end(key)
        if len(self._seen) > self._max:
            self._seen.popitem(last=False)

    def seen(self, key: str, chain: Sequence[str]) -> CompactionRecord | None:
        """The stored compaction last served to the session, when ``chain`` begins with
        its prefix."""
        record = self._seen.get(key)
        if record is None or not best_prefix([(record.prefix_len, record.prefix_hash)], chain):
            return None
        return record

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_key.values())

    def has(self, key: str) -> bool:
        """True when the session has unstored compactions."""
        return key in self._by_key

    def add(self, key: str, entry: Unstored) -> None:
        """Keep one more unstored compaction of the session."""
        entries = self._by_key.setdefault(key, [])
        entries.append(entry)
        self._by_key.move_to_end(key)
        if len(self._by_key) > self._max:
            dropped, _ = self._by_key.popitem(last=False)
            log.warning("too many unstored compactions: session %s's is dropped", dropped)

    def find(self, key: str, chain: Sequence[str]) -> CompactionRecord | None:
        """The unstored compaction of the longest prefix of ``chain``, or None."""
        entries = self._by_key.get(key)
        if not entries:
            return None
        best = best_prefix(((e.record.prefix_len, e.record.prefix_hash) for e in entries),
                           chain)
        if best is None:
            return None
        return next(e.record for e in entries if e.record.prefix_hash == best[1])

    def fallback(self, key: str, chain: Sequence[str]) -> tuple[CompactionRecord | None, bool]:
        """While the store is down: the compaction of the longest prefix of ``chain`` this
        process knows (unstored, or the stored one it last served) and whether it is an
        unstored one."""
        record = self.find(key, chain)
        seen = self.seen(key, chain)
        if seen is not None and (record is None or seen.prefix_len > record.prefix_len):
            return seen, False
        return record, record is not None

    async def flush(self, key: str, writes: SessionWrites) -> int:
        """Write the session's unstored compactions (archive and record together), oldest
        first; those the store refuses stay in memory. How many were written."""
        entries = self.take(key)
        for done, entry in enumerate(entries):

            async def record_for(first: int, last: int, entry: Unstored = entry
                                 ) -> CompactionRecord:
                return replace(entry.record, archive_from=first, archive_to=last)

            try:
                await writes.write_together(key, entry.archived, record_for,
                                            writes.store.put_compaction)
            except store_errors():
                self.put_back(key, entries[done:])
                return done
        return len(entries)

    async def catch_up(self, writes: SessionWrites, outage: StoreOutage) -> None:
        """Write every unstored compaction (the store is back)."""
        written = 0
        for key in list(self._by_key):
            written += await self.flush(key, writes)
            if outage.down:
                break
        if written:
            log.info("session store: %d compactions made during the outage stored", written)

    def take(self, key: str) -> list[Unstored]:
        """Remove and return the session's unstored compactions, oldest first."""
        return self._by_key.pop(key, [])

    def put_back(self, key: str, entries: list[Unstored]) -> None:
        """Return ``entries`` (not written after all) ahead of any kept meanwhile."""
        if entries:
            self._by_key[key] = entries + self._by_key.get(key, [])
