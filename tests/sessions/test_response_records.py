"""Records stored over earlier ones (``gateway.sessions.response_records``): when a record
is, and how its input is put together again."""

from __future__ import annotations

import copy
import zlib
from typing import Any

import orjson

from gateway.projection.lazy_messages import LazyMessages
from gateway.sessions.response_records import (
    MAX_CHAIN,
    KeptResponse,
    decode_kept,
    encode_kept,
    resolved,
    stored_over,
    stored_owner,
)

ANSWER = [{"type": "message", "role": "assistant", "content": "done"}]


def record(response_id: str, items: list[Any], owner: str = "o",
           response: dict[str, Any] | None = None) -> KeptResponse:
    return KeptResponse.create(response_id, owner, items, ANSWER, response)


def history(n: int) -> list[Any]:
    return [{"role": "user", "content": f"ask {i}"} for i in range(n)]


def stored(records: list[KeptResponse]) -> dict[str, KeptResponse]:
    """The records as a store decodes them (only what each adds)."""
    return {r.response_id: decode_kept(r.response_id, r.owner, encode_kept(r), r.created_at)
            for r in records}


def test_a_turn_repeating_the_last_ones_objects_is_stored_over_it() -> None:
    base = record("r1", history(6))
    turn = record("r2", [*base.input, {"role": "user", "content": "next"}])
    over = stored_over(turn, base)
    assert over.chain == ("r1",) and over.take == 6
    blob = stored([base, over])
    assert blob["r2"].input == [{"role": "user", "content": "next"}]
    back = resolved(blob["r2"], blob)
    assert back is not None and back.input == turn.input


def test_a_continued_answer_repeats_the_output_too() -> None:
    base = record("r1", history(4))
    turn = stored_over(record("r2", [*base.conversation(), {"role": "user", "content": "x"}]),
                       base)
    assert turn.take == 5
    blob = stored([base, turn])
    back = resolved(blob["r2"], blob)
    assert back is not None and back.input == turn.input


def test_equal_items_that_are_not_the_same_objects_are_stored_whole() -> None:
    # Only identity proves the items were not changed since (a repair, a compaction).
    base = record("r1", history(6))
    assert stored_over(record("r2", [*copy.deepcopy(base.input), {"role": "user"}]),
                       base).chain == ()
    changed = [*base.input[:3], {"role": "user", "content": "edited"}, *base.input[4:]]
    assert stored_over(record("r3", changed), base).chain == ()


def test_a_record_repeating_little_or_another_owners_is_stored_whole() -> None:
    base = record("r1", history(2))
    assert stored_over(record("r2", [*base.input, *history(5)]), base).chain == ()
    other = record("r3", history(6))
    assert stored_over(record("r4", [*other.input, {"role": "user"}], owner="p"),
                       other).chain == ()


def test_an_answer_under_way_lends_only_its_input() -> None:
    base = record("r1", history(4), response={"status": "in_progress"})
    turn = stored_over(record("r2", [*base.input, *ANSWER]), base)
    assert turn.take == 4


def test_a_chain_is_whole_again_after_its_limit() -> None:
    records = [record("r0", history(40))]
    for n in range(1, MAX_CHAIN + 2):
        turn = record(f"r{n}", [*records[-1].input, {"role": "user", "content": str(n)}])
        records.append(stored_over(turn, records[-1]))
    depths = [len(r.chain) for r in records]
    assert max(depths) == MAX_CHAIN - 1 and depths[MAX_CHAIN] == 0
    blob = stored(records)
    for r in records:
        back = resolved(blob[r.response_id], blob)
        assert back is not None and back.input == r.input


def test_a_missing_or_changed_link_reads_nothing() -> None:
    records = [record("r0", history(8))]
    for n in range(1, 4):
        records.append(stored_over(record(f"r{n}", [*records[-1].input, {"n": n}]),
                                   records[-1]))
    blob = stored(records)
    assert resolved(blob["r3"], {k: v for k, v in blob.items() if k != "r1"}) is None
    shorter = stored([record("r2", history(2))])  # (replaced: holds less than was taken)
    assert resolved(blob["r3"], {**blob, **shorter}) is None


def test_an_input_still_unparsed_is_stored_as_the_clients_json_and_read_back_whole() -> None:
    items = [{"role": "user", "content": "ask \u00e9"}, {"type": "function_call",
                                                    "call_id": "c1", "name": "f",
                                                    "arguments": "{}"}]
    written = b'[ {"role": "user", "content": "ask \\u00e9"},\n {"type": "function_call",' \
              b' "call_id": "c1", "name": "f", "arguments": "{}"} ]'
    lazy = LazyMessages(written, 2)
    kept = record("resp_1", lazy)
    assert kept.input is lazy  # (the body's own list: the next turn shares its objects)
    back = stored([kept])["resp_1"]
    assert not lazy.parsed  # written without parsing it
    assert back.input == items and back.conversation() == [*items, *ANSWER]


def test_a_record_an_older_gateway_wrote_as_zlib_still_reads() -> None:
    # Records are zstd now; those kept before (zlib-compressed orjson) stay continuable.
    items = history(3)
    old = zlib.compress(orjson.dumps({"input": items, "output": ANSWER, "at": 12.5,
                                      "chain": ["resp_0"], "take": 1}), 1)
    back = decode_kept("resp_1", "o", old, 1.0)
    assert back.input == items and back.output == ANSWER and back.created_at == 12.5
    assert back.chain == ("resp_0",) and back.take == 1
    new = encode_kept(record("resp_2", items))
    assert decode_kept("resp_2", stored_owner(record("resp_2", items)), new, 1.0).input == items
    # ...and an earlier gateway reads a zstd one as an empty record of another owner's.
    assert orjson.loads(zlib.decompress(new)) == {"input": [], "output": []}
    assert stored_owner(record("resp_2", items)) != "o"
