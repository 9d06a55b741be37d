"""Prompt-cache helpers (SPEC §6): session id, OpenAI key, Anthropic breakpoints."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.providers.prompt_cache import (
    EPHEMERAL,
    apply_anthropic_breakpoint,
    apply_openai_cache_key,
    prefix_fingerprints,
    session_id_from,
    wire_style,
)
from gateway.redact import register_secrets

TOOL_A = {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}
TOOL_B = {"type": "function", "function": {"name": "b", "parameters": {"type": "object"}}}


def test_session_id_header_wins_then_body_key() -> None:
    body = {"prompt_cache_key": "from-body"}
    assert session_id_from({"x-session-id": "from-header"}, body) == "from-header"
    assert session_id_from({"X-Session-Id": "mixed-case"}, body) == "mixed-case"
    assert session_id_from({}, body) == "from-body"
    assert session_id_from({"x-session-id": "  "}, body) == "from-body"
    assert session_id_from({}, {"prompt_cache_key": ""}) is None
    assert session_id_from({}, {}) is None


def test_openai_key_added_only_when_client_has_none() -> None:
    body = {"model": "m", "messages": []}
    keyed = apply_openai_cache_key(body, "s1")
    assert keyed == {"model": "m", "messages": [], "prompt_cache_key": "s1"}
    assert "prompt_cache_key" not in body
    own = {"messages": [], "prompt_cache_key": "client-key"}
    assert apply_openai_cache_key(own, "s1")["prompt_cache_key"] == "client-key"
    assert apply_openai_cache_key(body, None) == body


def test_a_session_id_that_quotes_a_key_is_not_sent_upstream() -> None:
    # A client that pasted its key into x-session-id: the id still names the session
    # here, but no client key goes upstream as the cache key.
    register_secrets(["client-key-pasted-as-session-0017"])
    body = {"model": "m", "messages": []}
    assert apply_openai_cache_key(body, "client-key-pasted-as-session-0017") is body
    assert apply_openai_cache_key(body, "run-client-key-pasted-as-session-0017-2") is body
    assert apply_openai_cache_key(body, "s1")["prompt_cache_key"] == "s1"


def test_anthropic_breakpoint_on_string_system_and_last_tool() -> None:
    user = {"role": "user", "content": "hi"}
    body = {
        "messages": [{"role": "system", "content": "rules"}, user],
        "tools": [TOOL_A, TOOL_B],
    }
    original = copy.deepcopy(body)
    marked = apply_anthropic_breakpoint(body)
    assert body == original
    assert marked["messages"][0] == {
        "role": "system",
        "content": [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}],
    }
    assert marked["messages"][1] is user
    assert marked["tools"][0] is TOOL_A
    assert marked["tools"][1] == {**TOOL_B, "cache_control": {"type": "ephemeral"}}


def test_anthropic_breakpoint_on_last_part_of_last_system_message() -> None:
    first = {"role": "system", "content": "one"}
    last = {
        "role": "system",
        "content": [{"type": "text", "text": "two"}, {"type": "text", "text": "three"}],
    }
    body = {"messages": [first, last, {"role": "user", "content": "hi"}]}
    marked = apply_anthropic_breakpoint(body)
    assert marked["messages"][0] is first
    assert marked["messages"][1]["content"] == [
        {"type": "text", "text": "two"},
        {"type": "text", "text": "three", "cache_control": EPHEMERAL},
    ]
    assert "tools" not in marked


def test_developer_message_counts_as_system() -> None:
    body = {
        "messages": [{"role": "developer", "content": "rules"}, {"role": "user", "content": "hi"}]
    }
    marked = apply_anthropic_breakpoint(body)
    assert marked["messages"][0]["content"][0]["cache_control"] == EPHEMERAL


def test_client_cache_control_anywhere_is_left_alone() -> None:
    in_message = {
        "messages": [
            {"role": "system", "content": "rules"},
            {
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "x",
                        "cache_control": {"type": "ephemeral", "ttl": "1h"},
                    }
                ],
            },
        ],
        "tools": [TOOL_A],
    }
    in_tool = {
        "messages": [{"role": "system", "content": "rules"}],
        "tools": [{**TOOL_A, "cache_control": {"type": "ephemeral"}}],
    }
    top_level = {
        "messages": [{"role": "system", "content": "rules"}],
        "cache_control": {"type": "ephemeral"},
    }
    for body in (in_message, in_tool, top_level):
        assert apply_anthropic_breakpoint(body) is body


def test_nothing_to_mark_returns_body_unchanged() -> None:
    plain = {"messages": [{"role": "user", "content": "hi"}]}
    empty_system = {
        "messages": [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}]
    }
    assert apply_anthropic_breakpoint(plain) is plain
    assert apply_anthropic_breakpoint(empty_system) is empty_system


def test_fingerprints_follow_system_and_tools_only() -> None:
    base = {
        "messages": [{"role": "system", "content": "rules"}, {"role": "user", "content": "q1"}],
        "tools": [TOOL_A],
    }
    other_turn = {**base, "messages": [base["messages"][0], {"role": "user", "content": "q2"}]}
    other_system = {**base, "messages": [{"role": "system", "content": "other"}]}
    other_tools = {**base, "tools": [TOOL_B]}
    system_hash, tools_hash = prefix_fingerprints(base)
    assert len(system_hash) == len(tools_hash) == 16
    assert prefix_fingerprints(other_turn) == (system_hash, tools_hash)
    assert prefix_fingerprints(other_system)[0] != system_hash
    assert prefix_fingerprints(other_system)[1] == tools_hash
    assert prefix_fingerprints(other_tools) == (system_hash, prefix_fingerprints(other_tools)[1])
    assert prefix_fingerprints(other_tools)[1] != tools_hash
    reordered_keys = {
        "tools": [{"function": TOOL_A["function"], "type": "function"}],
        "messages": base["messages"],
    }
    assert prefix_fingerprints(reordered_keys) == (system_hash, tools_hash)


def test_wire_style() -> None:
    assert wire_style("openai/gpt-4o") == "openai"
    assert wire_style("gpt-4o") == "openai"
    assert wire_style("azure/my-deployment") == "openai"
    assert wire_style("anthropic/claude-sonnet-4-5") == "anthropic"
    assert wire_style("bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0") == "anthropic"
    assert wire_style("vertex_ai/claude-sonnet-4-5") == "anthropic"
    assert wire_style("claude-sonnet-4-5") == "anthropic"
    assert wire_style("gemini/gemini-2.5-flash") == "gemini"
    assert wire_style("vertex_ai/gemini-2.5-pro") == "gemini"
    assert wire_style("cohere/command-r") == "other"
    assert wire_style("bedrock/amazon.nova-pro-v1:0") == "other"


def _strip_added(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_added(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_added(v) for v in value]
    return value


texts = st.text(min_size=0, max_size=8)
content = st.one_of(
    texts, st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=3)
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant"]), "content": content}
)
tool = st.fixed_dictionaries(
    {"type": st.just("function"), "function": st.fixed_dictionaries({"name": texts})}
)
bodies = st.fixed_dictionaries(
    {"messages": st.lists(message, max_size=5)},
    optional={"tools": st.lists(tool, max_size=3), "prompt_cache_key": texts},
)


@settings(max_examples=150, deadline=None)
@given(bodies)
def test_breakpoint_only_adds_cache_control_and_is_idempotent(body: dict[str, Any]) -> None:
    original = copy.deepcopy(body)
    marked = apply_anthropic_breakpoint(body)
    assert body == original
    assert apply_anthropic_breakpoint(marked) is marked
    stripped = _strip_added(marked)
    # A string system prompt may become one text part; otherwise nothing else changes.
    for before, after in zip(original["messages"], stripped["messages"], strict=True):
        if before != after:
            assert before["role"] in ("system", "developer") and isinstance(before["content"], str)
            assert after["content"] == [{"type": "text", "text": before["content"]}]
    assert stripped.get("tools") == original.get("tools")
    assert set(stripped) == set(original)


@settings(max_examples=100, deadline=None)
@given(bodies, st.one_of(st.none(), texts))
def test_openai_key_never_mutates_or_overrides(body: dict[str, Any], sid: str | None) -> None:
    original = copy.deepcopy(body)
    keyed = apply_openai_cache_key(body, sid)
    assert body == original
    if "prompt_cache_key" in original:
        assert keyed["prompt_cache_key"] == original["prompt_cache_key"]
    elif sid is not None:
        assert keyed["prompt_cache_key"] == sid
