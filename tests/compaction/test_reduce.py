"""The cheap reductions (SPEC §5, issue 22): superseded tool results become a one-line note,
old long ones a short card; the latest result of each call and the current turn stay."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.compaction.reduce import (
    FOLDED_PREFIX,
    SUPERSEDED_PREFIX,
    fold_old_results,
    reduce_history,
    reduce_superseded,
)
from tests.factories import assistant, system, tool, tool_call, user
from tests.projection.rules import pairing_violations

Message = dict[str, Any]


def words(messages: Sequence[Message]) -> int:
    return sum(len(str(m.get("content") or "").split()) + 1 for m in messages)


def read(i: int, path: str, body: str) -> list[Message]:
    return [assistant(None, [tool_call(f"c{i}", "read_file", {"path": path})]),
            tool(f"c{i}", body)]


def where(index: int) -> str:
    return f"line {index}"


def test_a_file_read_three_times_keeps_the_last_read() -> None:
    h = [system("s"), user("go"), *read(0, "a.py", "first " * 50), *read(1, "b.py", "b " * 50),
         *read(2, "a.py", "second " * 50), *read(3, "a.py", "third " * 50)]
    out = reduce_superseded(h, where)
    assert out.superseded == 2
    results = [m["content"] for m in out.messages if m["role"] == "tool"]
    assert results[0].startswith(SUPERSEDED_PREFIX) and 'read_file({"path":"a.py"})' in results[0]
    assert "(line 3)" in results[0] and f"({len('first ' * 50)} characters)" in results[0]
    assert results[1] == "b " * 50  # another file: kept
    assert results[2].startswith(SUPERSEDED_PREFIX)
    assert results[3] == "third " * 50  # the latest read: verbatim
    assert h[3]["content"] == "first " * 50, "the input is not changed"
    assert pairing_violations(out.messages, guard=False) == []


def test_the_same_arguments_in_another_order_are_the_same_call() -> None:
    h = [user("go"),
         assistant(None, [{"id": "c0", "type": "function", "function": {
             "name": "grep", "arguments": '{"a": 1, "b": 2}'}}]), tool("c0", "x " * 80),
         assistant(None, [{"id": "c1", "type": "function", "function": {
             "name": "grep", "arguments": '{"b":2,"a":1}'}}]), tool("c1", "y " * 80)]
    assert reduce_superseded(h, where).superseded == 1


def test_a_short_result_is_not_replaced_by_a_longer_note() -> None:
    h = [user("go"), *read(0, "a.py", "ok"), *read(1, "a.py", "ok")]
    assert reduce_superseded(h, where).superseded == 0


def test_old_long_results_fold_and_the_current_turn_never_does() -> None:
    body = "\n".join(f"row {n}: " + "data " * 10 for n in range(100))
    h = [user("go"), *read(0, "log.txt", body), user("and now?"), *read(1, "big.txt", body)]
    out = fold_old_results(h, words, where, recent_tokens=10, min_tokens=100)
    assert out.folded == 1
    card = out.messages[2]["content"]
    assert card.startswith(FOLDED_PREFIX) and 'read_file({"path":"log.txt"})' in card
    assert f"returned {len(body)} characters in 100 lines" in card
    assert "row 0: data" in card and "row 4: data" in card and "row 5:" not in card
    assert "(line 2)" in card
    assert out.messages[-1]["content"] == body  # the current turn's result stays


def test_recent_results_stay_within_the_recent_budget() -> None:
    body = "word " * 200
    h = [user("go"), *read(0, "a", body), *read(1, "b", body), user("now?")]
    assert fold_old_results(h, words, where, recent_tokens=10_000, min_tokens=100).folded == 0


def test_reduce_history_folds_only_when_notes_are_not_enough() -> None:
    body = "word " * 300
    h = [user("go"), *read(0, "a", body), *read(1, "a", body), *read(2, "b", body),
         user("next")]
    enough = reduce_history(h, words, 10_000, recent_tokens=0, min_tokens=100)
    assert (enough.superseded, enough.folded) == (1, 0)
    more = reduce_history(h, words, 100, recent_tokens=0, min_tokens=100)
    assert more.superseded == 1 and more.folded == 2


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 3)),
                min_size=1, max_size=12))
def test_each_call_keeps_exactly_its_latest_result(reads: list[tuple[str, int]]) -> None:
    h: list[Message] = [user("go")]
    for i, (path, version) in enumerate(reads):
        h += read(i, path, f"{path} v{version} " + "x " * 200)
    out = reduce_superseded(h, where).messages
    assert len(out) == len(h)
    full = [m["content"] for m in out if m["role"] == "tool"
            and not m["content"].startswith(SUPERSEDED_PREFIX)]
    latest = {path: i for i, (path, _) in enumerate(reads)}
    assert full == [h[2 + 2 * i]["content"] for i in sorted(latest.values())]
