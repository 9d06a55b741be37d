"""The session index: sessions the store had nothing for are not looked up again for a while."""

from __future__ import annotations

from gateway.compaction.session_index import SessionIndex


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_unknown_sessions_and_sessions_with_records_are_always_looked_up() -> None:
    index = SessionIndex(ttl=10, clock=Clock())
    assert index.needs_lookup("a")
    index.note("a", has_records=True)
    assert index.needs_lookup("a")


def test_a_negative_answer_is_trusted_until_it_expires() -> None:
    clock = Clock()
    index = SessionIndex(ttl=10, clock=clock)
    index.note("a", has_records=False)
    assert not index.needs_lookup("a")
    clock.now += 9.9
    assert not index.needs_lookup("a")
    clock.now += 0.2
    assert index.needs_lookup("a")


def test_records_once_seen_are_not_forgotten_by_a_later_miss() -> None:
    index = SessionIndex(ttl=10, clock=Clock())
    index.note("a", has_records=True)
    index.note("a", has_records=False)
    assert index.needs_lookup("a")


def test_the_index_is_bounded() -> None:
    index = SessionIndex(ttl=10, max_sessions=2, clock=Clock())
    for key in ("a", "b", "c"):
        index.note(key, has_records=False)
    assert index.needs_lookup("a")  # evicted: looked up again
    assert not index.needs_lookup("c")
