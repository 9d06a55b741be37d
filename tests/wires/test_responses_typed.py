"""A new Responses body read typed is plain exactly when its input is plain read the
general way, with the same state for its later turns and what the deferred view would
give; its items, parsed when read, are the client's."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.sessions.hashing import session_fingerprint
from gateway.wires.responses_deferred import DeferredResponsesView
from gateway.wires.responses_plain import plain_input
from gateway.wires.responses_typed import read_plain_input_typed
from tests.wires.test_responses_deferred import inputs

# What plain items never hold, put on an item now and then: the typed read must refuse each
# as the general way finds it not plain (or take it as the general way does).
_ODD: list[tuple[str, Any]] = [
    ("call_id", "call_x"), ("role", "user"), ("content", "x"), ("output", "x"),
    ("name", "read"), ("arguments", "{}"), ("summary", []), ("encrypted_content", None),
    ("status", "completed"), ("status", {"odd": [1]}), ("id", None), ("id", ""),
    ("id", "msg_dup"), ("type", None), ("type", "item_reference"), ("extra", 1)]


@st.composite
def odd_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body = draw(inputs())
    items = body["input"]
    for _ in range(max(0, draw(st.integers(-4, 2)))):  # (most bodies left as drawn)
        key, value = draw(st.sampled_from(_ODD))
        items[draw(st.integers(0, len(items) - 1))][key] = value
    if draw(st.integers(0, 9)) == 0:
        body[draw(st.sampled_from(["previous_response_id", "conversation"]))] = "resp_1"
    if draw(st.integers(0, 9)) == 0:
        items[:] = [i for i in items if i.get("type") not in (None, "message")]
    return body


@settings(max_examples=2000, deadline=None)
@given(odd_bodies(), st.booleans())
def test_read_typed_is_plain_exactly_when_plain_read_whole(body: dict[str, Any],
                                                           spaced: bool) -> None:
    raw = json.dumps(body, indent=1, ensure_ascii=False).encode() if spaced \
        else orjson.dumps(body)
    parsed = orjson.loads(raw)
    items = parsed["input"]
    whole = plain_input(parsed) if items and any(
        i.get("type") in (None, "message") for i in items) else None
    typed = read_plain_input_typed(raw)
    assert (typed is None) == (whole is None)
    if typed is None:
        return
    assert typed.plain == whole
    assert not typed.items.parsed
    view = DeferredResponsesView(items)
    assert (typed.neutral, typed.counted, typed.clean) == (len(view.messages), view.counted,
                                                          view.clean)
    assert session_fingerprint(typed.lead) == session_fingerprint(view.lead)
    last = items[-1]
    assert typed.extensible == (last.get("type") == "function_call_output" or (
        last.get("type") in (None, "message")
        and last.get("role") in ("user", "system", "developer")))
    assert {k: v for k, v in typed.body.items() if k != "input"} == \
        {k: v for k, v in parsed.items() if k != "input"}
    assert typed.items == items
