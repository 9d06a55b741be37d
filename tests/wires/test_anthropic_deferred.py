"""A plain Messages history's deferred view gives, before it is built, what the built view
would (how many neutral messages, the context counts, the session fingerprint), a plain
history is clean, and once anything reads the view it is the view read the usual way."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings

from gateway.projection.fastpath import is_clean
from gateway.projection.lazy_messages import copy_messages
from gateway.projection.project import project_strict
from gateway.sessions.hashing import session_fingerprint
from gateway.telemetry.context import count_messages
from gateway.wires.anthropic_deferred import DeferredAnthropicView
from gateway.wires.anthropic_plain import plain_body
from gateway.wires.anthropic_view import parse_messages
from gateway.wires.codecs import anthropic_body
from tests.wires.test_anthropic_plain import bodies


@settings(max_examples=800, deadline=None)
@given(bodies())
def test_what_the_deferred_view_knows_is_what_the_built_view_gives(
        body: dict[str, Any]) -> None:
    if plain_body(body) is None:
        return
    messages = body["messages"]
    sent = copy.deepcopy(messages)
    view = DeferredAnthropicView(messages)
    eager = parse_messages(messages)
    assert len(view.messages) == len(eager.messages)
    assert view.counted == count_messages(eager.messages)
    assert session_fingerprint(view.lead) == session_fingerprint(eager.messages)
    assert is_clean(eager.messages)  # (what the gateway takes of a plain history unread)
    # The projection of a clean history is an unbuilt copy: sent as it came, unbuilt.
    projected = copy_messages(view.messages)
    assert view.unchanged(projected) and not view.is_built
    out, repaired = anthropic_body(body, view, projected)
    assert out["messages"] is messages and not repaired
    # Read, it is the view read the usual way, and rendering a changed history works on it.
    assert list(view.messages) == eager.messages and view.is_built
    assert (view.groups, view.members, view.sources) == (eager.groups, eager.members,
                                                       eager.sources)
    strict = project_strict(list(view.messages)).messages
    assert anthropic_body(body, view, strict) == anthropic_body(
        body, eager, project_strict(eager.messages).messages)
    assert messages == sent  # (nothing reads it by changing it)


def test_a_copy_read_first_builds_the_view_once() -> None:
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"p": 1}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"},
                    {"type": "text", "text": "go on"}]}]
    view = DeferredAnthropicView(messages)
    assert len(view.messages) == 4 and not view.is_built
    copied = copy_messages(view.messages)
    assert [m["role"] for m in copied] == ["user", "assistant", "tool", "user"]
    assert view.is_built and all(a is b for a, b in zip(copied, view.messages, strict=True))
    assert view.unchanged(copied)
    copied.pop()
    assert not view.unchanged(copied)
