"""The wire views (pure): the same projection rules, each wire's history written back."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.projection import SYNTHETIC_TOOL_RESULT_TEXT, project, project_strict
from gateway.wires.anthropic_view import parse_messages, render_messages
from gateway.wires.responses_view import parse_input, render_input


def use(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "ls", "input": {"path": "."}}


def result(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "a.txt"}


SIGNED = {"type": "thinking", "thinking": "list first", "signature": "EqQBCkYIBxgCKkA"}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4"}


def test_valid_anthropic_history_is_returned_as_it_came() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "ls",
                                      "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [SIGNED, REDACTED, use("t1")]},
        {"role": "user", "content": [{**result("t1"), "is_error": True},
                                     {"type": "text", "text": "and?"}]},
        {"role": "user", "content": "consecutive user turns are valid here"},
        {"role": "assistant", "content": "prefill"},
    ]
    view = parse_messages(messages)
    projection = project(view.messages)
    assert not projection.repaired
    assert render_messages(view, projection.messages) is messages


def test_anthropic_strict_merge_keeps_thinking_blocks_and_their_order() -> None:
    messages = [
        {"role": "user", "content": "ls"},
        {"role": "assistant", "content": [SIGNED, {"type": "text", "text": "let me see"}]},
        {"role": "assistant", "content": [REDACTED, use("t1")]},
        {"role": "user", "content": [result("t1")]},
    ]
    view = parse_messages(messages)
    projection = project_strict(view.messages)
    assert projection.counts() == {"assistant_messages_merged": 1}
    out = render_messages(view, projection.messages)
    assert out[1]["content"] == [SIGNED, messages[1]["content"][1], REDACTED, use("t1")]
    assert out[1]["content"][0] is SIGNED
    assert out[2] is messages[3]


def test_anthropic_results_moved_to_the_start_of_the_next_turn() -> None:
    messages = [
        {"role": "user", "content": "ls twice"},
        {"role": "assistant", "content": [use("t1"), use("t2")]},
        {"role": "user", "content": [{"type": "text", "text": "done"}, result("t2"),
                                     result("t1")]},
    ]
    view = parse_messages(messages)
    projection = project(view.messages)
    assert list(projection.counts()) == ["tool_result_reordered"]
    out = render_messages(view, projection.messages)
    assert [b.get("tool_use_id", b.get("text")) for b in out[2]["content"]] == [
        "t1", "t2", "done"]
    assert project(parse_messages(out).messages).repaired is False  # idempotent


def test_anthropic_missing_result_is_a_tool_result_block() -> None:
    messages = [{"role": "user", "content": "ls"},
                {"role": "assistant", "content": [use("t1")]}]
    view = parse_messages(messages)
    out = render_messages(view, project(view.messages).messages)
    assert out[-1] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": SYNTHETIC_TOOL_RESULT_TEXT}]}


def test_valid_responses_input_is_returned_as_it_came() -> None:
    items = [
        {"type": "message", "role": "developer", "content": "rules"},
        {"role": "user", "content": [{"type": "input_text", "text": "ls"},
                                     {"type": "input_image", "image_url": "https://x/y.png"}]},
        {"role": "user", "content": "two user items in a row are valid"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "ls",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
        {"type": "item_reference", "id": "msg_9"},
    ]
    view = parse_input(items)
    projection = project(view.messages)
    assert not projection.repaired
    assert render_input(view, projection.messages, items) is items


def test_responses_blank_text_part_is_dropped_in_wire_terms() -> None:
    items = [{"role": "user", "content": [{"type": "input_text", "text": "hi"},
                                          {"type": "input_text", "text": "  "}]}]
    view = parse_input(items)
    projection = project(view.messages)
    assert projection.counts() == {"empty_content_dropped": 1}
    out = render_input(view, projection.messages, items)
    assert out == [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    assert out[0]["content"][0] is items[0]["content"][0]


def test_responses_strict_leading_assistant_and_duplicate_calls() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"}
    items: list[Any] = [
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "earlier"}]},
        {"role": "user", "content": "ls"},
        call, {"type": "function_call_output", "call_id": "c1", "output": "a"},
        dict(call), {"type": "function_call_output", "call_id": "c1", "output": "b"},
    ]
    view = parse_input(items)
    projection = project_strict(view.messages)
    counts = projection.counts()
    assert counts["leading_non_user_dropped"] == 1
    assert counts["duplicate_tool_call_deduped"] == 1
    out = render_input(view, projection.messages, items)
    assert out[0] == items[1]
    kinds = [i.get("type") for i in out[1:]]
    assert kinds == ["function_call", "function_call_output"]
    assert orjson.dumps(out[1]) == orjson.dumps(call)


def test_late_stream_failure_in_each_wire_shape() -> None:
    from gateway.wires.relaying import NativeRelay

    late = b'data: {"error":{"message":"connection reset","type":"api_error","code":"502"}}\n\n'
    anthropic_event = NativeRelay(anthropic=True).feed(late)
    assert len(anthropic_event) == 1 and anthropic_event[0].startswith(b"event: error\ndata: ")
    assert orjson.loads(anthropic_event[0].split(b"data: ", 1)[1])["error"] == {
        "type": "api_error", "message": "connection reset"}
    error, failed = NativeRelay(anthropic=False).feed(late)
    responses_event = orjson.loads(error.split(b"data: ")[1])
    assert responses_event["type"] == "error" and responses_event["message"] == "connection reset"
    assert orjson.loads(failed.split(b"data: ")[1])["response"]["status"] == "failed"
    ordinary = b'event: content_block_stop\ndata: {"type":"content_block_stop"}\n\n'
    assert NativeRelay(anthropic=True).feed(ordinary) == [ordinary]
