"""Projecting a history over the projection of its earlier turn gives what projecting it
whole gives: the same messages (the very same objects), the same anomalies in the same order."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.projection.anomalies import Projection
from gateway.projection.incremental import TurnLayouts, extend_layout, project_layout
from gateway.projection.project import run_pipeline
from tests.factories import assistant, calls, system, tool, tool_call, user
from tests.projection.test_equivalence import _histories

PROPERTY = settings(max_examples=400, deadline=None)
_BASES = st.sampled_from(["valid", "broken", "odd"])


def _same(got: Projection, want: Projection, history: list[Any]) -> None:
    """Equal, and an input message where the whole projection kept one (made ones: new)."""
    assert got.anomalies == want.anomalies
    assert got.messages == want.messages
    inputs = {id(m) for m in history}
    for new, old in zip(got.messages, want.messages, strict=True):
        assert (new is old) if id(old) in inputs else id(new) not in inputs


@PROPERTY
@given(data=st.data(), base=_BASES)
def test_turn_by_turn_equals_whole(data: st.DataObject, base: str) -> None:
    history: list[Any] = data.draw(_histories(base))
    history = history + data.draw(_histories(data.draw(_BASES)))  # a later, other part
    snapshot = copy.deepcopy(history)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(history)), min_size=1, max_size=4)))
    turns = TurnLayouts()
    given: list[Any] | None = None  # the list the previous turn was given
    for cut in [*cuts, len(history)]:
        turn = history[:cut]
        projection = turns.project(turn)
        _same(projection, run_pipeline(turn, strict=False), turn)
        prior = turns.extends(projection.messages)
        if prior is not None:  # laid over the previous turn: its very list, then more
            n = len(prior)
            assert prior is given and n == len(prior) <= len(projection.messages)
            assert all(a is b for a, b in zip(prior, projection.messages[:n], strict=True))
        assert turns.extends(list(projection.messages)) is None  # only the list it returned
        given = projection.messages
        assert turns.current is not None and turns.current.count == len(turn)
        try:
            whole = orjson.dumps(projection.messages)
        except orjson.JSONEncodeError:  # (an integer orjson cannot write: nor can the layout)
            assert turns.json_of(projection.messages) is None
        else:
            pieces = turns.json_of(projection.messages)
            assert pieces is not None and b"".join(pieces) == whole  # extended, not redone
        assert turns.json_of(list(projection.messages)) is None  # only the list it returned
        turns = TurnLayouts(turns.current)
    assert history == snapshot  # nothing was mutated


def test_a_break_carried_by_every_turn_is_projected_once() -> None:
    first = [system("s"), user("go"), calls("call_1"), user("never mind")]  # call_1 unanswered
    projection, layout = project_layout(first)
    assert [a.trailing for a in projection.anomalies] == [False]
    second = [*first, assistant("ok", tool_calls=[tool_call("call_2")]), tool("call_2", "x")]
    extended = extend_layout(layout, second)
    assert extended is not None
    _same(extended[0], run_pipeline(second, strict=False), second)


def test_a_trailing_call_stops_trailing_once_messages_follow() -> None:
    first = [system("s"), user("go"), calls("call_1", "call_2"), tool("call_2", "y")]
    projection, layout = project_layout(first)
    assert any(a.trailing for a in projection.anomalies)
    second = [*first, user("and then?")]
    extended = extend_layout(layout, second)
    assert extended is not None
    assert not any(a.trailing for a in extended[0].anomalies)
    _same(extended[0], run_pipeline(second, strict=False), second)


def test_a_result_for_an_earlier_call_needs_the_whole_history() -> None:
    first = [system("s"), user("go"), calls("call_1"), user("hurry")]
    _, layout = project_layout(first)
    assert extend_layout(layout, [*first, tool("call_1", "late")]) is None
    odd = [*first, {"role": "tool", "tool_call_id": ["call_1"], "content": "x"}]
    extended = extend_layout(layout, odd)  # an unhashable id is an orphan, not an error
    assert extended is not None
    _same(extended[0], run_pipeline(odd, strict=False), odd)
