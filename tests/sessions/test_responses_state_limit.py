"""A previous_response_id lookup waits no longer than the share of the request's deadline it
is given: a response store that hangs is one that failed. A store that fails a write leaves
no record stored over the lost one."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gateway.sessions import responses_state
from gateway.sessions.response_records import KeptResponse
from gateway.sessions.responses_state import ResponseState, SQLiteResponseStore


class HungStore:
    """A response store whose reads never answer (a Redis that stopped answering)."""

    async def put_response(self, record: KeptResponse) -> None:
        return None

    async def get_response(self, response_id: str) -> KeptResponse | None:
        await asyncio.Event().wait()
        return None

    async def purge_responses(self, before: float) -> int:
        return 0

    async def close(self) -> None:
        return None


async def test_a_lookup_gives_up_within_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(responses_state, "LOOKUP_TIMEOUT", 600.0)  # only the limit bounds it
    state = ResponseState(HungStore())
    found = await asyncio.wait_for(state.lookup(["owner"], "resp_1", limit=0.05), 30)
    assert found.failed and found.kept is None


async def test_without_a_limit_the_fixed_timeout_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(responses_state, "LOOKUP_TIMEOUT", 0.05)
    state = ResponseState(HungStore())
    found = await asyncio.wait_for(state.lookup(["owner"], "resp_1"), 30)
    assert found.failed


class OnceDownStore(SQLiteResponseStore):
    """The SQLite store whose first write fails once ``release`` is set (an outage while it
    was under way)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.started, self.release = asyncio.Event(), asyncio.Event()
        self.writes = 0

    async def put_responses(self, records: Sequence[KeptResponse]) -> None:
        self.writes += 1
        if self.writes == 1:
            self.started.set()
            await self.release.wait()
            raise sqlite3.OperationalError("database is locked")
        await super().put_responses(records)


def answer(response_id: str, items: list[Any]) -> KeptResponse:
    return KeptResponse.create(response_id, "owner", items, [{"type": "message"}])


async def test_no_record_is_kept_over_one_whose_write_failed(tmp_path: Path) -> None:
    store = OnceDownStore(tmp_path / "sessions.sqlite3")
    state = ResponseState(store)
    base = answer("resp_1", [{"role": "user", "content": str(n)} for n in range(4)])
    state.keep(base)
    await store.started.wait()
    # Queued while the base's write is under way (it fails afterwards): kept whole.
    queued = answer("resp_2", [*base.input, {"role": "user", "content": "on"}])
    assert state.keep(queued, [base]).chain == ("resp_1",)
    store.release.set()
    await state.flush()
    later = answer("resp_3", [*base.input, {"role": "user", "content": "again"}])
    assert state.keep(later, [base]).chain == ()  # (its base is known lost by now)
    for record in (queued, later):
        found = await state.lookup(["owner"], record.response_id)
        assert found.kept is not None and found.kept.input == record.input
    assert (await state.lookup(["owner"], "resp_1")).kept is None
    await state.close()


# -- a store slower than the traffic: requests wait, the backlog stays bounded ----------

async def test_the_backlog_is_bounded_while_the_store_is_slow(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "sessions.sqlite3"
    store = SQLiteResponseStore(path, busy_timeout=60.0)
    await store.get_response("resp_0")  # (the file and its tables exist)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process writing: the store's writes wait
    not_kept: list[tuple[str, int]] = []
    state = ResponseState(store, backlog_bytes=1000,
                          not_kept=lambda reason, count: not_kept.append((reason, count)))
    first = answer("resp_1", [{"role": "user", "content": "one"}])
    second = answer("resp_2", [{"role": "user", "content": "two"}])
    state.keep(first, size=600)
    assert await state.room(0.01)  # (600 of 1,000 waiting: room)
    state.keep(second, size=600)
    assert state.backlog == 1200
    assert not await state.room(0.05)  # over the bound: a request waits, at most its limit
    with caplog.at_level(logging.WARNING, logger="gateway.responses_state"):
        state.keep(answer("resp_3", [{"role": "user", "content": "three"}]), size=900)
        state.keep(answer("resp_4", [{"role": "user", "content": "four"}]), size=900)
    assert state.backlog == 1200  # (past twice the bound: not kept, one warning)
    assert len([r for r in caplog.records if "not kept" in r.getMessage()]) == 1
    assert not_kept == [("backlog", 1), ("backlog", 1)]  # (each counted: the metric)
    waiting = asyncio.create_task(state.room(60.0))
    done, _ = await asyncio.wait({waiting}, timeout=0.2)
    assert not done  # still waiting for the writer
    other.rollback()  # the other writer is done: the backlog drains
    assert await asyncio.wait_for(waiting, 30)
    await state.flush()
    assert state.backlog == 0
    for kept in (first, second):
        found = await state.lookup(["owner"], kept.response_id)
        assert found.kept is not None and found.kept.input == kept.input
    assert (await state.lookup(["owner"], "resp_3")).kept is None
    other.close()
    await state.close()
