"""Archive lines and the compaction record are written together, never twice."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway.compaction.recovery_io import SessionWrites
from gateway.sessions import CompactionRecord, open_store, prefix_chain
from tests.factories import assistant, user


def record(history: list[dict[str, Any]], first: int, last: int) -> CompactionRecord:
    n = len(history)
    return CompactionRecord.create(
        session_id="s", prefix_len=n, prefix_hash=prefix_chain(history)[n - 1],
        replacement=[user("summary")], tokens_before=100, tokens_after=10,
        archive_from=first, archive_to=last, kind="summarized")


async def test_a_retry_reuses_lines_already_archived(tmp_path: Path) -> None:
    store, archive = open_store(tmp_path, None)
    writes = SessionWrites(store, archive)
    history = [user("a"), assistant("b"), user("c")]
    try:
        assert await writes.append_once("s", history) == (1, 3)
        # The process died before the record was stored; the retry appends nothing.
        assert await writes.append_once("s", history) == (1, 3)
        assert await archive.line_count("s") == 3
        # Different messages are appended.
        assert await writes.append_once("s", [user("d")]) == (4, 4)
    finally:
        await store.close()
        await archive.close()


async def test_a_cancelled_caller_still_gets_lines_and_record_together(tmp_path: Path) -> None:
    store, archive = open_store(tmp_path, None)
    writes = SessionWrites(store, archive)
    history = [user("a"), assistant("b"), user("c")]
    started = asyncio.Event()
    release = asyncio.Event()

    async def build(first: int, last: int) -> CompactionRecord:
        started.set()
        await release.wait()  # the client disconnects while the record is being built
        return record(history, first, last)

    stored = asyncio.Event()

    async def put(rec: CompactionRecord) -> None:
        await store.put_compaction(rec)
        stored.set()

    try:
        task = asyncio.create_task(writes.write_together("s", history, build, put))
        await started.wait()
        task.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task  # the caller is gone ...
        await asyncio.wait_for(stored.wait(), 10)  # the shielded write finishes on its own
        found = await store.find_compaction("s", prefix_chain(history))
        assert found is not None and (found.archive_from, found.archive_to) == (1, 3)
        assert await archive.line_count("s") == 3
    finally:
        await store.close()
        await archive.close()


async def test_earlier_ranges_follow_the_chain_of_compactions(tmp_path: Path) -> None:
    store, archive = open_store(tmp_path, None)
    writes = SessionWrites(store, archive)
    h = [user(f"m{i}") for i in range(9)]
    chain = prefix_chain(h)
    try:
        first = record(h[:4], 1, 4)
        second = record(h[:7], 5, 7)
        await store.put_compaction(first)
        await store.put_compaction(second)
        assert await writes.earlier_ranges("s", chain, second) == ((1, 4), (5, 7))
        assert await writes.earlier_ranges("s", chain, None) == ()
    finally:
        await store.close()
        await archive.close()
