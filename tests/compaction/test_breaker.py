"""The summarizer circuit breaker: consecutive failures open it, a cooldown half-opens it."""

from __future__ import annotations

from gateway.compaction.breaker import SummaryBreaker, breaker_keys


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_the_threshold_and_half_opens_after_the_cooldown() -> None:
    clock = Clock()
    breaker = SummaryBreaker(threshold=3, cooldown=60, clock=clock)
    keys = breaker_keys("s1", "local")
    for _ in range(2):
        breaker.failed(keys)
        assert breaker.allows(keys)
    breaker.failed(keys)
    assert not breaker.allows(keys)
    # Another session of the same route is refused too: the route key is open.
    assert not breaker.allows(breaker_keys("s2", "local"))
    assert breaker.allows(breaker_keys("s2", "other-model"))
    clock.now = 61
    assert breaker.allows(keys)  # one probe
    breaker.failed(keys)
    assert not breaker.allows(keys)  # it failed: open again at once
    clock.now = 200
    breaker.succeeded(keys)
    breaker.failed(keys)
    assert breaker.allows(keys)  # a success reset the count


def test_failures_must_be_consecutive() -> None:
    breaker = SummaryBreaker(threshold=2, cooldown=60, clock=Clock())
    keys = breaker_keys("s", "m")
    breaker.failed(keys)
    breaker.succeeded(keys)
    breaker.failed(keys)
    assert breaker.allows(keys)
