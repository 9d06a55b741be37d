"""The message archive: line ranges, bounded reads, file safety, shared numbering."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.sessions import MAX_READ_LINES, Archive, JsonlArchive, RedisArchive, open_store
from gateway.sessions.archive import archive_file_name
from gateway.sessions.redis_store import RedisSessionStore
from gateway.sessions.sqlite_store import SQLiteSessionStore
from tests.sessions.factories import history, record_for

MakeArchive = Callable[[], Archive]


@pytest.fixture(params=["jsonl", "redis"])
async def make_archive(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[MakeArchive]:
    """Factory of archives on one shared backing (a data dir, or one redis-server)."""
    made: list[Archive] = []
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_server")

        def make() -> Archive:
            made.append(RedisArchive(url))
            return made[-1]
    else:

        def make() -> Archive:
            made.append(JsonlArchive(tmp_path / "data"))
            return made[-1]

    yield make
    for archive in made:
        await archive.close()


def odd_messages() -> list[dict[str, Any]]:
    """Messages whose exact shape is easy to lose: key order, newlines, unicode, nulls."""
    return [
        {"role": "user", "content": "line one\nline two\r\n\u2028 ✓ \x00 end"},
        {"content": None, "role": "assistant", "tool_calls": [{"id": "c1", "type": "function"}]},
        {"tool_call_id": "c1", "role": "tool", "content": [{"type": "text", "text": "{}"}]},
        {"role": "user", "content": "", "z": 1.5, "a": -0.0},
    ]


async def test_append_returns_consecutive_ranges(make_archive: MakeArchive) -> None:
    archive = make_archive()
    first, second = history(3, "a"), history(2, "b")
    assert await archive.line_count("s") == 0
    assert await archive.append("s", first) == (1, 3)
    assert await archive.append("s", second) == (4, 5)
    assert await archive.append("s", []) == (6, 5)  # nothing appended: empty range
    assert await archive.line_count("s") == 5
    assert await archive.read("s", 1, 5) == first + second
    assert await archive.read("s", 3, 4) == [first[2], second[0]]
    assert await archive.read("s", 4, 99) == second  # past the end: what exists
    assert await archive.read("s", 0, 1) == first[:1]  # start clamped to line 1
    assert await archive.read("s", 4, 3) == []
    assert await archive.read("other", 1, 10) == []
    assert await archive.line_count("other") == 0


async def test_messages_come_back_exactly(make_archive: MakeArchive) -> None:
    archive = make_archive()
    msgs = odd_messages()
    lo, hi = await archive.append("exact", msgs)
    back = await make_archive().read("exact", lo, hi)
    assert back == msgs
    assert [orjson.dumps(m) for m in back] == [orjson.dumps(m) for m in msgs]


async def test_reads_are_bounded(make_archive: MakeArchive) -> None:
    archive = make_archive()
    msgs = [{"role": "user", "content": str(i)} for i in range(MAX_READ_LINES + 5)]
    assert await archive.append("big", msgs) == (1, MAX_READ_LINES + 5)
    page = await archive.read("big", 1, 10_000)
    assert len(page) == MAX_READ_LINES
    assert page[-1]["content"] == str(MAX_READ_LINES - 1)
    assert await archive.read("big", MAX_READ_LINES + 1, 10_000) == msgs[MAX_READ_LINES:]


async def test_concurrent_appends_get_disjoint_ranges(make_archive: MakeArchive) -> None:
    # Two instances: two processes / replicas appending to one session.
    archives = [make_archive(), make_archive()]
    batches = [history(3, f"batch{i} ") for i in range(12)]
    ranges = await asyncio.gather(
        *(archives[i % 2].append("c", batch) for i, batch in enumerate(batches))
    )
    covered = sorted(line for lo, hi in ranges for line in range(lo, hi + 1))
    assert covered == list(range(1, 37))
    for (lo, hi), batch in zip(ranges, batches, strict=True):
        assert await archives[0].read("c", lo, hi) == batch
    assert await archives[1].line_count("c") == 36


# -- JSONL specifics ----------------------------------------------------------------


async def test_jsonl_lines_are_the_exact_messages(tmp_path: Path) -> None:
    archive = JsonlArchive(tmp_path)
    msgs = odd_messages()
    await archive.append("file-check", msgs)
    path = tmp_path / "archive" / "file-check.jsonl"
    assert archive.path_for("file-check") == path
    assert path.read_bytes().splitlines() == [orjson.dumps(m) for m in msgs]


async def test_jsonl_numbering_survives_restart(tmp_path: Path) -> None:
    await JsonlArchive(tmp_path).append("r", history(4))
    again = JsonlArchive(tmp_path)
    assert await again.line_count("r") == 4
    assert await again.append("r", history(2, "new ")) == (5, 6)
    assert await again.read("r", 5, 6) == history(2, "new ")


async def test_jsonl_torn_last_line_keeps_numbering(tmp_path: Path) -> None:
    archive = JsonlArchive(tmp_path)
    await archive.append("t", history(2))
    with archive.path_for("t").open("ab") as f:
        f.write(b'{"role":"user","cont')  # a crash mid-write
    fresh = JsonlArchive(tmp_path)
    assert await fresh.append("t", history(1, "after ")) == (4, 4)
    back = await fresh.read("t", 1, 4)
    assert back[:2] == history(2)
    assert back[2]["content"] == "[archive line unreadable]"
    assert back[3] == history(1, "after ")[0]


@pytest.mark.parametrize(
    "session_id",
    [
        "../../escape",
        "../escape",
        "..",
        ".",
        "/etc/passwd",
        "a/../../b",
        "a\\..\\b",
        "nul\x00byte",
        "~root",
        "x" * 500,
        "sha256.deadbeef",
    ],
)
async def test_hostile_session_ids_stay_inside_the_archive_dir(
    tmp_path: Path, session_id: str
) -> None:
    data = tmp_path / "data"
    archive = JsonlArchive(data)
    msgs = [{"role": "user", "content": session_id}]
    assert await archive.append(session_id, msgs) == (1, 1)
    assert await archive.read(session_id, 1, 1) == msgs
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 1
    assert files[0].parent == data / "archive"
    assert files[0].name == archive_file_name(session_id)
    assert "/" not in files[0].name and ".." not in files[0].name


async def test_unsafe_ids_do_not_share_files(tmp_path: Path) -> None:
    archive = JsonlArchive(tmp_path)
    ids = ["a/b", "a_b", "a.b", "a b", "A/B"]
    for i, sid in enumerate(ids):
        await archive.append(sid, [{"role": "user", "content": str(i)}])
    for i, sid in enumerate(ids):
        assert await archive.read(sid, 1, 10) == [{"role": "user", "content": str(i)}]
    assert len(list((tmp_path / "archive").iterdir())) == len(ids)


async def test_empty_session_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        await JsonlArchive(tmp_path).append("", history(1))


# -- factory --------------------------------------------------------------------------


async def test_open_store_without_redis_uses_the_data_dir(tmp_path: Path) -> None:
    store, archive = open_store(str(tmp_path / "d"), None)
    assert isinstance(store, SQLiteSessionStore) and isinstance(archive, JsonlArchive)
    h = history(3)
    lo, hi = await archive.append("f", h[:2])
    await store.put_compaction(record_for("f", h, 2, "s"))
    await store.close()
    await archive.close()
    assert (tmp_path / "d" / "sessions.sqlite3").is_file()
    assert (tmp_path / "d" / "archive" / "f.jsonl").is_file()
    assert (lo, hi) == (1, 2)


async def test_open_store_with_redis(redis_server: str, tmp_path: Path) -> None:
    store, archive = open_store(str(tmp_path), redis_server)
    assert isinstance(store, RedisSessionStore) and isinstance(archive, RedisArchive)
    assert await archive.append("f", history(2)) == (1, 2)
    assert await store.claim_owner("f", "k")
    await store.close()
    await archive.close()
    assert not (tmp_path / "archive").exists()
