"""Reusing stored compactions (SPEC §4.1), before anything is compacted now.

A request whose history begins with a stored prefix is served as the stored replacement
plus its new messages. A background result (stored as pending) applies only onto that
prefix plus new real user input; the late summary of a history that was answered trimmed
upgrades the trimming. While the store is down, the compaction this process kept in memory
is used (or the history as sent): repair and forwarding never depend on the store.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from gateway.compaction.outage import MemoryCompactions
from gateway.compaction.outcome import CompactionHow, CompactionOutcome, outcome_of
from gateway.compaction.session_view import SessionView, is_new_input
from gateway.compaction.stores import Stores
from gateway.projection import project
from gateway.projection.anomalies import Message
from gateway.sessions import KIND_SUMMARIZED, KIND_TRIMMED, CompactionRecord, prefix_chain
from gateway.sessions.errors import store_errors

# The history to send, how many of its first messages are a stored compaction (sent as
# stored), and what was reused (None: nothing).
Reused = tuple[list[Message], int, CompactionOutcome | None]


@dataclass(frozen=True, slots=True)
class StoredCompactions:
    """The compactions stored for a session (or kept in memory while the store is down),
    applied to the history a request carries."""

    stores: Stores
    unstored: MemoryCompactions

    async def apply(self, session: SessionView, *, large: bool) -> Reused:
        """The session's history with its stored compaction applied; while the store is
        down, the compaction this process kept in memory (or the history as sent).
        ``large``: the prefix chain is hashed off the event loop."""
        try:
            return await self._from_store(session, large=large)
        except store_errors():
            pass
        if session.chain is None:
            session.chain = (await asyncio.to_thread(prefix_chain, session.original) if large
                             else prefix_chain(session.original))
        record, unstored = self.unstored.fallback(session.key, session.chain)
        if record is None:
            return session.original, 0, None
        session.applied = record
        replacement = list(record.replacement)
        return (replacement + session.original[record.prefix_len:], len(replacement),
                outcome_of("reused", record, unstored=unstored))

    async def _from_store(self, session: SessionView, *, large: bool) -> Reused:
        store = self.stores.store
        original = session.original
        if self.unstored.has(session.key):  # made while the store was down: store it now
            await self.unstored.flush(session.key, self.stores.writes)
        if not await store.has_records(session.key):
            # Nothing stored for it (a new session, most often): no history to hash.
            self.stores.index.note(session.key, has_records=False)
            return original, 0, None
        if large:
            session.chain = await asyncio.to_thread(prefix_chain, original)
        else:
            session.chain = prefix_chain(original)
        record = await store.find_compaction(session.key, session.chain)
        pending = await store.take_pending(session.key)
        how: CompactionHow = "reused"
        if (pending is not None and pending_applies(pending, session)
                and (record is None or pending.prefix_len > record.prefix_len)):
            await store.put_compaction(pending)
            record, how = pending, "background-applied"
        elif (pending is not None and record is not None and record.kind == KIND_TRIMMED
              and pending.prefix_hash == record.prefix_hash):
            # The summary of a history that was answered trimmed came after all: it
            # replaces the trimming from this turn on.
            upgraded = await upgrade_trimmed(self.stores, session, pending)
            if upgraded is not None:
                record, how = upgraded, "background-applied"
        self.stores.index.note(session.key, has_records=record is not None)
        if record is None:
            return original, 0, None
        self.unstored.saw(session.key, record)
        session.applied = record
        replacement = list(record.replacement)
        return (replacement + original[record.prefix_len:], len(replacement),
                outcome_of(how, record))


def pending_applies(pending: CompactionRecord, session: SessionView) -> bool:
    """SPEC §4.1: only onto the compacted history plus new real user input (and the
    model's plain answers to it); a diverged history or new tool activity discards it."""
    n = pending.prefix_len
    if n > len(session.original) or session.chain_at(n) != pending.prefix_hash:
        return False
    return all(is_new_input(m) for m in session.original[n:])


async def upgrade_trimmed(stores: Stores, session: SessionView,
                          summary: CompactionRecord) -> CompactionRecord | None:
    """A record of the session's whole history: the late ``summary`` of a prefix that was
    answered trimmed, then the messages since (projected: stored, it is sent as it is).
    None (the summary parked again) while there is nothing after that prefix."""
    n = summary.prefix_len
    if len(session.original) <= n:
        await stores.store.put_pending(session.key, summary)
        return None
    rest = project(session.original[n:]).messages
    full = len(session.original)
    record = CompactionRecord.create(
        session_id=session.key, prefix_len=full, prefix_hash=session.chain_at(full),
        replacement=[*summary.replacement, *rest], tokens_before=summary.tokens_before,
        tokens_after=summary.tokens_after, archive_from=summary.archive_from,
        archive_to=summary.archive_to, kind=KIND_SUMMARIZED)
    await stores.store.put_compaction(record)
    return record
