"""The session store interface shared by the SQLite and Redis backends.

Semantics every backend follows:

* Records are keyed by ``(session_id, prefix_hash)``. The first record stored for a
  prefix wins; a later ``put_compaction`` for the same prefix is ignored, so replays of
  that prefix stay byte-identical whatever races happen.
* ``find_compaction`` returns the record for the LONGEST stored prefix of ``chain``.
  It does not follow chains of compactions: a stored replacement already includes the
  compactions before it.
* Background results are kept apart from applied records: ``put_pending`` parks at
  most one result per session (a newer one replaces it), ``take_pending`` removes and
  returns it atomically (two replicas cannot both take it). The caller decides whether
  the result still applies and, if so, stores it with ``put_compaction``.
* Owners are stored as :func:`~gateway.sessions.hashing.hash_client_key` of the key
  passed in; ``get_owner`` returns that hash, never a key.
* ``lock`` never waits: it yields ``False`` at once when someone else holds the lock.
  A lock expires after ``ttl`` seconds even if its holder never releases it (unless the
  holder renews it); release is token-checked so an expired holder cannot free a lock
  someone else took since. The token names the holder process
  (:mod:`gateway.sessions.lease`): a lock whose holder on this host is gone is taken over.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, runtime_checkable

from gateway.sessions.records import CompactionRecord

__all__ = ["SessionStore", "best_prefix"]


@runtime_checkable
class SessionStore(Protocol):
    """Async storage of compactions, session owners, pending results and locks."""

    async def put_compaction(self, record: CompactionRecord) -> None:
        """Store ``record`` unless one already exists for its (session, prefix_hash)."""
        ...

    async def find_compaction(
        self, session_id: str, chain: Sequence[str]
    ) -> CompactionRecord | None:
        """Return the record whose ``prefix_hash == chain[prefix_len - 1]`` for the
        longest such ``prefix_len``, or ``None``."""
        ...

    async def has_records(self, session_id: str) -> bool:
        """True when the session has a stored compaction or a parked background result
        (one cheap look before hashing a whole history to find them)."""
        ...

    async def put_pending(self, session_id: str, record: CompactionRecord) -> None:
        """Park a background compaction result for the session (replaces any)."""
        ...

    async def take_pending(self, session_id: str) -> CompactionRecord | None:
        """Remove and return the parked background result, or ``None``."""
        ...

    async def claim_owner(self, session_id: str, owner: str) -> bool:
        """Make ``owner`` (a client key; only its hash is stored) the session owner if
        it has none. True if ``owner`` owns the session now."""
        ...

    async def get_owner(self, session_id: str) -> str | None:
        """Return the hash of the owning client key, or ``None``."""
        ...

    def lock(
        self, session_id: str, key: str, ttl: float, *, renew: bool = False
    ) -> AbstractAsyncContextManager[bool]:
        """Try the lock ``(session_id, key)`` for a lease of ``ttl`` seconds (renewed while
        held with ``renew``); the context yields True if acquired (released on exit), False
        if someone else holds it."""
        ...

    async def close(self) -> None:
        """Release connections and threads. The store is unusable afterwards."""
        ...


def best_prefix(entries: Iterable[tuple[int, str]], chain: Sequence[str]) -> tuple[int, str] | None:
    """Pick the longest ``(prefix_len, prefix_hash)`` of ``entries`` that ``chain`` starts with."""
    best: tuple[int, str] | None = None
    n = len(chain)
    for prefix_len, prefix_hash in entries:
        if (
            1 <= prefix_len <= n
            and (best is None or prefix_len > best[0])
            and chain[prefix_len - 1] == prefix_hash
        ):
            best = (prefix_len, prefix_hash)
    return best
