"""A plain Responses input is one the wire's rules leave as it is, and a turn checked over
a plain one is plain exactly when it is plain checked whole.

Inputs are drawn from what Codex and the Agents SDK send (messages, reasoning with its
encrypted content, function calls and their outputs, item ids) with the faults the rules
repair mixed in: an id sent twice or of another type's prefix, a call id reused, empty or
too long, an output of no call, chat-typed parts, a reasoning item with nothing after it
or without its content when nothing is stored, a value where text belongs.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import ClientError
from gateway.wires.reading import read_plain_responses
from gateway.wires.responses_plain import plain_input, plain_input_after
from gateway.wires.responses_rules import answerable_input, repair_input
from gateway.wires.shapes import check_responses_items


def _fault(draw: st.DrawFn) -> bool:
    return draw(st.integers(0, 29)) == 0


class _Made:
    """Fresh ids and call ids, now and then one used before."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.calls: list[str] = []

    def item_id(self, draw: st.DrawFn, prefix: str) -> str | None:
        roll = draw(st.integers(0, 3))
        if roll == 0:
            return None
        if _fault(draw):
            return draw(st.sampled_from([*self.ids, "", "__fake_id__", "xyz_1"]))
        made = f"{prefix}_{len(self.ids)}"
        self.ids.append(made)
        return made

    def call_id(self, draw: st.DrawFn) -> str:
        if _fault(draw):
            return draw(st.sampled_from([*self.calls, "", "c" * 70]))
        made = f"call_{len(self.calls)}"
        self.calls.append(made)
        return made


def _with_id(item: dict[str, Any], ref: str | None) -> dict[str, Any]:
    if ref is not None:
        item["id"] = ref
    return item


def _words(draw: st.DrawFn, role: str) -> Any:
    kind = "output_text" if role == "assistant" else "input_text"
    if _fault(draw):
        return draw(st.sampled_from([" ", [{"type": "text", "text": "hi"}],
                                     [{"type": "input_text" if role == "assistant"
                                       else "output_text", "text": "hi"}]]))
    return draw(st.sampled_from(["do the thing", [{"type": kind, "text": "done"}]]))


@st.composite
def turn(draw: st.DrawFn, made: _Made, store: bool) -> list[dict[str, Any]]:
    """The model's turn (reasoning, calls, words) and what answers it."""
    items: list[dict[str, Any]] = []
    calls: list[str] = []
    if draw(st.booleans()):
        reasoning: dict[str, Any] = {"type": "reasoning", "summary": []}
        if not store or draw(st.booleans()):
            reasoning["encrypted_content"] = "gAAAA-opaque"
        if _fault(draw):
            reasoning.pop("encrypted_content", None)
        if _fault(draw):
            reasoning["summary"] = draw(st.sampled_from(["text", [{"type": "output_text",
                                                                   "text": "x"}]]))
        items.append(_with_id(reasoning, made.item_id(draw, "rs") or f"rs_x{len(made.ids)}"))
    for _ in range(draw(st.integers(0, 2))):
        ref = made.call_id(draw)
        call = {"type": "function_call", "call_id": ref, "name": "read_file",
                "arguments": f'{{"p": {draw(st.integers(0, 9))}}}'}
        if _fault(draw):
            call["arguments"] = {"p": 1}
        items.append(_with_id(call, made.item_id(draw, "fc")))
        calls.append(ref)
    if not calls or draw(st.booleans()):
        items.append(_with_id({"type": "message", "role": "assistant",
                               "content": _words(draw, "assistant")},
                              made.item_id(draw, "msg")))
    if _fault(draw) and items:
        items.pop()  # (reasoning left alone, a call without its output)
    answers = list(calls)
    if _fault(draw):
        answers.append(draw(st.sampled_from(["call_gone", *made.calls])))
    if _fault(draw) and answers:
        answers.pop(0)  # a call left unanswered
    for ref in answers:
        items.append({"type": "function_call_output", "call_id": ref,
                      "output": draw(st.sampled_from(["ok", ""]))})
    if not answers or draw(st.booleans()):
        items.append({"role": "user", "content": _words(draw, "user")})
    return items


@st.composite
def bodies(draw: st.DrawFn, turns: int = 4) -> dict[str, Any]:
    """A stateless Responses body with its input."""
    store = draw(st.booleans())
    made = _Made()
    items: list[dict[str, Any]] = [{"role": "user", "content": _words(draw, "user")}]
    for _ in range(turns):
        items += draw(turn(made, store))
    body: dict[str, Any] = {"model": "gpt", "input": items}
    if not store:
        body["store"] = False
    return body


def _untouched(body: dict[str, Any]) -> None:
    items = body["input"]
    repaired, found = repair_input(items, store=body.get("store") is not False)
    assert repaired is items and not found, found
    answerable, found = answerable_input(items)
    assert answerable is items and not found


@settings(max_examples=1500, deadline=None)
@given(bodies())
def test_the_rules_change_nothing_in_a_plain_input(body: dict[str, Any]) -> None:
    if plain_input(body) is not None:
        _untouched(body)


@settings(max_examples=1500, deadline=None)
@given(bodies(turns=3), st.data())
def test_a_turn_checked_over_a_plain_input_is_plain_as_checked_whole(
        body: dict[str, Any], data: st.DataObject) -> None:
    before = plain_input(body)
    if before is None:
        return
    made = _Made()
    made.ids = list(before.ids)
    made.calls = list(before.calls)
    added = data.draw(turn(made, body.get("store") is not False))
    later = {**body, "input": [*body["input"], *added]}
    over = plain_input_after(later, before, len(body["input"]))
    whole = plain_input(later)
    assert over == whole
    if over is not None:
        _untouched(later)


def test_a_codex_session_stays_plain_turn_after_turn() -> None:
    """Codex's shape: nothing stored, encrypted reasoning before each call, the call's
    output, the next ask; a reused call id is not plain."""
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "fix the test"}]}]
    body: dict[str, Any] = {"model": "gpt", "store": False, "input": items}
    state = plain_input(body)
    assert state is not None
    for n in range(5):
        added = [{"type": "reasoning", "id": f"rs_{n}", "summary": [],
                  "encrypted_content": "gAAAA-opaque"},
                 {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                  "name": "shell", "arguments": '{"cmd": ["ls"]}'},
                 {"type": "function_call_output", "call_id": f"call_{n}", "output": "a b"}]
        cut = len(body["input"])
        body = {**body, "input": [*body["input"], *added]}
        state = plain_input_after(body, state, cut)
        assert state is not None and state == plain_input(body)
        _untouched(body)
    reused = {**body, "input": [*body["input"], {
        "type": "function_call", "call_id": "call_0", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_0", "output": "again"}]}
    assert plain_input_after(reused, state, len(body["input"])) is None
    # The same id on a call still waiting for its output: not plain either.
    waiting = {**body, "input": [*body["input"], {
        "type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{}"}]}
    assert plain_input_after(waiting, state, len(body["input"])) is None


_WRONG = st.sampled_from([None, 0, 1.5, True, [], ["x"], {}, {"type": "x"}, "", "text"])


@st.composite
def mistyped(draw: st.DrawFn) -> dict[str, Any]:
    """A body of :func:`bodies` with a field of one item (or of one of its parts) given a
    value of another type, or a key the item's type does not have."""
    body = draw(bodies(turns=2))
    items = body["input"]
    item = items[draw(st.integers(0, len(items) - 1))]
    target = item
    content = item.get("content")
    if isinstance(content, list) and content and draw(st.booleans()):
        target = content[draw(st.integers(0, len(content) - 1))]
    if draw(st.booleans()):
        key = draw(st.sampled_from(sorted(target)))
    else:
        key = draw(st.sampled_from(["name", "call_id", "output", "arguments", "role",
                                    "summary", "text", "extra"]))
    target[key] = draw(_WRONG)
    return body


@settings(max_examples=1500, deadline=None)
@given(mistyped())
def test_a_mistyped_input_called_plain_passes_the_item_checks_it_skips(
        body: dict[str, Any]) -> None:
    # A plain input is sent without the item by item checks: whatever the plain check
    # takes, those checks would take too (so no body they refuse is sent instead); it never
    # fails on what they would refuse, and the read refuses such a body with a 400.
    if plain_input(body) is not None:
        check_responses_items(body)
    else:
        try:
            read_plain_responses(body)
        except ClientError as err:
            assert err.status == 400
