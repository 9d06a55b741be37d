"""CompactionRecord: construction, validation and the storage encoding."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from gateway.sessions.hashing import prefix_chain
from gateway.sessions.records import CompactionRecord, decode_record, encode_record

HASH = prefix_chain([{"role": "user", "content": "x"}])[0]
REPLACEMENT: list[dict[str, Any]] = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "Summary: line1\nline2 — ✓ \u2028", "z": 1, "a": [1.5, None]},
]


def test_create_derives_raw_bytes_from_the_replacement() -> None:
    rec = CompactionRecord.create(
        session_id="s",
        prefix_len=4,
        prefix_hash=HASH,
        replacement=REPLACEMENT,
        tokens_before=1000,
        tokens_after=100,
        archive_from=1,
        archive_to=4,
        created_at=12.5,
    )
    assert rec.replacement_raw == orjson.dumps(REPLACEMENT)
    assert rec.replacement == REPLACEMENT
    assert rec.kind == "summarized"
    # Key order of the replacement is kept (what the model saw, byte for byte).
    assert list(rec.replacement[1]) == ["role", "content", "z", "a"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.prefix_len = 5  # type: ignore[misc]


def test_encode_decode_keeps_raw_bytes_exactly() -> None:
    # Raw bytes that orjson would never produce (spaces): must survive untouched.
    raw = b'[ {"role": "user",   "content": "x"} ]'
    rec = CompactionRecord(
        session_id="s:with:colons\n",
        prefix_len=2,
        prefix_hash=HASH,
        replacement=orjson.loads(raw),
        replacement_raw=raw,
        tokens_before=10,
        tokens_after=3,
        created_at=1.25,
        archive_from=0,
        archive_to=0,
        kind="background",
    )
    back = decode_record(encode_record(rec))
    assert back == rec
    assert back.replacement_raw == raw


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("session_id", ""),
        ("prefix_len", 0),
        ("prefix_hash", "abc"),
        ("kind", "other"),
        ("archive_from", -1),
        ("archive_from", 9),
    ],
)
def test_invalid_records_are_refused(field: str, value: object) -> None:
    args: dict[str, object] = {
        "session_id": "s",
        "prefix_len": 3,
        "prefix_hash": HASH,
        "replacement": [],
        "tokens_before": 1,
        "tokens_after": 1,
        "archive_from": 1,
        "archive_to": 3,
    }
    args[field] = value
    with pytest.raises(ValueError):
        CompactionRecord.create(**args)  # type: ignore[arg-type]


def test_decode_refuses_garbage() -> None:
    with pytest.raises(ValueError):
        decode_record(b"not a record")
