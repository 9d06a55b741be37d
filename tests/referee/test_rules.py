"""The referee's wire rules, checked directly (no server)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.referee.rules import RULE_SETS, anthropic_layout, check, find_problem
from tests.referee.support import (
    assistant,
    call,
    chat,
    data_url,
    image_bytes,
    image_part,
    tool,
    user,
)

VALID: dict[str, dict[str, Any]] = {
    "plain": chat({"role": "system", "content": "be brief"}, user(), assistant(), user("more")),
    "parallel tool calls answered out of order": chat(
        user(),
        assistant(None, "call_a", "call_b", "call_c"),
        tool("call_c"),
        tool("call_a"),
        tool("call_b"),
        assistant("done"),
        user("thanks"),
    ),
    "tool exchange then user interjects": chat(
        user(), assistant("let me look", "call_a"), tool("call_a"), user("stop"), assistant("ok")
    ),
    "history ends on tool results": chat(user(), assistant(None, "call_a"), tool("call_a")),
    "images, names and unknown fields": chat(
        {"role": "developer", "content": "dev notes", "x_custom": {"a": 1}},
        {
            "role": "user",
            "name": "alice",
            "content": [
                {"type": "text", "text": "what is this?"},
                image_part(data_url(image_bytes())),
                image_part("https://example.com/cat.png"),
            ],
            "cache_control": {"type": "ephemeral"},
        },
        {"role": "assistant", "content": [{"type": "text", "text": "a red square"}], "x": 1},
        {"role": "user", "content": [{"type": "text", "text": "ok"}]},
        temperature=0.2,
        metadata={"session": "s1"},
    ),
    "tool content as text parts": chat(
        user(),
        assistant(None, "call_a"),
        {"role": "tool", "tool_call_id": "call_a", "content": [{"type": "text", "text": "ok"}]},
    ),
    "assistant refusal part": chat(
        user(), {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}, user()
    ),
}


@pytest.mark.parametrize("rules", RULE_SETS)
@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_histories_are_accepted(rules: Any, name: str) -> None:
    assert check(VALID[name], rules) is None


# (name, body, situation under openai rules or None if accepted, situation under strict)
CASES: list[tuple[str, dict[str, Any], str | None, str]] = [
    ("orphan result", chat(user(), tool("call_x"), assistant()), "a", "a"),
    ("result after a user message", chat(
        user(), assistant(None, "c1"), tool("c1"), user(), tool("c1")), "a", "a"),
    ("missing result", chat(user(), assistant(None, "c1", "c2"), tool("c1"), user()), "b", "b"),
    ("missing result at the end", chat(user(), assistant(None, "c1")), "b", "b"),
    ("result separated by a system message", chat(
        user(), assistant(None, "c1"), {"role": "system", "content": "s"}, tool("c1")), "c", "c"),
    ("result separated by a user message", chat(
        user(), assistant(None, "c1"), user("wait"), tool("c1")), "c", "c"),
    ("duplicate result", chat(user(), assistant(None, "c1"), tool("c1"), tool("c1")), None, "g"),
    ("duplicate call id in one message", chat(
        user(), assistant(None, "c1", "c1"), tool("c1")), None, "g"),
    ("call id reused later", chat(
        user(), assistant(None, "c1"), tool("c1"), assistant(None, "c1"), tool("c1")), None, "g"),
    ("empty user text", chat(user(""), assistant()), None, "d"),
    ("whitespace user text", chat(user("  \n"), assistant()), None, "d"),
    ("empty text part", chat({"role": "user", "content": [{"type": "text", "text": ""}]}),
     None, "d"),
    ("empty tool content", chat(user(), assistant(None, "c1"), tool("c1", "")), None, "d"),
    ("assistant empty text with calls", chat(user(), assistant("", "c1"), tool("c1")), None, "d"),
    ("assistant with nothing", chat(user(), assistant(None), user()), None, "d"),
    ("user null content", chat({"role": "user", "content": None}), "d", "d"),
    ("empty content array", chat({"role": "user", "content": []}), "d", "d"),
    ("two users in a row", chat(user(), user("again")), None, "e"),
    ("two assistants in a row", chat(user(), assistant(), assistant("more")), None, "e"),
    ("starts with assistant", chat({"role": "system", "content": "s"}, assistant(), user()),
     None, "f"),
    ("starts mid-exchange", chat(assistant(None, "c1"), tool("c1"), user()), None, "f"),
    ("only system", chat({"role": "system", "content": "s"}), None, "f"),
    ("unknown role", chat({"role": "bot", "content": "x"}), "shape", "shape"),
    ("content not text", chat({"role": "user", "content": 42}), "shape", "shape"),
    ("image in a tool message", chat(
        user(), assistant(None, "c1"),
        {"role": "tool", "tool_call_id": "c1", "content": [image_part("https://x/y.png")]}),
     "shape", "shape"),
    ("tool without tool_call_id", chat(user(), {"role": "tool", "content": "x"}), "shape", "shape"),
    ("call without function name", chat(user(), {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"arguments": "{}"}}]}), "shape", "shape"),
    ("empty tool_calls", chat(user(), {"role": "assistant", "content": "x", "tool_calls": []}),
     "shape", "shape"),
    ("no messages", chat(), "shape", "shape"),
    ("no model", {"messages": [user()]}, "shape", "shape"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "body", "openai", "strict"), CASES, ids=[c[0] for c in CASES])
def test_violations_have_the_right_situation(
    name: str, body: dict[str, Any], openai: str | None, strict: str
) -> None:
    found = find_problem(body, "openai")
    assert (found.situation if found else None) == openai
    strict_found = find_problem(body, "strict")
    assert strict_found is not None
    assert strict_found.situation == strict


def test_openai_pairing_errors_name_the_message_that_broke_the_rule() -> None:
    body = chat(user(), assistant(None, "call_1", "call_2"), tool("call_2"), user("next"))
    violation = check(body, "openai")
    assert violation is not None
    assert violation.status == 400
    assert violation.message.endswith("did not have response messages: call_1")
    assert b'"param": "messages.[3].role"' in violation.body

    trailing = check(chat(user(), assistant(None, "call_1", "call_2")), "openai")
    assert trailing is not None
    assert trailing.message.endswith("response messages: call_1, call_2")
    assert b'"param": "messages"' in trailing.body


def test_anthropic_positions_skip_system_and_merge_tool_runs() -> None:
    messages = [
        {"role": "system", "content": "s"},
        user(),
        assistant(None, "a", "b"),
        tool("a"),
        tool("b"),
        user(),
    ]
    assert anthropic_layout(messages) == [(0, 0), (0, 0), (1, 0), (2, 0), (2, 1), (3, 0)]
    body = chat(*messages[:4], tool("zzz"), user())
    violation = check(body, "strict", "anthropic")
    assert violation is not None
    assert violation.message.startswith("messages.2.content.1: unexpected `tool_use_id`")
    assert "blocks: zzz." in violation.message


def test_strict_only_problems_reach_openai_style_in_openai_envelope() -> None:
    violation = check(chat(user(), user()), "strict", "openai")
    assert violation is not None
    assert violation.body.startswith(b'{\n  "error": {\n    "message": "messages: roles must')
    assert violation.situation == "e"


def test_shape_errors_use_openai_wording() -> None:
    violation = check(chat({"role": "bot", "content": "x"}), "openai")
    assert violation is not None
    assert violation.message == (
        "Invalid value: 'bot'. Supported values are: 'system', 'assistant', 'user', "
        "'function', 'tool', and 'developer'."
    )
    assert b'"code": "invalid_value"' in violation.body


_text = st.text(alphabet="abc xyz", min_size=1, max_size=12).filter(lambda s: s.strip() != "")


@st.composite
def _well_formed(draw: st.DrawFn) -> dict[str, Any]:
    """Alternating turns where every call is answered right away by one result."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": draw(_text)}]
    counter = 0
    for _ in range(draw(st.integers(1, 6))):
        messages.append(user(draw(_text)))
        for _ in range(draw(st.integers(0, 2))):
            ids = [f"call_{counter + n}" for n in range(draw(st.integers(1, 3)))]
            counter += len(ids)
            messages.append(
                {"role": "assistant", "content": None, "tool_calls": [call(i) for i in ids]}
            )
            order = draw(st.permutations(ids))
            messages.extend(tool(i, draw(_text)) for i in order)
        messages.append(assistant(draw(_text)))
    return chat(*messages)


@settings(max_examples=100, deadline=None)
@given(_well_formed())
def test_well_formed_histories_pass_both_rule_sets(body: dict[str, Any]) -> None:
    assert check(body, "strict") is None
    assert check(body, "openai") is None


@settings(max_examples=100, deadline=None)
@given(_well_formed(), st.data())
def test_dropping_any_tool_result_is_refused(body: dict[str, Any], data: st.DataObject) -> None:
    tool_positions = [i for i, m in enumerate(body["messages"]) if m["role"] == "tool"]
    if not tool_positions:
        return
    drop = data.draw(st.sampled_from(tool_positions))
    broken = chat(*[m for i, m in enumerate(body["messages"]) if i != drop])
    for rules in RULE_SETS:
        violation = check(broken, rules)
        assert violation is not None
        assert violation.situation == "b"
        assert body["messages"][drop]["tool_call_id"] in violation.message
