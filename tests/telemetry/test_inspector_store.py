"""The inspector's shared file: a write still running in its thread when the gateway shuts
down (its task cancelled) finishes before the connection closes, instead of running on a
closed connection (which crashed the process, seen as a segfault in a full test run)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

from gateway.telemetry.inspector import FILE_NAME, Inspector
from gateway.telemetry.record import RequestRecord


async def test_a_write_left_running_by_a_cancelled_task_ends_before_the_close(
    tmp_path: Path,
) -> None:
    inspector = Inspector(10, str(tmp_path))
    await inspector.start()
    entered, release = threading.Event(), threading.Event()
    write = inspector._write

    def held_write(batch: list[dict[str, Any]]) -> None:
        entered.set()
        release.wait(10)  # (bounded: a broken close must not hang the suite)
        write(batch)

    inspector._write = held_write  # type: ignore[method-assign]
    inspector.add(RequestRecord(request_id="req-1", started_at=1.0, model="m", status=200))
    assert await asyncio.to_thread(entered.wait, 10)  # the writer's thread is in the write
    closing = asyncio.create_task(inspector.close())  # cancels the writer task meanwhile
    await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(closing, 10)
    with sqlite3.connect(tmp_path / FILE_NAME) as conn:
        rows = conn.execute("SELECT request_id FROM requests").fetchall()
    assert rows == [("req-1",)]


async def test_a_slow_file_holds_no_more_than_the_last_requests(tmp_path: Path) -> None:
    # The shared file keeps the last ``size`` requests: while it is slower than the traffic
    # (another process holds it), no more than those wait in memory, and they are the ones
    # written when it is free again.
    inspector = Inspector(5, str(tmp_path))
    await inspector.start()
    other = sqlite3.connect(tmp_path / FILE_NAME, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        for n in range(400):
            inspector.add(RequestRecord(request_id=f"req-{n}", started_at=float(n), model="m",
                                        status=200))
            if n % 50 == 0:
                await asyncio.sleep(0)  # (the writer takes a batch and waits on the lock)
        assert len(inspector._queue) <= 5
    finally:
        other.rollback()
        other.close()
    await inspector.close()
    with sqlite3.connect(tmp_path / FILE_NAME) as conn:
        rows = conn.execute("SELECT request_id FROM requests ORDER BY time").fetchall()
    assert [r[0] for r in rows] == [f"req-{n}" for n in range(395, 400)]
