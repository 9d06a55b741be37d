"""A plain Responses input's deferred view gives, before it is built, what the built view
would (how many neutral messages, the context counts, the session fingerprint, whether the
projection changes it), and once anything reads the view it is the view read the usual
way."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.projection.fastpath import is_clean
from gateway.projection.lazy_messages import copy_messages
from gateway.projection.project import project_strict
from gateway.sessions.hashing import session_fingerprint
from gateway.telemetry.context import count_messages
from gateway.wires.codecs import responses_body
from gateway.wires.responses_deferred import DeferredResponsesView
from gateway.wires.responses_plain import plain_input
from gateway.wires.responses_view import parse_input
from tests.wires.test_responses_plain import bodies


@st.composite
def inputs(draw: st.DrawFn) -> dict[str, Any]:
    """A body of :func:`bodies` with what agents add: system and developer messages
    (before the first ask or later), outputs in another order than their calls or after
    other items, typed and untyped messages."""
    body = draw(bodies())
    items = body["input"]
    for _ in range(draw(st.integers(0, 2))):
        role = draw(st.sampled_from(["system", "developer"]))
        content = draw(st.sampled_from(["be brief", [{"type": "input_text", "text": "ok"}]]))
        item: dict[str, Any] = {"role": role, "content": content}
        if draw(st.booleans()):
            item["type"] = "message"
        items.insert(draw(st.integers(0, len(items))), item)
    outputs = [i for i, item in enumerate(items) if item.get("type") == "function_call_output"]
    if outputs and draw(st.booleans()):
        a, b = draw(st.sampled_from(outputs)), draw(st.sampled_from(outputs))
        items[a], items[b] = items[b], items[a]
    if outputs and draw(st.booleans()):
        moved = items.pop(draw(st.sampled_from(outputs)))
        items.insert(draw(st.integers(0, len(items))), moved)
    return body


@settings(max_examples=1500, deadline=None)
@given(inputs())
def test_what_the_deferred_view_knows_is_what_the_built_view_gives(
        body: dict[str, Any]) -> None:
    if plain_input(body) is None:
        return
    items = body["input"]
    sent = copy.deepcopy(items)
    view = DeferredResponsesView(items)
    eager = parse_input(items)
    assert len(view.messages) == len(eager.messages)
    assert view.counted == count_messages(eager.messages)
    assert session_fingerprint(view.lead) == session_fingerprint(eager.messages)
    assert view.clean == is_clean(eager.messages)
    assert not view.is_built
    if view.clean:  # the projection of a clean history: an unbuilt copy, sent as it came
        projected = copy_messages(view.messages)
        assert view.unchanged(projected) and not view.is_built
        out, repaired = responses_body(body, view, projected)
        assert out["input"] is items and not repaired
    # Read, it is the view read the usual way, and rendering a changed input works on it.
    assert list(view.messages) == eager.messages and view.is_built
    assert view.sources == eager.sources
    assert responses_body(body, view, project_strict(list(view.messages)).messages) == \
        responses_body(body, eager, project_strict(eager.messages).messages)
    assert items == sent


def test_a_call_answered_after_the_next_ask_is_not_clean() -> None:
    items = [{"role": "user", "content": "go"},
             {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{}"},
             {"role": "user", "content": "and?"},
             {"type": "function_call_output", "call_id": "call_1", "output": "text"},
             {"role": "user", "content": "so"}]
    assert plain_input({"input": items}) is not None
    view = DeferredResponsesView(items)
    assert not view.clean and not is_clean(parse_input(items).messages)
    assert len(view.messages) == 5
