"""Hypothesis strategies that mutate valid wire requests: a field's type changed, a field
added where the gateway reads one, a value removed, a value nested to the depth limit.

Every mutation starts from a valid, rich request of the wire (tools, images, tool calls,
thinking, reasoning items...), so the mutated field is read by the code behind it.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import reject
from hypothesis import strategies as st

from gateway.wires.chat_validation import MAX_JSON_DEPTH

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAAB"
       "JRU5ErkJggg==")

CHAT: dict[str, Any] = {
    "model": "local",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}",
                                                "detail": "low"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "read_file", "arguments": "{\"path\": \"a\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "contents"},
        {"role": "user", "content": "go on"},
    ],
    "tools": [{"type": "function", "function": {
        "name": "read_file", "description": "read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
    "tool_choice": {"type": "function", "function": {"name": "read_file"}},
    "max_tokens": 32,
    "stream_options": {"include_usage": True},
    "metadata": {"k": "v"},
}

RESPONSES: dict[str, Any] = {
    "model": "local",
    "instructions": "be brief",
    "input": [
        {"role": "user", "content": "read a"},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "and this"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}",
             "detail": "low"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [
            {"type": "summary_text", "text": "thinking"}], "encrypted_content": "gAAAA"},
        {"type": "function_call", "call_id": "call_1", "name": "read_file",
         "arguments": "{}", "id": "fc_1"},
        {"type": "function_call_output", "call_id": "call_1", "output": "contents"},
        {"type": "message", "role": "assistant", "id": "msg_1", "content": [
            {"type": "output_text", "text": "done", "annotations": []}]},
        {"type": "item_reference", "id": "ref_1"},
        {"role": "user", "content": "thanks"},
    ],
    "tools": [{"type": "function", "name": "read_file", "description": "read a file",
               "parameters": {"type": "object", "properties": {}}, "strict": False},
              {"type": "web_search"}],
    "tool_choice": {"type": "function", "name": "read_file"},
    "parallel_tool_calls": True,
    "text": {"format": {"type": "json_schema", "name": "out", "strict": True,
                        "schema": {"type": "object", "properties": {}}}},
    "reasoning": {"effort": "low"},
    "metadata": {"k": "v"},
    "max_output_tokens": 64,
    "temperature": 0.5,
    "store": False,
}

ANTHROPIC: dict[str, Any] = {
    "model": "local",
    "max_tokens": 32,
    "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": PNG}},
            {"type": "image", "source": {"type": "url", "url": "https://example.invalid/a.png"}},
            {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                            "data": "doc"}}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "reading"},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": False,
             "content": [{"type": "text", "text": "contents"}]},
            {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}}]},
    ],
    "tools": [{"name": "read_file", "description": "read a file",
               "input_schema": {"type": "object", "properties": {}},
               "cache_control": {"type": "ephemeral"}},
              {"type": "web_search_20250305", "name": "web_search"}],
    "tool_choice": {"type": "tool", "name": "read_file", "disable_parallel_tool_use": True},
    "metadata": {"user_id": "u1"},
    "stop_sequences": ["STOP"],
    "temperature": 0.5,
}

# Histories the wires' own repair rules rewrite before the exchange rules run.
RESPONSES_REPAIRABLE: dict[str, Any] = {
    "model": "local",
    "store": False,
    "input": [
        {"role": "user", "content": "read a"},
        {"type": "reasoning", "id": "rs_1"},
        {"type": "function_call", "call_id": "", "name": "read_file", "arguments": "{}",
         "id": "toolu_1"},
        {"type": "function_call_output", "call_id": "", "output": "contents"},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "patch", "input": "x"},
        {"type": "message", "role": "assistant", "content": [
            {"type": "input_text", "text": "done"}]},
        {"type": "item_reference", "id": "msg_0"},
        {"type": "function_call_output", "call_id": "call_gone", "output": "late"},
        {"role": "user", "content": [{"type": "input_text", "text": " "}]},
        {"role": "user", "content": "thanks"},
    ],
    "tools": [{"type": "function", "name": "read_file", "parameters": {"type": "object"}},
              {"type": "custom", "name": "patch"}],
}

ANTHROPIC_REPAIRABLE: dict[str, Any] = {
    "model": "local",
    "max_tokens": 32,
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "", "cache_control": {"type": "ephemeral"}},
            {"type": "thinking", "thinking": "unsigned"},
            {"type": "tool_use", "id": "toolu odd/1", "name": "undeclared", "input": {}}]},
        {"role": "user", "content": [
            {"type": "text", "text": "never mind"},
            {"type": "tool_result", "tool_use_id": "toolu_gone", "content": "late"}]},
        {"role": "assistant", "content": "prefill  "},
    ],
}

# Plain histories (``wires/anthropic_plain.py``, ``wires/responses_plain.py``): the wires'
# rules are skipped for them, so a mutation of one is read by the plain checks first.
ANTHROPIC_PLAIN: dict[str, Any] = {
    "model": "local",
    "max_tokens": 32,
    "system": [{"type": "text", "text": "be brief",
                "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "read a"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "reading"},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"p": "a"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": False,
             "content": [{"type": "text", "text": "contents"}]},
            {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": "done"},
        {"role": "user", "content": "thanks"},
    ],
    "tools": [{"name": "read_file", "input_schema": {"type": "object", "properties": {}}}],
}

# (RESPONSES' items without the image part and the item reference)
RESPONSES_PLAIN: dict[str, Any] = {
    "model": "local",
    "store": False,
    "input": [RESPONSES["input"][0], *RESPONSES["input"][2:6], RESPONSES["input"][-1]],
    "tools": RESPONSES["tools"][:1],
}

SEEDS = {"chat": CHAT, "responses": RESPONSES, "anthropic": ANTHROPIC}
ALL_SEEDS = {"chat": (CHAT,), "responses": (RESPONSES, RESPONSES_REPAIRABLE, RESPONSES_PLAIN),
             "anthropic": (ANTHROPIC, ANTHROPIC_REPAIRABLE, ANTHROPIC_PLAIN)}

# Field names some part of the gateway reads (grep of the readers), added where they are not.
FIELDS = ("type", "content", "role", "tool_calls", "text", "name", "id", "messages", "model",
          "function", "arguments", "tools", "stream", "input", "image_url", "url",
          "tool_choice", "refusal", "metadata", "call_id", "tool_use_id", "strict",
          "prompt_cache_key", "parallel_tool_calls", "detail", "description", "source",
          "system", "instructions", "output", "max_tokens", "max_output_tokens", "is_error",
          "input_schema", "parameters", "format", "disable_parallel_tool_use", "user_id",
          "cache_control", "summary", "signature", "thinking", "data", "media_type",
          "stream_options", "include_usage", "previous_response_id", "reasoning",
          "encrypted_content", "stop_sequences", "user", "tool_call_id", "response_format",
          "fallbacks", "n", "stop", "temperature", "session", "store", "truncation")

_TEXTS = st.sampled_from(["", "x", "user", "assistant", "system", "tool", "developer",
                          "text", "image", "tool_use", "tool_result", "function_call",
                          "function_call_output", "message", "input_text", "image_url",
                          "base64", "url", "function", "auto", "any", "none", "required",
                          "json_schema", "thinking", "call_1", "toolu_1", "\x00", "é" * 3])
_SCALARS = (st.none() | st.booleans() | st.integers(-2, 2**64) | st.floats(allow_nan=False)
            | _TEXTS | st.text(max_size=8))
JSON = st.recursive(
    _SCALARS,
    lambda inner: (st.lists(inner, max_size=3)
                   | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=4), inner,
                                     max_size=3)),
    max_leaves=8,
)

Path = tuple[str | int, ...]


def paths(value: Any, prefix: Path = ()) -> list[Path]:
    """Every path to a value inside ``value`` (the root excluded)."""
    out: list[Path] = []
    items: Any = (value.items() if isinstance(value, dict)
                  else enumerate(value) if isinstance(value, list) else ())
    for key, child in items:
        here = (*prefix, key)
        out.append(here)
        out.extend(paths(child, here))
    return out


def containers(value: Any, prefix: Path = ()) -> list[Path]:
    """The paths of every object inside ``value``, the root included."""
    out: list[Path] = [prefix] if isinstance(value, dict) else []
    items: Any = (value.items() if isinstance(value, dict)
                  else enumerate(value) if isinstance(value, list) else ())
    for key, child in items:
        out.extend(containers(child, (*prefix, key)))
    return out


def _at(body: Any, path: Path) -> Any:
    for key in path:
        body = body[key]
    return body


def nested(levels: int, leaf: Any, *, as_object: bool) -> Any:
    """``leaf`` inside ``levels`` arrays (or objects)."""
    for _ in range(levels):
        leaf = {"a": leaf} if as_object else [leaf]
    return leaf


@st.composite
def mutate(draw: st.DrawFn, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with one to three mutations (a deep copy: the seed is never changed)."""
    body = copy.deepcopy(body)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(("replace", "replace", "add", "delete", "deepen", "wrap")))
        if op == "add":
            where = draw(st.sampled_from(containers(body)))
            _at(body, where)[draw(st.sampled_from(FIELDS))] = draw(JSON)
            continue
        found = paths(body)
        if not found:
            continue
        path = draw(st.sampled_from(found))
        parent = _at(body, path[:-1])
        key = path[-1]
        if op == "replace":
            parent[key] = draw(JSON)
        elif op == "delete":
            del parent[key]
        elif op == "wrap":
            parent[key] = draw(st.sampled_from(([parent[key]], {"type": parent[key]},
                                                {"a": parent[key]})))
        else:
            # The whole body at the parse limit exactly (the body is level 1): accepted by
            # the edge, so every echo or copy of it must still be writable.
            levels = MAX_JSON_DEPTH - len(path) - draw(st.integers(0, 1))
            parent[key] = nested(levels - 1, draw(st.sampled_from(([], {}, "x"))),
                                 as_object=draw(st.booleans()))
    try:
        orjson.dumps(body)
    except orjson.JSONEncodeError:  # past the limit (tests/server/test_parse_depth.py)
        reject()
    return body
