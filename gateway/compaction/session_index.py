"""Which sessions may have stored compactions: lets most requests skip the session store.

Looking a session up costs a hash over the whole history and a store round trip (a worker
thread for SQLite, the network for Redis). Most sessions never compact, so the service
remembers, per session, that the store had nothing for it, and trusts that for ``ttl``
seconds. A compaction made meanwhile by another process (worker or replica) is found once the
entry expires, or at once when this process is about to compact (the service looks again,
bypassing the index, before it summarizes).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class _Entry:
    checked_at: float
    has_records: bool


class SessionIndex:
    """An LRU of sessions and what the store last said about them."""

    def __init__(self, ttl: float = 10.0, max_sessions: int = 100_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._ttl = ttl
        self._max = max_sessions
        self._clock = clock

    def needs_lookup(self, key: str) -> bool:
        """True unless the store recently had nothing for this session."""
        entry = self._entries.get(key)
        if entry is None or entry.has_records:
            return True
        return self._clock() - entry.checked_at >= self._ttl

    def note(self, key: str, *, has_records: bool) -> None:
        """Record what a lookup found (or that this process stored or parked something)."""
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = _Entry(self._clock(), has_records)
            if len(self._entries) > self._max:
                self._entries.popitem(last=False)
        else:
            entry.checked_at = self._clock()
            entry.has_records = entry.has_records or has_records
            self._entries.move_to_end(key)
