"""Writing a compaction: archive lines and the stored record together (SPEC §4.3).

* Together: the archive append, the building of the compacted history (which names the
  archived lines) and the record's write run as one shielded unit, so a client that
  disconnects in between never leaves archive lines without their record.
* Never twice: when the archive already ends with exactly the lines to append (a write cut
  short by a crash, then retried), those lines are reused instead of appended again.
* One line range per compaction window: the ranges of the compactions the session's
  history went through are collected from their records, oldest first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.projection.anomalies import Message
from gateway.sessions import MAX_READ_LINES, Archive, CompactionRecord, SessionStore

_MAX_CHAIN = 32  # compactions followed back when listing the ranges


@dataclass(slots=True)
class SessionWrites:
    """The archive and the store of one service, written as one."""

    store: SessionStore
    archive: Archive

    async def append_once(self, key: str, messages: Sequence[Message]) -> tuple[int, int]:
        """Append ``messages`` unless the archive already ends with exactly them; their
        line range either way (``(n + 1, n)`` for none)."""
        count = await self.archive.line_count(key)
        n = len(messages)
        if 0 < n <= min(count, MAX_READ_LINES):
            tail = await self.archive.read(key, count - n + 1, count)
            if tail == list(messages):
                return count - n + 1, count
        return await self.archive.append(key, messages)

    async def earlier_ranges(
        self, key: str, chain: Sequence[str], applied: CompactionRecord | None
    ) -> tuple[tuple[int, int], ...]:
        """The archive ranges of the compactions before this one, oldest first.

        ``applied`` is the compaction the history being compacted started from; the one
        before it is the record of the prefix its archived lines began after.
        """
        ranges: list[tuple[int, int]] = []
        record = applied
        for _ in range(_MAX_CHAIN):
            if record is None or record.archive_to < record.archive_from:
                break
            ranges.append((record.archive_from, record.archive_to))
            before = record.archive_from - 1
            if before < 1 or before > len(chain):
                break
            found = await self.store.find_compaction(key, chain[:before])
            if found is None or found.prefix_len != before or found is record:
                break
            record = found
        return tuple(reversed(ranges))

    async def write_together(
        self,
        key: str,
        archived: Sequence[Message],
        build: Callable[[int, int], Awaitable[CompactionRecord | None]],
        store: Callable[[CompactionRecord], Awaitable[Any]],
    ) -> CompactionRecord | None:
        """Archive ``archived``, ``build`` the record from its line range and ``store`` it:
        shielded from the caller's cancellation, so all of it happens or (on an error
        before the append) none of it."""

        async def unit() -> CompactionRecord | None:
            first, last = await self.append_once(key, archived)
            record = await build(first, last)
            if record is not None:
                await store(record)
            return record

        return await asyncio.shield(unit())
