"""A store call that does not answer in time is an outage (the compaction is made in
memory), bounded by a cap and, for a request waiting on it, by its deadline."""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.compaction import outage
from gateway.compaction.outage import (
    BACKGROUND_CALL_CAP,
    STORE_CALL_CAP,
    StoreOutage,
    StoreTimeout,
    call_limit,
    store_deadline,
)
from gateway.compaction.window_share import SharedWindows
from gateway.sessions.errors import StoreUnavailable, store_errors


async def never() -> None:
    await asyncio.Event().wait()


async def test_a_call_that_never_answers_is_an_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(outage, "BACKGROUND_CALL_CAP", 0.05)
    tracker = StoreOutage()
    with pytest.raises(StoreTimeout) as raised:
        await tracker.run(never)
    assert isinstance(raised.value, store_errors())
    assert tracker.down and "no answer within" in tracker.reason
    with pytest.raises(StoreUnavailable):  # the next call fails at once
        await tracker.run(never)


async def test_a_request_that_waited_for_the_store_does_not_wait_for_it_again() -> None:
    """One request pays for one store wait: once its call timed out, its later store calls
    in the same outage fail at once, even when a probe would be due; another request may
    still probe (and finds the store back)."""
    clock = [100.0]
    tracker = StoreOutage(clock=lambda: clock[0])

    async def one_request() -> None:
        with store_deadline(time.monotonic() + 0.2):  # (its calls are a request's)
            with pytest.raises(StoreTimeout):
                await tracker.run(never)
            clock[0] += outage.PROBE_EVERY * 5  # a probe is due...
            with pytest.raises(StoreUnavailable):  # ...but not by the request that waited
                await tracker.run(never)

    await asyncio.create_task(one_request())

    async def answers() -> str:
        return "back"

    assert await asyncio.create_task(tracker.run(answers)) == "back"  # another probes
    assert not tracker.down


async def test_the_limit_follows_the_requests_deadline() -> None:
    assert call_limit() == BACKGROUND_CALL_CAP  # no request waits
    with store_deadline(time.monotonic() + 2.0):
        assert 0.3 < call_limit() <= 0.5
    with store_deadline(time.monotonic() + 600):
        assert call_limit() == STORE_CALL_CAP
    with store_deadline(time.monotonic() - 5):  # passed: still a short try, not zero
        assert call_limit() == outage.MIN_STORE_CALL
    assert call_limit() == BACKGROUND_CALL_CAP


async def test_a_task_started_inside_gets_the_background_cap() -> None:
    with store_deadline(time.monotonic() + 0.4):
        inner = call_limit()
        background = await asyncio.create_task(_limit())
    assert inner <= 0.1
    assert background == BACKGROUND_CALL_CAP


async def _limit() -> float:
    return call_limit()


async def test_an_outer_deadline_cancels_rather_than_marking_an_outage() -> None:
    tracker = StoreOutage()
    with pytest.raises(TimeoutError) as raised:
        async with asyncio.timeout(0.01):
            await tracker.run(never)
    assert not isinstance(raised.value, StoreTimeout)
    assert not tracker.down


class HungWindows(SharedWindows):
    """A shared window store whose every call hangs (a Redis that stopped answering)."""

    async def _get(self, route: str) -> int | None:
        await asyncio.Event().wait()
        return None

    async def _put(self, route: str, window: int) -> None:
        await asyncio.Event().wait()


async def test_shared_windows_that_hang_are_an_error_not_a_wait() -> None:
    errors: list[Exception] = []
    windows = HungWindows()
    windows.on_error = errors.append
    with store_deadline(time.monotonic() + 0.2):
        assert await windows.lookup("m") is None
        await windows.put("m", 8_000)
    assert len(errors) == 2 and all(isinstance(e, StoreTimeout) for e in errors)
