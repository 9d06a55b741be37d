"""Bodies kept for the turns that extend them, found by their client and a few of their bytes.

A kept body is found by the client and the ``PROBE`` bytes that end at the largest power of
two within the part a later turn repeats (its ``stable`` length): a later turn has the same
bytes there, and sessions sharing a system prompt differ there once their history outgrows
it. A read probes each power of two of its own length, largest first (about 20 dictionary
lookups for 300 KB). The least recently used go first past a memory budget (estimated).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator
from typing import Protocol

PROBE = 64
_PER_SLOT = 32  # bodies kept under one probe (sessions alike up to that point)


class Keepable(Protocol):
    """A kept body: how many of its leading bytes a later turn repeats, and its memory."""

    @property
    def prefix(self) -> memoryview: ...  # (a view of the body from its first byte)

    @property
    def stable(self) -> int: ...

    @property
    def size(self) -> int: ...


def _same_bytes(a: memoryview, b: memoryview) -> bool:
    """Whether two kept prefixes (each a view of its body from its first byte) hold the same
    bytes: one ``memcmp`` (``==`` on views compares them item by item, ~70× slower)."""
    if len(a) != len(b):
        return False
    whole = a.obj
    return whole.startswith(b) if isinstance(whole, bytes) else a == b


def _key(kept: Keepable) -> tuple[int, bytes]:
    end = 1 << (kept.stable.bit_length() - 1)
    return end, bytes(kept.prefix[end - PROBE:end])


class KeptSlots:
    """Kept bodies by client and probe bytes, within ``max_bytes`` (0: none kept): one
    budget for every wire's readers (each names its bodies' owners its own way). Past the
    budget the body kept least recently goes first, whichever slot it is in: a session
    that starts over leaves its longer body beside the new one under the same probe, and
    that one must go before another session's only body."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._slots: dict[tuple[Hashable, int, bytes], list[Keepable]] = {}
        # every kept body by id, the least recently kept first, with its slot's key
        self._order: OrderedDict[int, tuple[tuple[Hashable, int, bytes], Keepable]] = (
            OrderedDict())
        self._bytes = 0
        # the newest kept body under each slot key with a prefix of each length
        self._by_length: dict[tuple[tuple[Hashable, int, bytes], int], Keepable] = {}

    def __len__(self) -> int:
        return len(self._order)

    def candidates(self, raw: bytes, owner: Hashable) -> Iterator[Keepable]:
        """The kept bodies of ``owner`` whose probe bytes ``raw`` has, longest first."""
        if self.max_bytes <= 0 or not self._slots or len(raw) < PROBE:
            return
        end = 1 << (len(raw).bit_length() - 1)
        slots = self._slots
        while end >= PROBE:
            yield from slots.get((owner, end, raw[end - PROBE:end]), ())
            end >>= 1

    def keep(self, owner: Hashable, kept: Keepable, extended: Keepable | None) -> None:
        """Keep ``kept`` (the most recently used); ``extended``, the body it was read over,
        goes: the next turn extends this one."""
        if self.max_bytes <= 0 or kept.stable < PROBE:
            return
        if extended is not None:
            self._drop(extended)
        self._drop(kept)  # (the very same body again: kept once, as the newest)
        if kept.size > self.max_bytes:
            return
        key = (owner, *_key(kept))
        # A kept body of the very same bytes (a session started over, a turn sent again)
        # could never be read over again: reads try the newest first. It goes.
        alike = (key, len(kept.prefix))
        other = self._by_length.get(alike)
        if other is not None and _same_bytes(other.prefix, kept.prefix):
            self._drop(other)
        self._by_length[alike] = kept
        slot = self._slots.setdefault(key, [])
        slot.insert(0, kept)
        self._order[id(kept)] = (key, kept)
        self._bytes += kept.size
        while len(slot) > _PER_SLOT:
            self._drop(slot[-1])
        while self._bytes > self.max_bytes:  # (``kept`` fits: it is the last to go)
            self._drop(next(iter(self._order.values()))[1])

    def _drop(self, body: Keepable) -> None:
        """Forget ``body`` if it is kept."""
        # (an id found is this body's: the order holds what it names, so no other has it)
        entry = self._order.pop(id(body), None)
        if entry is None:
            return
        key = entry[0]
        slot = self._slots[key]
        for i, other in enumerate(slot):
            if other is body:
                del slot[i]
                break
        if not slot:
            del self._slots[key]
        alike = (key, len(body.prefix))
        if self._by_length.get(alike) is body:
            del self._by_length[alike]
        self._bytes -= body.size
