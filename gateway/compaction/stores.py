"""The stores a compaction is written through, as the compaction service hands them to the
code that makes one (``summary_store``, ``safety_net``): the session store and archive
(both guarded by the outage tracker), the two written together, the session index, and
the in-memory fallback while the store is down."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.compaction.recovery_io import SessionWrites
from gateway.compaction.session_index import SessionIndex
from gateway.compaction.session_view import SessionView
from gateway.projection.anomalies import Message
from gateway.sessions import Archive, CompactionRecord, SessionStore

# Keeps a compaction made while the store is down in memory: the record kept, or None when
# it is not kept (a background result).
KeepUnstored = Callable[[SessionView, CompactionRecord, list[Message]], CompactionRecord | None]


@dataclass(frozen=True, slots=True)
class Stores:
    """Where a new compaction is archived and stored (one set per compaction service)."""

    store: SessionStore
    archive: Archive
    writes: SessionWrites
    index: SessionIndex
    keep_unstored: KeepUnstored
