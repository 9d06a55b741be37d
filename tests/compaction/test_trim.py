"""The window-trimming safety net (SPEC §5): oldest first, exchanges whole, pins kept."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.compaction.trim import trim_to_fit, units
from tests.factories import assistant, system, tool, tool_call, user
from tests.projection.rules import pairing_violations

Message = dict[str, Any]


def words(messages: Sequence[Message]) -> int:
    """A token counter for tests: words of the content, plus 1 per message."""
    return sum(len(str(m.get("content") or "").split()) + 1 for m in messages)


def exchange(i: int) -> list[Message]:
    return [assistant(None, [tool_call(f"call_{i}", "read", {"n": i})]),
            tool(f"call_{i}", " ".join(["line"] * 30))]


def history() -> list[Message]:
    out: list[Message] = [system("be brief"), user("the task: fix the parser")]
    for i in range(6):
        out += exchange(i)
    out.append(assistant("Conclusion: the parser is fixed."))
    out.append(user("now write the tests"))
    return out


def test_a_history_that_fits_is_left_alone() -> None:
    assert trim_to_fit(history(), 10_000, words) is None


def test_oldest_go_first_and_the_pins_stay() -> None:
    h = history()
    trimmed = trim_to_fit(h, 120, words, where="Read them at GET /archive?from=1&to=16.")
    assert trimmed is not None
    out = trimmed.messages
    assert out[0] == h[0] and out[1] == h[1]  # system and the task
    assert "were omitted" in out[2]["content"] and "GET /archive?from=1&to=16" in out[2][
        "content"]
    assert out[-2:] == h[-2:]  # the conclusion and the current turn
    assert trimmed.tokens_after <= 120 < trimmed.tokens_before
    assert f"{len(trimmed.omitted)} earlier messages" in out[2]["content"]
    # What was dropped is the oldest exchanges, each with its result.
    assert trimmed.omitted == h[2:2 + len(trimmed.omitted)]
    assert len(trimmed.omitted) % 2 == 0
    assert pairing_violations(out, guard=False) == []


def test_a_tool_call_is_never_split_from_its_result() -> None:
    h = history()
    for budget in range(40, 200, 7):
        trimmed = trim_to_fit(h, budget, words)
        if trimmed is None:
            continue
        ids = {m["tool_call_id"] for m in trimmed.messages if m["role"] == "tool"}
        calls = {c["id"] for m in trimmed.messages for c in m.get("tool_calls") or []}
        assert ids == calls


def test_when_even_the_pins_do_not_fit_the_minimum_comes_back() -> None:
    trimmed = trim_to_fit(history(), 5, words)
    assert trimmed is not None
    roles = [m["role"] for m in trimmed.messages]
    assert roles == ["system", "user", "user", "assistant", "user"]


def test_units_group_calls_with_their_results() -> None:
    h = history()
    assert units(h)[:3] == [[1], [2, 3], [4, 5]]


def test_the_conclusion_before_the_current_turn_is_pinned_not_a_later_one() -> None:
    h = [system("be brief"), user("the task: fix the parser"),
         assistant("Conclusion: the lexer is the culprit."), *exchange(0), *exchange(1),
         user("now fix the lexer"), assistant("Working on it."), *exchange(2)]
    trimmed = trim_to_fit(h, 60, words)
    assert trimmed is not None
    # The conclusion the user answered stays although older exchanges before it and after
    # it go; the current turn (from the last user message on) is its own last unit.
    assert h[2] in trimmed.messages
    assert trimmed.messages[-2:] == h[-2:]
    assert pairing_violations(trimmed.messages, guard=False) == []
