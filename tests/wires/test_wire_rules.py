"""The wire rules as pure functions: never mutate their input, change nothing valid, and are
idempotent (the body a repair sends needs no repair again), over the situation bodies and
over random item lists and message lists."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.projection import project
from gateway.projection.exchanges import SYNTHETIC_TOOL_RESULT_TEXT
from gateway.wires.anthropic_rules import finish_request, repair_request, strict_request
from gateway.wires.codecs import anthropic_body, responses_body
from gateway.wires.reading import read_messages, read_responses
from gateway.wires.responses_rules import (
    answerable_input,
    paired_continuation,
    repair_input,
    strict_continuation,
    strict_input,
)
from tests.wires.test_wire_situations import CLAUDE, GPT, MESSAGES, RESPONSES


def _messages_round(body: dict[str, Any], refusal: str | None = None) -> tuple[dict[str, Any],
                                                                                set[str]]:
    """One trip through the gateway's Messages path: read, project, render, finish."""
    repaired, view = read_messages(body)
    projection = project(view.messages)
    sent, finished = anthropic_body(repaired, view, projection.messages, refusal)
    kinds = {a.kind for a in (*view.anomalies, *projection.anomalies, *finished)}
    return sent, kinds


def _responses_round(body: dict[str, Any], refusal: str | None = None) -> tuple[dict[str, Any],
                                                                                 set[str]]:
    repaired, view = read_responses(body)
    projection = project(view.messages)
    sent, strict = responses_body(repaired, view, projection.messages, refusal)
    kinds = {a.kind for a in (*view.anomalies, *projection.anomalies, *strict)}
    return sent, kinds


def test_situations_are_repaired_once_and_never_mutated() -> None:
    for name, case in MESSAGES.items():
        body = {"model": CLAUDE, "max_tokens": 64, **case.broken}
        before = copy.deepcopy(body)
        refusal = case.refusal if case.strict else None
        sent, kinds = _messages_round(body, refusal)
        assert body == before, name
        assert set(case.repairs) <= kinds or case.strict, name
        again, more = _messages_round(sent)
        assert more == set() and again == sent, name
    for name, case in RESPONSES.items():
        body = {"model": GPT, **case.broken}
        before = copy.deepcopy(body)
        sent, kinds = _responses_round(body, case.refusal if case.strict else None)
        assert body == before, name
        assert set(case.repairs) <= kinds, name
        again, more = _responses_round(sent)
        assert more == set() and again == sent, name


def test_valid_neighbours_come_back_as_the_same_objects() -> None:
    for case in MESSAGES.values():
        if case.valid is not None:
            body = {"model": CLAUDE, "max_tokens": 64, **case.valid}
            repaired, view = read_messages(body)
            assert repaired is body and not view.anomalies
            finished, anomalies = finish_request(body)
            assert finished is body and anomalies == ()
    for case in RESPONSES.values():
        if case.valid is not None:
            body = {"model": GPT, **case.valid}
            repaired, view = read_responses(body)
            assert repaired is body and not view.anomalies


def test_strict_rules_act_only_on_what_the_refusal_names() -> None:
    signed = {"type": "thinking", "thinking": "t", "signature": "sig"}
    body = {"messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": [signed,
                                                           {"type": "text", "text": "ok"}]}]}
    unrelated, anomalies = strict_request(body, "messages: text content blocks must be non-empty")
    assert unrelated is body and anomalies == ()
    dropped, anomalies = strict_request(body, "Invalid `signature` in `thinking` block")
    assert dropped["messages"][1]["content"] == [{"type": "text", "text": "ok"}]
    assert [a.kind for a in anomalies] == ["thinking_block_dropped"]
    prefill, anomalies = strict_request(body, "This model does not support assistant "
                                              "message prefill.")
    assert len(prefill["messages"]) == 1 and [a.kind for a in anomalies] == ["prefill_dropped"]


def test_strict_input_keeps_verifiable_reasoning_unless_reasoning_is_refused() -> None:
    items = [{"role": "user", "content": "x"},
             {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"},
             {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f",
              "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c", "output": "o"}]
    kept, anomalies = strict_input(items, "Item with id 'msg_9' not found.")
    assert kept[1] == items[1] and "id" not in kept[2]
    assert [a.kind for a in anomalies] == ["item_id_removed"]
    dropped, anomalies = strict_input(items, "Item 'fc_1' of type 'function_call' was provided "
                                             "without its required 'reasoning' item: 'rs_1'.")
    assert [i.get("type") for i in dropped] == [None, "function_call", "function_call_output"]


def test_a_computer_call_nothing_valid_answers_goes_with_its_output_and_reasoning() -> None:
    # The API takes only a screenshot as a computer call's output; a text output (the
    # client's error, or the exchange rules' "not available") cannot be sent.
    screenshot = {"type": "computer_screenshot", "image_url": "data:image/png;base64,AA"}
    items = [{"role": "user", "content": "click"},
             {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"},
             {"type": "computer_call", "id": "cu_1", "call_id": "c1", "action": {}},
             {"type": "computer_call_output", "call_id": "c1", "output": "click failed"},
             {"role": "user", "content": "again"},
             {"type": "computer_call", "id": "cu_2", "call_id": "c2", "action": {}},
             {"type": "computer_call_output", "call_id": "c2", "output": screenshot}]
    kept, anomalies = answerable_input(items)
    assert kept == [items[0], *items[4:]]
    assert [a.kind for a in anomalies] == ["computer_call_dropped", "reasoning_item_dropped"]
    assert answerable_input(kept) == (kept, ())
    valid = [items[0], items[1], *items[5:]]
    assert answerable_input(valid)[0] is valid


def test_a_continuation_refused_for_a_call_or_an_output_is_paired_again() -> None:
    said = [{"role": "user", "content": "never mind"}]
    fixed, anomalies = strict_continuation(
        said, "No tool output found for custom tool call call_7.")
    assert fixed[0] == {"type": "custom_tool_call_output", "call_id": "call_7",
                        "output": SYNTHETIC_TOOL_RESULT_TEXT}
    assert fixed[1:] == said and [a.kind for a in anomalies] == ["tool_result_synthesized"]
    # A computer call's output is a screenshot: nothing stands in for it.
    assert strict_continuation(said, "No tool output found for computer call c.") == (said, ())
    stale = {"type": "function_call_output", "call_id": "call_x", "output": "o"}
    kept, anomalies = strict_continuation(
        [stale, *said], "No tool call found for function call output with call_id call_x.")
    assert kept == said and [a.kind for a in anomalies] == ["orphan_tool_result_dropped"]
    alone = [stale]  # nothing would be left: the refusal reaches the client instead
    assert strict_continuation(alone, "No tool call found for function call output with "
                                      "call_id call_x.") == (alone, ())


def test_a_continuation_of_a_kept_conversation_is_paired_with_it() -> None:
    held = [{"role": "user", "content": "read both"},
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f",
             "arguments": "{}"},
            {"type": "shell_call", "id": "sh_1", "call_id": "c2", "action": {}}]
    moved_on = [{"role": "user", "content": "never mind"}]
    paired, anomalies = paired_continuation(held, moved_on)
    assert [i.get("call_id") for i in paired] == ["c1", "c2", None]
    assert paired[1]["type"] == "shell_call_output" and paired[2:] == moved_on
    assert [a.kind for a in anomalies] == ["tool_result_synthesized"] * 2
    answered = [{"type": "function_call_output", "call_id": "c1", "output": "o"},
                {"type": "shell_call_output", "call_id": "c2", "output": []}]
    assert paired_continuation(held, answered) == (answered, ())  # valid: the same list
    stale = [*answered, {"type": "function_call_output", "call_id": "c9", "output": "o"}]
    kept, anomalies = paired_continuation(held, stale)
    assert kept == answered and [a.kind for a in anomalies] == ["orphan_tool_result_dropped"]
    referenced = [{"type": "item_reference", "id": "fc_0"}, *stale]
    assert paired_continuation(held, referenced) == (referenced, ())


def test_an_output_after_a_reference_is_the_providers_to_judge() -> None:
    # Up front it goes as sent (the reference may stand for its call); on a refusal the
    # reference goes, and with it the output nothing left answers.
    items = [{"role": "user", "content": "go"}, {"type": "item_reference", "id": "fc_1"},
             {"type": "function_call_output", "call_id": "c1", "output": "o"}]
    body = {"model": GPT, "input": items}
    sent, kinds = _responses_round(body)
    assert sent["input"] is items and kinds == set()
    strict, kinds = _responses_round(body, "Item with id 'fc_1' not found.")
    assert strict["input"] == items[:1]
    assert kinds == {"item_reference_dropped", "orphan_tool_result_dropped"}


def test_a_synthesized_output_has_its_call_kinds_shape() -> None:
    body = {"model": GPT, "input": [
        {"role": "user", "content": "go"},
        {"type": "shell_call", "call_id": "s", "action": {"commands": ["ls"]}},
        {"type": "apply_patch_call", "call_id": "p", "operation": {"type": "delete_file",
                                                                   "path": "a"}},
        {"role": "user", "content": "stop"}]}
    sent, kinds = _responses_round(body)
    shell, patched = sent["input"][3], sent["input"][4]
    assert kinds == {"tool_result_synthesized"}
    assert shell["type"] == "shell_call_output" and shell["output"][0]["stdout"] == ""
    assert shell["output"][0]["stderr"] == SYNTHETIC_TOOL_RESULT_TEXT
    assert patched == {"type": "apply_patch_call_output", "call_id": "p", "status": "failed",
                       "output": SYNTHETIC_TOOL_RESULT_TEXT}


def test_call_ids_over_64_characters_are_shortened_alike_and_kept_apart() -> None:
    long = "x" * 61
    items = [{"role": "user", "content": "go"},
             *({"type": "function_call", "call_id": long + n, "name": "f", "arguments": "{}"}
               for n in ("-100", "-101")),
             {"type": "custom_tool_call_output", "call_id": long + "-101", "output": "o"},
             {"type": "function_call_output", "call_id": "x" * 64, "output": "o"}]
    fixed, anomalies = repair_input(items)
    assert fixed[1]["call_id"] != fixed[2]["call_id"] == fixed[3]["call_id"]
    assert all(len(i["call_id"]) <= 64 for i in fixed[1:]) and fixed[4] is items[4]
    # (the custom output answering a function call is retyped too: tool_output_retyped)
    assert [a.kind for a in anomalies if a.kind != "tool_output_retyped"] == [
        "call_id_shortened"] * 3
    assert repair_input(fixed) == (fixed, ())


def test_object_arguments_and_outputs_are_sent_as_json_text() -> None:
    items = [{"role": "user", "content": "read"},
             {"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}},
             {"type": "function_call_output", "call_id": "c", "output": {"ok": True}},
             {"type": "computer_call_output", "call_id": "d", "output": {
                 "type": "computer_screenshot", "image_url": "data:,"}}]
    fixed, anomalies = repair_input(items)
    assert fixed[1]["arguments"] == '{"a":1}' and fixed[2]["output"] == '{"ok":true}'
    assert fixed[3] is items[3]  # a screenshot is an object by right
    assert [a.kind for a in anomalies] == ["tool_value_serialized"] * 2
    assert repair_input(fixed) == (fixed, ())


def test_a_breakpoint_on_an_empty_block_opening_its_turn_goes_to_the_next_block() -> None:
    marked = {"type": "text", "text": "", "cache_control": {"type": "ephemeral"}}
    body = {"messages": [{"role": "user", "content": [marked, {"type": "text", "text": "a"}]}]}
    repaired, anomalies = repair_request(body)
    assert repaired["messages"][0]["content"][1] == {
        "type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}
    assert [a.kind for a in anomalies] == ["cache_breakpoint_moved"]


def test_a_breakpoint_on_a_blank_block_opening_a_later_turn_goes_to_the_turn_before() -> None:
    marked = {"type": "text", "text": " ", "cache_control": {"type": "ephemeral"}}
    body = {"messages": [{"role": "user", "content": "read"},
                         {"role": "assistant", "content": "ok"},
                         {"role": "user", "content": [marked, {"type": "text", "text": "a"}]}]}
    repaired, anomalies = repair_request(body)
    assert repaired["messages"][1]["content"] == [
        {"type": "text", "text": "ok", "cache_control": {"type": "ephemeral"}}]
    assert repaired["messages"][2]["content"] == [{"type": "text", "text": " "},
                                                  {"type": "text", "text": "a"}]
    assert [a.kind for a in anomalies] == ["cache_breakpoint_moved"]


def test_a_breakpoint_on_a_blank_block_opening_the_system_goes_to_the_next_block() -> None:
    cache = {"type": "ephemeral", "ttl": "1h"}
    body = {"system": [{"type": "text", "text": " ", "cache_control": cache},
                       {"type": "text", "text": "rules"}],
            "messages": [{"role": "user", "content": "hi"}]}
    repaired, anomalies = repair_request(body)
    assert repaired["system"] == [{"type": "text", "text": "rules", "cache_control": cache}]
    assert [a.kind for a in anomalies] == ["empty_content_dropped"]


def test_thinking_goes_off_by_the_turns_the_api_combines() -> None:
    use = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
    signed = {"type": "thinking", "thinking": "p", "signature": "s"}
    answer = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
    words = {"role": "user", "content": "and then?"}
    for first, off in (([use], True), ([signed, use], False)):
        body = {"thinking": {"type": "enabled", "budget_tokens": 1024},
                "tools": [{"name": "f", "input_schema": {"type": "object"}}], "messages": [
            {"role": "user", "content": "go"}, {"role": "assistant", "content": first},
            {"role": "assistant", "content": [{"type": "text", "text": "more"}]},
            answer, words]}
        finished, anomalies = finish_request(body)
        assert ("thinking" not in finished) is off
        assert [a.kind for a in anomalies] == (["thinking_disabled"] if off else [])


def test_an_empty_final_assistant_message_is_no_blank_turn() -> None:
    # "all messages must have non-empty content except for the optional final assistant
    # message": the exchange rules leave it, wherever else an empty message goes.
    for empty in ([], ""):
        body = {"model": CLAUDE, "max_tokens": 64, "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": empty}]}
        sent, kinds = _messages_round(body)
        assert kinds == set() and sent["messages"] == body["messages"]
    middle = {"model": CLAUDE, "max_tokens": 64, "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": []},
        {"role": "user", "content": "again"}]}
    sent, kinds = _messages_round(middle)
    assert kinds == {"empty_content_dropped"} and len(sent["messages"]) == 2


_KINDS = st.sampled_from(["message", "reasoning", "function_call", "function_call_output",
                          "custom_tool_call", "custom_tool_call_output", "item_reference",
                          "compaction", "web_search_call", "computer_call",
                          "computer_call_output", "shell_call", "shell_call_output"])
_IDS = st.sampled_from([None, "", "msg_1", "fc_1", "rs_1", "item_x", "ctc_1", "cmp_1"])


@st.composite
def _item(draw: Any) -> dict[str, Any]:
    kind = draw(_KINDS)
    item: dict[str, Any] = {"type": kind}
    item_id = draw(_IDS)
    if item_id is not None:
        item["id"] = item_id
    if kind == "message":
        item["role"] = draw(st.sampled_from(["user", "assistant", "developer"]))
        item["content"] = [{"type": draw(st.sampled_from(["input_text", "output_text"])),
                            "text": "t"}]
    if kind.endswith("call") or kind.endswith("output"):
        item["call_id"] = draw(st.sampled_from(["", "c1", "c2", "c" * 70]))
    if kind in ("reasoning", "compaction") and draw(st.booleans()):
        item["encrypted_content"] = "gAAAA"
    if kind == "reasoning" and draw(st.booleans()):
        item["summary"] = []
    return item


@settings(max_examples=150, deadline=None)
@given(st.lists(_item(), max_size=10), st.booleans())
def test_repair_input_is_pure_and_idempotent(items: list[dict[str, Any]], store: bool) -> None:
    before = copy.deepcopy(items)
    repaired, _ = repair_input(items, store=store)
    assert items == before
    again, anomalies = repair_input(repaired, store=store)
    assert anomalies == () and again is repaired


_BLOCKS = st.sampled_from([
    {"type": "text", "text": "a"}, {"type": "text", "text": " "},
    {"type": "text", "text": "", "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": "b", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    {"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "thinking", "thinking": "u"},
    {"type": "redacted_thinking", "data": "d"},
    {"type": "tool_use", "id": "a.b:1", "name": "f", "input": {}},
    {"type": "tool_result", "tool_use_id": "a.b:1", "content": "r"},
    {"type": "tool_result", "tool_use_id": "a.b:1",
     "content": [{"type": "text", "text": "r", "cache_control": {"type": "ephemeral"}}]},
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "system"]),
                          st.lists(_BLOCKS, max_size=4)), min_size=1, max_size=6),
       st.booleans())
def test_repair_request_is_pure_and_idempotent(turns: list[tuple[str, list[Any]]],
                                               interleaved: bool) -> None:
    body = {"messages": [{"role": role, "content": blocks} for role, blocks in turns],
            "thinking": {"type": "enabled", "budget_tokens": 1024}}
    before = copy.deepcopy(body)
    repaired, _ = repair_request(body, interleaved=interleaved)
    finished, _ = finish_request(repaired)
    assert body == before
    again, anomalies = repair_request(finished, interleaved=interleaved)
    assert anomalies == () and again is finished
    done, anomalies = finish_request(finished)
    assert anomalies == () and done is finished
