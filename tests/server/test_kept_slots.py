"""The store of kept bodies: one memory budget for every wire's readers, each reader's
bodies found only by it (its owners' names), the least recently used going first."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.server.kept_slots import PROBE, KeptSlots


@dataclass(eq=False)
class _Body:
    prefix: memoryview
    size: int

    @property
    def stable(self) -> int:
        return len(self.prefix)


def _body(text: bytes, size: int) -> _Body:
    return _Body(memoryview(text), size)


def test_every_readers_bodies_share_one_budget() -> None:
    kept = KeptSlots(1000)
    chat = _body(b"c" * (PROBE * 2), 400)
    messages = _body(b"m" * (PROBE * 2), 400)
    kept.keep("client", chat, None)
    kept.keep(("messages", "client"), messages, None)
    assert list(kept.candidates(b"c" * (PROBE * 3), "client")) == [chat]
    # The same bytes under another reader's owners: never found by this one.
    assert list(kept.candidates(b"m" * (PROBE * 3), "client")) == []
    assert list(kept.candidates(b"m" * (PROBE * 3), ("messages", "client"))) == [messages]
    # A third body past the budget: the least recently used (the chat one) goes.
    responses = _body(b"r" * (PROBE * 2), 400)
    kept.keep(("input", "client"), responses, None)
    assert list(kept.candidates(b"c" * (PROBE * 3), "client")) == []
    assert list(kept.candidates(b"r" * (PROBE * 3), ("input", "client"))) == [responses]


def test_a_turn_replaces_the_body_it_extends() -> None:
    kept = KeptSlots(10_000)
    first = _body(b"a" * (PROBE * 2), 100)
    kept.keep("client", first, None)
    second = _body(b"a" * (PROBE * 2) + b"b" * PROBE, 150)
    kept.keep("client", second, first)
    assert list(kept.candidates(b"a" * (PROBE * 2) + b"b" * (PROBE * 2), "client")) == [second]


def test_nothing_is_kept_without_a_budget() -> None:
    kept = KeptSlots(0)
    kept.keep("client", _body(b"x" * (PROBE * 2), 1), None)
    assert list(kept.candidates(b"x" * (PROBE * 3), "client")) == []


def test_a_session_that_starts_over_loses_its_old_body_before_another_session_its_only_one(
) -> None:
    # Two sessions, each body 400 of a 1,000 budget. Session A starts over: its first turn
    # again (the same probe bytes as its longer body, kept beside it). Past the budget the
    # body kept least recently goes (A's old one), not B's only one, although B's slot
    # was used before A's.
    kept = KeptSlots(1000)
    a_long = _body(b"a" * (PROBE * 4), 400)
    b_only = _body(b"b" * (PROBE * 4), 400)
    kept.keep("client", a_long, None)
    kept.keep("client", b_only, None)
    a_again = _body(b"a" * (PROBE * 4) + b"z", 400)  # (under the same probe)
    kept.keep("client", a_again, None)
    assert list(kept.candidates(b"b" * (PROBE * 5), "client")) == [b_only]
    assert list(kept.candidates(b"a" * (PROBE * 5), "client")) == [a_again]
    assert len(kept) == 2


def test_the_same_body_kept_again_counts_once() -> None:
    kept = KeptSlots(1000)
    body = _body(b"x" * (PROBE * 2), 600)
    kept.keep("client", body, None)
    kept.keep("client", body, body)  # (a retry of the very same turn)
    kept.keep("client", body, None)
    other = _body(b"y" * (PROBE * 2), 300)
    kept.keep("client", other, None)  # fits: the first is counted once
    assert list(kept.candidates(b"x" * (PROBE * 3), "client")) == [body]
    assert list(kept.candidates(b"y" * (PROBE * 3), "client")) == [other]


def test_a_body_of_the_same_bytes_replaces_the_older_copy() -> None:
    """A session that starts over and reaches the same turn again (or a turn sent twice) is
    kept once: reads try the newest first, so an older copy would never be read over again
    and every read probing its slot would try it (an agent fleet's sessions restarting
    filled slots with copies)."""
    kept = KeptSlots(100_000)
    written = b"s" * (PROBE * 3)
    first = _body(bytes(written), 100)
    kept.keep("client", first, None)
    longer = _body(bytes(written) + b"t", 100)  # another body under the same probe
    kept.keep("client", longer, None)
    again = _body(bytes(written), 100)  # the same bytes, another body
    kept.keep("client", again, None)
    assert list(kept.candidates(written + b"u" * PROBE, "client")) == [again, longer]
    assert len(kept) == 2
    # The same length with other bytes is another body: both stay.
    other = _body(b"s" * (PROBE * 3 - 1) + b"v", 100)
    kept.keep("client", other, None)
    assert len(kept) == 3
