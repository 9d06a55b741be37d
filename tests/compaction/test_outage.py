"""Store outages (issue 22): one warning per outage, fast failures while down with a probe
now and then, in-memory compactions kept until they are stored, windows kept on disk."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.compaction.outage import MemoryCompactions, StoreOutage, Unstored
from gateway.compaction.window_share import FileWindows
from gateway.sessions import CompactionRecord, prefix_chain
from gateway.sessions.errors import StoreUnavailable, store_errors
from tests.factories import user


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def failing() -> int:
    raise ConnectionRefusedError("connection refused")


async def working() -> int:
    return 1


async def test_one_warning_per_outage_and_fast_failures_while_down(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    outage = StoreOutage(clock)
    recovered: list[bool] = []
    outage.on_recovered = lambda: recovered.append(True)
    calls: list[int] = []

    async def counted() -> int:
        calls.append(1)
        return 1

    for attempt in range(3):
        clock.now += 1.0 if attempt else 0.0  # each a probe: one is let through per second
        with pytest.raises(store_errors()):
            await outage.run(failing)
    assert outage.down
    # While down, calls fail at once without touching the store...
    clock.now += 0.5
    with pytest.raises(StoreUnavailable):
        await outage.run(counted)
    assert calls == []
    # ... but for a probe now and then, which finds it back.
    clock.now += 0.5
    assert await outage.run(counted) == 1
    assert not outage.down and recovered == [True]
    with pytest.raises(store_errors()):
        await outage.run(failing)  # a second outage
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage().split(" (")[0] for r in warnings] == [
        "session store unavailable", "session store unavailable"]
    assert "connection refused" in warnings[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]


def record(messages: list[dict[str, str]], n: int) -> CompactionRecord:
    return CompactionRecord.create(
        session_id="k", prefix_len=n, prefix_hash=prefix_chain(messages)[n - 1],
        replacement=[user(f"compacted {n}")], tokens_before=10, tokens_after=1,
        archive_from=1, archive_to=0, kind="trimmed")


def test_unstored_compactions_are_found_by_prefix_and_taken_in_order() -> None:
    history = [user(f"m{i}") for i in range(6)]
    memory = MemoryCompactions(max_sessions=2)
    first, second = record(history, 2), record(history, 4)
    memory.add("k", Unstored(first, history[:2]))
    memory.add("k", Unstored(second, history[2:4]))
    chain = prefix_chain(history)
    assert memory.find("k", chain) is second
    assert memory.find("k", chain[:3]) is first
    assert memory.find("other", chain) is None
    taken = memory.take("k")
    assert [e.record for e in taken] == [first, second] and not memory.has("k")
    memory.put_back("k", taken[1:])
    assert memory.find("k", chain) is second and len(memory) == 1
    memory.saw("s", first)
    assert memory.seen("s", chain) is first and memory.seen("s", chain[:1]) is None


async def test_learned_windows_survive_a_restart_on_disk(tmp_path: Path) -> None:
    clock = Clock()
    windows = FileWindows(tmp_path, clock)
    assert await windows.lookup("local") is None
    await windows.put("local", 2048)
    await windows.put("other", 8000)
    assert not windows.due("local")  # looked a moment ago: not again for a while
    restarted = FileWindows(tmp_path, clock)
    assert await restarted.lookup("local") == 2048
    assert await restarted.lookup("other") == 8000
