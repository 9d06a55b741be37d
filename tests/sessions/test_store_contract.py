"""Behaviour both session stores share, run against real SQLite and a real redis-server.

Every test builds stores with ``make_store()``; two stores from one factory share one
backing (one SQLite file, or one Redis server): two processes / two gateway replicas.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from gateway.config import parse_config
from gateway.sessions import (
    CompactionRecord,
    RedisSessionStore,
    SessionStore,
    SQLiteSessionStore,
    hash_client_key,
    prefix_chain,
)
from gateway.sessions.response_records import KeptResponse, stored_over
from gateway.sessions.responses_state import (
    ResponseState,
    ResponseStore,
    SQLiteResponseStore,
    open_response_store,
)
from gateway.sessions.retention import DAY, Sweeper, purge_old_responses
from tests.sessions.factories import history, record_for

MakeStore = Callable[[], SessionStore]


@pytest.fixture(params=["sqlite", "redis"])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MakeStore]:
    """Factory of stores on one shared backing; all are closed after the test."""
    made: list[SessionStore] = []
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_server")

        def make() -> SessionStore:
            made.append(RedisSessionStore(url))
            return made[-1]
    else:
        db = tmp_path / "sessions.sqlite3"

        def make() -> SessionStore:
            made.append(SQLiteSessionStore(db))
            return made[-1]

    yield make
    for store in made:
        await store.close()


async def test_find_returns_the_longest_stored_prefix(make_store: MakeStore) -> None:
    store = make_store()
    h = history(10)
    await store.put_compaction(record_for("s1", h, 3, "short"))
    await store.put_compaction(record_for("s1", h, 6, "long"))

    found = await store.find_compaction("s1", prefix_chain(h))
    assert found is not None and found.replacement[0]["content"] == "long"
    assert found.prefix_len == 6

    # A history that stops before the longer prefix gets the shorter one.
    found = await store.find_compaction("s1", prefix_chain(h[:5]))
    assert found is not None and found.prefix_len == 3

    # A fork that differs at message 4 shares only the 3-message prefix.
    fork = [*h[:3], {"role": "assistant", "content": "different"}, *h[4:]]
    found = await store.find_compaction("s1", prefix_chain(fork))
    assert found is not None and found.prefix_len == 3

    # Unrelated history, other session, empty chain: nothing.
    assert await store.find_compaction("s1", prefix_chain(history(10, "x"))) is None
    assert await store.find_compaction("other", prefix_chain(h)) is None
    assert await store.find_compaction("s1", []) is None


async def test_replacement_bytes_survive_a_round_trip(make_store: MakeStore) -> None:
    store = make_store()
    h = history(4)
    raw = b'[{"role":"user","content":"Summary \\u2028 \xe2\x9c\x93 \\n end","z":1.5,"a":null}]'
    rec = CompactionRecord(
        session_id="bytes",
        prefix_len=3,
        prefix_hash=prefix_chain(h)[2],
        replacement=orjson.loads(raw),
        replacement_raw=raw,
        tokens_before=300,
        tokens_after=20,
        created_at=1700000000.125,
        archive_from=7,
        archive_to=9,
        kind="background",
    )
    await store.put_compaction(rec)
    found = await make_store().find_compaction("bytes", prefix_chain(h))
    assert found == rec
    assert found is not None and found.replacement_raw == raw


async def test_first_record_for_a_prefix_wins(make_store: MakeStore) -> None:
    a, b = make_store(), make_store()
    h = history(5)
    await a.put_compaction(record_for("s", h, 4, "first"))
    await b.put_compaction(record_for("s", h, 4, "second"))
    for store in (a, b):
        found = await store.find_compaction("s", prefix_chain(h))
        assert found is not None and found.replacement[0]["content"] == "first"


async def test_two_instances_share_records(make_store: MakeStore) -> None:
    writer, reader = make_store(), make_store()
    h = history(8)
    assert await reader.find_compaction("shared", prefix_chain(h)) is None
    await writer.put_compaction(record_for("shared", h, 5, "from replica A"))
    found = await reader.find_compaction("shared", prefix_chain(h))
    assert found is not None and found.replacement[0]["content"] == "from replica A"


async def test_concurrent_writers_lose_nothing(make_store: MakeStore) -> None:
    a, b = make_store(), make_store()
    sessions = [f"sess-{i}" for i in range(20)]
    h = history(6)

    async def write(store: SessionStore, sid: str, n: int) -> None:
        await store.put_compaction(record_for(sid, h, n, f"{sid}/{n}"))

    await asyncio.gather(
        *(write(a, sid, 2) for sid in sessions), *(write(b, sid, 4) for sid in sessions)
    )
    reader = make_store()
    for sid in sessions:
        found = await reader.find_compaction(sid, prefix_chain(h))
        assert found is not None and found.replacement[0]["content"] == f"{sid}/4"
        found = await reader.find_compaction(sid, prefix_chain(h[:3]))
        assert found is not None and found.replacement[0]["content"] == f"{sid}/2"


async def test_pending_result_is_taken_once(make_store: MakeStore) -> None:
    a, b = make_store(), make_store()
    h = history(6)
    assert await a.take_pending("p") is None
    await a.put_pending("p", record_for("p", h, 3, "old", kind="background"))
    await a.put_pending("p", record_for("p", h, 5, "new", kind="background"))

    taken = await asyncio.gather(a.take_pending("p"), b.take_pending("p"))
    got = [t for t in taken if t is not None]
    assert len(got) == 1
    assert got[0].replacement[0]["content"] == "new" and got[0].kind == "background"
    assert await b.take_pending("p") is None
    # Pending results are not applied compactions.
    assert await a.find_compaction("p", prefix_chain(h)) is None


async def test_has_records_sees_compactions_and_parked_results_of_that_session(
        make_store: MakeStore) -> None:
    a, b = make_store(), make_store()
    h = history(6)
    assert not await a.has_records("s")
    await a.put_compaction(record_for("s", h, 3, "summary"))
    assert await b.has_records("s")  # seen by another replica
    assert not await b.has_records("other")
    await a.put_pending("p", record_for("p", h, 5, "parked", kind="background"))
    assert await b.has_records("p")
    assert await b.take_pending("p") is not None
    assert not await a.has_records("p")  # taken: nothing left for that session


async def test_owner_claim(make_store: MakeStore) -> None:
    a, b = make_store(), make_store()
    assert await a.get_owner("o") is None
    assert await a.claim_owner("o", "sk-first-key") is True
    assert await b.claim_owner("o", "sk-first-key") is True
    assert await b.claim_owner("o", "sk-second-key") is False
    assert await a.get_owner("o") == hash_client_key("sk-first-key")
    # Another session is free to claim.
    assert await b.claim_owner("o2", "sk-second-key") is True


async def test_concurrent_claims_have_one_winner(make_store: MakeStore) -> None:
    stores = [make_store(), make_store()]
    results = await asyncio.gather(
        *(stores[i % 2].claim_owner("race", f"key-{i}") for i in range(10))
    )
    assert results.count(True) == 1
    winner = results.index(True)
    assert await stores[0].get_owner("race") == hash_client_key(f"key-{winner}")


async def test_lock_excludes_others_until_released(make_store: MakeStore) -> None:
    a, b = make_store(), make_store()
    async with a.lock("L", "prefix-1", ttl=30) as got:
        assert got is True
        async with b.lock("L", "prefix-1", ttl=30) as other:
            assert other is False
        async with a.lock("L", "prefix-1", ttl=30) as same_store:
            assert same_store is False
        async with b.lock("L", "prefix-2", ttl=30) as other_key:
            assert other_key is True
        async with b.lock("L2", "prefix-1", ttl=30) as other_session:
            assert other_session is True
    async with b.lock("L", "prefix-1", ttl=30) as after:
        assert after is True


async def test_lock_is_released_when_the_body_raises(make_store: MakeStore) -> None:
    a, b = make_store(), make_store()
    with pytest.raises(RuntimeError, match="boom"):
        async with a.lock("E", "k", ttl=30) as got:
            assert got
            raise RuntimeError("boom")
    async with b.lock("E", "k", ttl=30) as got:
        assert got is True


async def test_concurrent_lock_attempts_have_one_winner(make_store: MakeStore) -> None:
    stores = [make_store(), make_store()]
    entered = asyncio.Event()
    release = asyncio.Event()
    winners: list[int] = []

    async def attempt(i: int) -> None:
        async with stores[i % 2].lock("C", "k", ttl=30) as got:
            if got:
                winners.append(i)
                entered.set()
                await release.wait()

    tasks = [asyncio.create_task(attempt(i)) for i in range(8)]
    await entered.wait()
    # Every loser has finished; only the winner still holds the lock.
    while sum(not t.done() for t in tasks) > 1:
        await asyncio.wait([t for t in tasks if not t.done()], return_when="FIRST_COMPLETED")
    release.set()
    await asyncio.gather(*tasks)
    assert len(winners) == 1


# -- kept Responses answers (gateway.sessions.responses_state) --------------------------

MakeResponseStore = Callable[[], ResponseStore]


@pytest.fixture(params=["sqlite", "redis"])
async def response_backing(request: pytest.FixtureRequest,
                           tmp_path: Path) -> AsyncIterator[dict[str, str | None]]:
    """``data_dir`` and ``redis_url`` of one backing (as ``sessions:`` configures it)."""
    url = request.getfixturevalue("redis_server") if request.param == "redis" else None
    yield {"data_dir": str(tmp_path / "data"), "redis_url": url}


@pytest.fixture
async def make_response_store(
        response_backing: dict[str, str | None]) -> AsyncIterator[MakeResponseStore]:
    """Factory of response stores on one shared backing; all are closed after the test."""
    made: list[ResponseStore] = []

    def make() -> ResponseStore:
        data_dir = response_backing["data_dir"]
        assert data_dir is not None
        made.append(open_response_store(data_dir, response_backing["redis_url"]))
        return made[-1]

    yield make
    for store in made:
        await store.close()


def kept(response_id: str, owner: str | None = "owner-a", text: str = "hi",
         created_at: float | None = None) -> KeptResponse:
    record = KeptResponse.create(
        response_id, owner, [{"role": "user", "content": text}],
        [{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
          "content": [{"type": "output_text", "text": f"re: {text}", "annotations": []}]}])
    if created_at is None:
        return record
    return KeptResponse(record.response_id, record.owner, record.input, record.output,
                        created_at)


async def test_a_kept_response_is_read_back_by_another_instance(
        make_response_store: MakeResponseStore) -> None:
    writer, reader = make_response_store(), make_response_store()
    text = "snow \u2603, a line break \n and \u2028"
    record = kept("resp_1", "owner-a", text)
    assert await reader.get_response("resp_1") is None
    await writer.put_response(record)
    found = await reader.get_response("resp_1")
    assert found is not None
    assert found.owner == "owner-a"
    assert found.input == record.input and found.output == record.output
    assert found.conversation() == [*record.input, *record.output]
    assert found.created_at == pytest.approx(record.created_at)
    assert await reader.get_response("resp_2") is None


async def test_a_response_object_and_origin_are_kept_and_a_record_deleted(
        make_response_store: MakeResponseStore) -> None:
    writer, reader = make_response_store(), make_response_store()
    answer = {"id": "resp_bg", "object": "response", "status": "queued", "background": True,
              "model": "gpt-5", "output": []}
    record = KeptResponse.create("resp_bg", "owner-a", [{"role": "user", "content": "x"}],
                                 [], answer, ("gpt", "gpt#1"))
    await writer.put_response(record)
    found = await reader.get_response("resp_bg")
    assert found is not None and not found.finished
    assert found.response == {k: v for k, v in answer.items() if k != "output"}
    assert found.origin == ("gpt", "gpt#1")
    done = found.answered({**answer, "status": "completed", "output": [{"type": "message"}]})
    assert done.finished and done.output == [{"type": "message"}]
    assert done.created_at == found.created_at  # (retention counts from the creation)
    assert await reader.delete_response("resp_bg") is True
    assert await writer.get_response("resp_bg") is None
    assert await writer.delete_response("resp_bg") is False


async def test_a_response_without_client_auth_has_the_empty_owner(
        make_response_store: MakeResponseStore) -> None:
    store = make_response_store()
    await store.put_response(kept("resp_open", None))
    found = await store.get_response("resp_open")
    assert found is not None and found.owner == ""


async def test_a_later_record_of_an_id_replaces_the_earlier(
        make_response_store: MakeResponseStore) -> None:
    a, b = make_response_store(), make_response_store()
    await a.put_response(kept("resp_same", "owner-a", "first"))
    await b.put_response(kept("resp_same", "owner-b", "second"))
    found = await a.get_response("resp_same")
    assert found is not None and found.owner == "owner-b"
    assert found.input[0]["content"] == "second"


async def test_records_kept_in_one_write_are_all_read_back_the_later_of_an_id_winning(
        make_response_store: MakeResponseStore) -> None:
    writer, reader = make_response_store(), make_response_store()
    await writer.put_responses([kept("resp_b1", "owner-a", "one"),
                                kept("resp_b2", "owner-b", "two"),
                                kept("resp_b1", "owner-a", "one, again")])
    first, second = await reader.get_response("resp_b1"), await reader.get_response("resp_b2")
    assert first is not None and first.input[0]["content"] == "one, again"
    assert second is not None and second.owner == "owner-b"
    assert second.output[0]["content"][0]["text"] == "re: two"


async def test_retention_removes_only_older_responses(
        make_response_store: MakeResponseStore,
        response_backing: dict[str, str | None]) -> None:
    store = make_response_store()
    now = time.time()
    await store.put_response(kept("resp_old", created_at=now - 40 * DAY))
    await store.put_response(kept("resp_new", created_at=now - DAY))
    config = parse_config({"model_list": [], "sessions": response_backing})
    assert await purge_old_responses(config, now - 30 * DAY) == 1
    reader = make_response_store()
    assert await reader.get_response("resp_old") is None
    assert await reader.get_response("resp_new") is not None
    assert await store.purge_responses(now - 30 * DAY) == 0


async def test_response_state_scopes_to_the_owner_and_keeps_in_the_background(
        make_response_store: MakeResponseStore) -> None:
    state = ResponseState(make_response_store())
    state.keep(kept("resp_mine", "owner-a"))
    # Asked before the background write is done: the lookup waits for it.
    mine = await state.lookup(("owner-a",), "resp_mine")
    assert mine.kept is not None and mine.kept.input[0]["content"] == "hi"
    other = await state.lookup(("owner-b",), "resp_mine")
    assert other.kept is None and other.foreign
    legacy = await state.lookup(("owner-new", "owner-a"), "resp_mine")  # a renamed key
    assert legacy.kept is not None
    unknown = await state.lookup(("owner-a",), "resp_other")
    assert unknown.kept is None and not unknown.foreign and not unknown.failed
    await state.close()


async def test_the_response_table_lives_beside_the_sessions(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite3"
    sessions, responses = SQLiteSessionStore(db), SQLiteResponseStore(db)
    try:
        h = history(4)
        await sessions.put_compaction(record_for("s", h, 3, "summary"))
        await responses.put_response(kept("resp_1"))
        found = await responses.find_compaction("s", prefix_chain(h))
        assert found is not None and found.replacement[0]["content"] == "summary"
        assert await responses.get_response("resp_1") is not None
    finally:
        await sessions.close()
        await responses.close()


async def test_the_retention_sweep_purges_old_responses(
        make_response_store: MakeResponseStore,
        response_backing: dict[str, str | None]) -> None:
    store = make_response_store()
    now = time.time()
    await store.put_response(kept("resp_old", created_at=now - 40 * DAY))
    await store.put_response(kept("resp_new", created_at=now - DAY))
    config = parse_config({"model_list": [],
                           "sessions": {**response_backing, "retention_days": 30}})
    sweeper = Sweeper(config, 30)
    try:
        await sweeper.sweep()
    finally:
        await sweeper.close()
    assert await store.get_response("resp_old") is None
    assert await store.get_response("resp_new") is not None


# -- records stored over earlier ones (an agent's turns) ---------------------------------

def turns(count: int, owner: str = "owner-a", start: float | None = None) -> list[KeptResponse]:
    """An agent's answers, each input repeating the one before (its very objects), each
    stored over the one before as ``ResponseState`` stores them."""
    records: list[KeptResponse] = []
    items: list[object] = [{"role": "developer", "content": "rules " * 50}]
    for n in range(count):
        items = [*items, {"role": "user", "content": f"ask {n}"}]
        record = KeptResponse.create(f"resp_t{n}", owner, items, [
            {"type": "message", "role": "assistant", "content": f"answer {n}"}])
        if start is not None:
            record = replace(record, created_at=start + n)
        records.append(stored_over(record, records[-1]) if records else record)
        items = list(records[-1].input)
    return records


async def test_records_stored_over_earlier_ones_read_back_whole(
        make_response_store: MakeResponseStore) -> None:
    writer, reader = make_response_store(), make_response_store()
    records = turns(5)
    assert [len(r.chain) for r in records] == [0, 1, 2, 3, 4]
    await writer.put_responses(records[:2])
    await writer.put_responses(records[2:])
    for record in records:
        found = await reader.get_response(record.response_id)
        assert found is not None and found.input == record.input
        assert found.output == record.output and found.chain == record.chain
        assert found.created_at == pytest.approx(record.created_at)


async def test_a_record_whose_base_is_another_owners_or_gone_is_not_read(
        make_response_store: MakeResponseStore) -> None:
    store = make_response_store()
    records = turns(3)
    await store.put_responses(records)
    # The base replaced by another owner's record of the same id: never read into this one.
    await store.put_response(kept(records[1].response_id, "owner-b"))
    assert await store.get_response(records[2].response_id) is None
    assert await store.get_response(records[0].response_id) is not None


async def test_retention_keeps_what_a_newer_record_is_stored_over(
        make_response_store: MakeResponseStore) -> None:
    store = make_response_store()
    now = time.time()
    old = turns(3, start=now - 40 * DAY)
    newer = stored_over(replace(KeptResponse.create(
        "resp_new", "owner-a", [*old[-1].conversation(), {"role": "user", "content": "on"}],
        []), created_at=now - DAY), old[-1])
    assert newer.chain == tuple(r.response_id for r in old)
    await store.put_responses([*old, newer])
    alone = turns(1, start=now - 40 * DAY)[0]
    await store.put_response(replace(alone, response_id="resp_alone"))
    assert await store.purge_responses(now - 30 * DAY) == 1  # (only the one alone)
    found = await store.get_response("resp_new")
    assert found is not None and found.conversation() == newer.conversation()
    assert await store.purge_responses(now) == 4
    assert await store.get_response("resp_new") is None


async def test_a_deleted_record_others_are_stored_over_is_hidden_until_they_go(
        make_response_store: MakeResponseStore) -> None:
    store = make_response_store()
    records = turns(4)
    await store.put_responses(records)
    assert await store.delete_response(records[1].response_id) is True
    assert await store.get_response(records[1].response_id) is None
    assert await store.delete_response(records[1].response_id) is False  # (gone to callers)
    found = await store.get_response(records[3].response_id)
    assert found is not None and found.input == records[3].input
    for record in (records[3], records[2]):
        assert await store.delete_response(record.response_id) is True
    # The hidden record went with the last one stored over it; its own base stays.
    assert await store.purge_responses(time.time() + 1) == 1


async def test_a_record_over_one_deleted_or_purged_meanwhile_is_stored_whole(
        make_response_store: MakeResponseStore) -> None:
    # Its base went between the answer and its write (deleted, purged): it is not lost.
    store = make_response_store()
    records = turns(4)
    await store.put_responses(records[:2])
    assert await store.delete_response(records[1].response_id) is True
    await store.put_responses(records[2:])
    for record in records[2:]:
        found = await store.get_response(record.response_id)
        assert found is not None and found.input == record.input and found.chain == ()


async def test_an_earlier_gateway_takes_every_record_for_another_owners(
        make_response_store: MakeResponseStore,
        response_backing: dict[str, str | None]) -> None:
    # A gateway from before zstd records and records stored over others (a rolling upgrade,
    # a rollback) reads a record's owner and its blob as zlib JSON: it must read every record
    # without failing, and never pass its owner check (it would continue an empty or a
    # shortened conversation).
    store = make_response_store()
    records = turns(3)
    await store.put_responses(records)
    stored = await raw_records(response_backing, [r.response_id for r in records])
    assert len(stored) == 3
    for owner, blob in stored:
        earlier = orjson.loads(zlib.decompress(blob))  # (as an earlier gateway decodes it)
        assert earlier["input"] == [] and earlier["output"] == []
        assert owner.removeprefix("over:") != "owner-a"
    for record in records:
        found = await store.get_response(record.response_id)
        assert found is not None and found.owner == "owner-a" and found.input == record.input


async def raw_records(backing: dict[str, str | None], ids: list[str]) -> list[tuple[str, bytes]]:
    """The owners and blobs as stored, read as an earlier gateway reads them."""
    if backing["redis_url"]:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(backing["redis_url"])
        try:
            values = [await client.get(f"gw:r:{i}") for i in ids]
        finally:
            await client.aclose()
        parts = [bytes(v).partition(b"\n") for v in values if v is not None]
        return [(owner.decode(), blob) for owner, _, blob in parts]
    import contextlib
    import sqlite3

    assert backing["data_dir"] is not None
    with contextlib.closing(sqlite3.connect(Path(backing["data_dir"]) / "sessions.sqlite3")) as db:
        rows = [db.execute("SELECT owner, items FROM responses WHERE response_id = ?",
                           (i,)).fetchone() for i in ids]
    return [(str(owner), bytes(blob)) for owner, blob in rows]
