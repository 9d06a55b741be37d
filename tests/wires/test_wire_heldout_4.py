"""Held-out wire situations, fourth set: broken Responses / Messages histories agents send
that the earlier sets do not (a reasoning item whose call was trimmed while its output
stayed, reasoning sent twice in a row, an output naming its call by the call's item id, an
output of another kind than its call, a chat-style ``tool`` message or an output without
its value in a Responses input; on Messages a result for a call answered long before or
for a server tool, a web search left without its result mid-history, a prefill with
thinking on, a turn of nothing but redacted thinking, a ``tool_use`` whose input is null,
breakpoints on redacted thinking and more than four with one on thinking).

Each broken history is refused by the native fake with the provider's words and answered
through the gateway (the official SDK) with ``x-gateway-repairs`` naming the repair; the
history the upstream accepted is checked where the repair's meaning matters. Valid
neighbours arrive byte for byte, unreported; input no repair can make sense of gets a 4xx
in the wire's own error shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from gateway.projection.render import EMPTY_TOOL_OUTPUT_TEXT
from tests.conftest import GatewayFactory
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.responses_server import FakeResponses
from tests.wires.test_wire_heldout import CUSTOM, PNG, WEB_TOOLS, ccall, redacted, search_result
from tests.wires.test_wire_heldout import server_use as web_search_use
from tests.wires.test_wire_situations import (
    CACHE,
    CLAUDE,
    FN,
    GPT,
    THINKING_ON,
    TOOLS,
    Situation,
    am,
    assert_arrives_as_sent,
    fake_responses,
    fcall,
    fout,
    native_config,
    result,
    rs,
    run_messages_case,
    run_responses_case,
    said,
    text,
    think,
    u,
    um,
    uses,
)

__all__ = ["fake_responses"]  # the fixture, shared with test_wire_situations

OPENAI_AUTH = {"authorization": "Bearer client-key"}
ANTHROPIC_AUTH = {"x-api-key": "client-key", "anthropic-version": "2023-06-01"}


@dataclass
class Case:
    """A situation, and what must hold of what the upstream finally accepted."""

    situation: Situation
    check: Callable[[Any], None] | None = None


def types(items: list[Any]) -> list[str]:
    return [i.get("type", "message") for i in items]


# -- Responses ----------------------------------------------------------------------------


def shell(call_id: str) -> dict[str, Any]:
    return {"type": "local_shell_call", "id": "lsh_4", "call_id": call_id,
            "status": "completed", "action": {"type": "exec", "command": ["ls"], "env": {}}}


def only_the_conversation(items: list[Any]) -> None:
    assert types(items) == ["message", "message"]


def no_reasoning(items: list[Any]) -> None:
    assert "reasoning" not in types(items)


def one_reasoning_before_its_call(items: list[Any]) -> None:
    assert types(items) == ["message", "reasoning", "function_call", "function_call_output",
                            "message"]


def output_kept_under_the_calls_id(items: list[Any]) -> None:
    # The tool's real output reaches the model, paired with its call; nothing invented.
    assert items[2] == fout("call_9") and len(items) == 4


def output_kept_without_id(items: list[Any]) -> None:
    # Not a copy of the call: the tool's output stays, only the id it cannot have goes.
    assert items[1] == fcall("call_o", "fc_o") and items[2] == fout("call_o")
    assert len(items) == 4


def retyped_as_a_custom_output(items: list[Any]) -> None:
    assert items[2] == {"type": "custom_tool_call_output", "call_id": "call_k",
                        "output": "contents"}


def retyped_as_a_shell_output(items: list[Any]) -> None:
    assert items[2] == {"type": "local_shell_call_output", "call_id": "call_ls4",
                        "output": "contents"}


def output_parts_as_input_text(items: list[Any]) -> None:
    assert items[2]["output"] == [{"type": "input_text", "text": "42"}]


def tool_message_as_its_output(items: list[Any]) -> None:
    assert items[2] == {"type": "function_call_output", "call_id": "call_c", "output": "42"}
    assert len(items) == 4


def valueless_outputs_say_empty(items: list[Any]) -> None:
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    assert [o["call_id"] for o in outputs] == ["call_x1", "call_x2"]
    assert all(o["output"] == EMPTY_TOOL_OUTPUT_TEXT for o in outputs)


def cut_call_answered(items: list[Any]) -> None:
    assert types(items)[:3] == ["message", "function_call", "function_call_output"]
    assert items[1]["arguments"] == '{"path": "a.'  # the call goes as the model made it


def the_later_output(items: list[Any]) -> None:
    # The later run's output wins (a retry's), in the place of the first.
    outputs = [i for i in items if i.get("type") == "function_call_output"]
    assert [o["output"] for o in outputs] == ["contents again"]


RESPONSES: dict[str, Case] = {
    "reasoning whose function_call was trimmed, its output kept": Case(Situation(
        {"input": [u("read"), rs("rs_t"), fout("call_t"), u("go on")], "tools": FN},
        ("reasoning_item_dropped", "orphan_tool_result_dropped"),
        "of type 'reasoning' was provided without its required",
        valid={"input": [u("read"), rs("rs_t"), fcall("call_t", "fc_t"), fout("call_t"),
                         u("go on")], "tools": FN}), only_the_conversation),
    "two reasoning items in a row with nothing after them": Case(Situation(
        {"input": [u("hi"), said("hello"), u("think twice"), rs("rs_a"), rs("rs_b"),
                   u("well?")]},
        ("reasoning_item_dropped",), "of type 'reasoning' was provided without its required",
        valid={"input": [u("hi"), rs("rs_a"), rs("rs_b"), said("hello", "msg_ab"),
                         u("again")]}), no_reasoning),
    "one reasoning item sent twice back to back before its call": Case(Situation(
        {"input": [u("read"), rs("rs_d"), rs("rs_d"), fcall("call_d", "fc_d"), fout("call_d"),
                   u("go on")], "tools": FN},
        ("duplicate_item_dropped",), "Duplicate item found with id rs_d"),
        one_reasoning_before_its_call),
    "an output naming its call by the call's item id": Case(Situation(
        {"input": [u("read"), fcall("call_9", "fc_9"), fout("fc_9"), u("go on")],
         "tools": FN},
        ("call_id_relinked",), "No tool call found for function call output with call_id fc_9",
        valid={"input": [u("read"), fcall("call_9", "fc_9"), fout("call_9"), u("go on")],
               "tools": FN}), output_kept_under_the_calls_id),
    "a custom tool call answered by a function_call_output": Case(Situation(
        {"input": [u("patch"), ccall("call_k", "ctc_k"), fout("call_k"), u("go on")],
         "tools": CUSTOM},
        ("tool_output_retyped",),
        "No tool call found for function call output with call_id call_k"),
        retyped_as_a_custom_output),
    "a local shell call answered by a function_call_output": Case(Situation(
        {"input": [u("ls"), shell("call_ls4"), fout("call_ls4"), u("go on")]},
        ("tool_output_retyped",),
        "No tool call found for function call output with call_id call_ls4"),
        retyped_as_a_shell_output),
    "function output parts typed as the model's output_text": Case(Situation(
        {"input": [u("read"), fcall("call_p", "fc_p"),
                   {"type": "function_call_output", "call_id": "call_p",
                    "output": [{"type": "output_text", "text": "42", "annotations": []}]},
                   u("go on")], "tools": FN},
        ("assistant_content_retyped",), "Invalid value: 'output_text'",
        valid={"input": [u("read"), fcall("call_p", "fc_p"),
                         {"type": "function_call_output", "call_id": "call_p",
                          "output": [{"type": "input_text", "text": "42"}]}, u("go on")],
               "tools": FN}), output_parts_as_input_text),
    "a chat-style tool message answering a function call": Case(Situation(
        {"input": [u("read"), fcall("call_c", "fc_c"),
                   {"role": "tool", "tool_call_id": "call_c", "content": "42"}, u("go on")],
         "tools": FN},
        ("tool_message_converted",), "Invalid value: 'tool'"), tool_message_as_its_output),
    "outputs of cancelled calls sent without their value (null, missing)": Case(Situation(
        {"input": [u("read both"), fcall("call_x1", "fc_x1"), fcall("call_x2", "fc_x2"),
                   {"type": "function_call_output", "call_id": "call_x1", "output": None},
                   {"type": "function_call_output", "call_id": "call_x2"},
                   u("never mind")], "tools": FN},
        ("tool_result_rendered",), "got null instead"), valueless_outputs_say_empty),
    "a call cut off mid-stream (in progress, arguments cut), no output": Case(Situation(
        {"input": [u("read"), {**fcall("call_cut", "fc_cut"), "status": "in_progress",
                               "arguments": '{"path": "a.'}, u("stop, read b instead")],
         "tools": FN},
        ("tool_result_synthesized",), "No tool output found for function call call_cut"),
        cut_call_answered),
    "one call's output sent twice (a retried tool run)": Case(Situation(
        {"input": [u("read"), fcall("call_r", "fc_r"), fout("call_r"),
                   {**fout("call_r"), "output": "contents again"}, u("go on")], "tools": FN},
        ("duplicate_tool_result_dropped",), "Duplicate function_call_output for call_id"),
        the_later_output),
    "an output carrying its call's item id": Case(Situation(
        {"input": [u("read"), fcall("call_o", "fc_o"), {**fout("call_o"), "id": "fc_o"},
                   u("go on")], "tools": FN},
        ("item_id_removed",), "Duplicate item found with id fc_o"), output_kept_without_id),
    "reasoning known by id only, never stored by the provider": Case(Situation(
        {"input": [u("read"), rs("rs_never", secret=None), fcall("call_n", "fc_n"),
                   fout("call_n"), u("go on")], "tools": FN},
        ("reasoning_item_dropped",), "Item with id 'rs_never' not found", strict=True),
        no_reasoning),
}


async def run_case(gateway_factory: GatewayFactory, fake: FakeResponses, case: Case) -> None:
    """The situation's runner, then the check on the input the upstream accepted."""
    await run_responses_case(gateway_factory, fake, replace(case.situation, valid=None))
    if case.check is not None:
        case.check(fake.requests[-1].body["input"])
    if case.situation.valid is not None:
        gw = await gateway_factory(native_config(fake.base_url, "http://127.0.0.1:9"))
        await assert_arrives_as_sent(gw, f"{gw.base_url}/responses",
                                     {"model": GPT, **case.situation.valid}, OPENAI_AUTH, fake)


@pytest.mark.parametrize("name", list(RESPONSES))
async def test_responses_heldout(gateway_factory: GatewayFactory,
                                 fake_responses: FakeResponses, name: str) -> None:
    await run_case(gateway_factory, fake_responses, RESPONSES[name])


RESPONSES_VALID: dict[str, dict[str, Any]] = {
    "a custom and a function call in one turn, their outputs in another order": {
        "input": [u("patch and read"), ccall("call_v1", "ctc_v1"), fcall("call_v2", "fc_v2"),
                  fout("call_v2"), {"type": "custom_tool_call_output", "call_id": "call_v1",
                                    "output": [{"type": "input_text", "text": "applied"}]},
                  u("go on")], "tools": [*FN, *CUSTOM]},
    "an mcp approval asked and given, then the call it allowed": {
        "input": [u("ask the wiki"),
                  {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "deepwiki",
                   "name": "ask_question", "arguments": '{"question": "what?"}'},
                  {"type": "mcp_approval_response", "approval_request_id": "mcpr_1",
                   "approve": True},
                  {"type": "mcp_call", "id": "mcp_4", "server_label": "deepwiki",
                   "name": "ask_question", "arguments": '{"question": "what?"}',
                   "output": "an answer", "error": None},
                  said("it says so"), u("more")],
        "tools": [{"type": "mcp", "server_label": "deepwiki",
                   "server_url": "https://mcp.deepwiki.com/mcp"}]},
    "an output holding a file by id and an image": {
        "input": [u("fetch"), fcall("call_f", "fc_f"),
                  {"type": "function_call_output", "call_id": "call_f", "output": [
                      {"type": "input_file", "file_id": "file-abc"},
                      {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}]},
                  u("what is in them?")], "tools": FN},
}


@pytest.mark.parametrize("name", list(RESPONSES_VALID))
async def test_valid_responses_input_arrives_as_sent(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses, name: str) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    await assert_arrives_as_sent(gw, f"{gw.base_url}/responses",
                                 {"model": GPT, **RESPONSES_VALID[name]}, OPENAI_AUTH,
                                 fake_responses)


RESPONSES_SENSELESS: dict[str, list[Any]] = {
    "an input list holding a bare string": [u("hi"), "and this?"],
    "an item of a type no API knows": [
        u("read"), fcall("call_u", "fc_u"),
        {"type": "function_result", "call_id": "call_u", "output": "x"}],
}


@pytest.mark.parametrize("name", list(RESPONSES_SENSELESS))
async def test_senseless_responses_input_is_a_clear_client_error(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses, name: str) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model=GPT, input=RESPONSES_SENSELESS[name],  # type: ignore[arg-type]
                                     tools=FN)  # type: ignore[arg-type]
    assert refused.value.status_code == 400
    error = refused.value.body
    assert isinstance(error, dict) and error["type"] == "invalid_request_error"
    assert "input" in str(error.get("param")) or "input" in error["message"]


# -- Messages -----------------------------------------------------------------------------


def the_later_answer_kept(body: dict[str, Any]) -> None:
    # The later result wins (as on every wire), in the turn right after its call.
    assert body["messages"][2]["content"] == [result("t1")]
    assert body["messages"][4]["content"] == [text("again?")]


def the_search_call_dropped(body: dict[str, Any]) -> None:
    assert body["messages"][1]["content"] == [text("Let me search.")]
    assert len(body["messages"]) == 3


def the_prefill_kept_thinking_off(body: dict[str, Any]) -> None:
    assert "thinking" not in body
    assert body["messages"][-1] == am(text("The colour is"))


def breakpoint_on_the_tool_use(body: dict[str, Any]) -> None:
    turn = body["messages"][1]["content"]
    assert turn == [redacted(), {**uses("t1"), "cache_control": CACHE}]


def both_results_in_the_answer_turn(body: dict[str, Any]) -> None:
    # The user messages right after the tool turn are one turn to the API.
    turn = []
    for message in body["messages"][2:]:
        if message["role"] != "user":
            break
        turn += message["content"]
    assert [b.get("tool_use_id") for b in turn] == ["t1", "t2"]
    later = [b for m in body["messages"][len(turn) + 2:] if isinstance(m["content"], list)
             for b in m["content"]]
    assert all(b.get("type") != "tool_result" for b in later)


def result_first_in_the_answer(body: dict[str, Any]) -> None:
    answers = [b for m in body["messages"][2:] for b in (
        m["content"] if isinstance(m["content"], list) else [text(m["content"])])]
    assert answers[0]["type"] == "tool_result" and answers[0]["tool_use_id"] == "t1"
    assert any(b.get("text") == "wait, also this:" for b in answers)


def the_result_in_the_user_turn(body: dict[str, Any]) -> None:
    # The tool's real result, not a "not available" one, opens the user's turn.
    assert body["messages"][1:] == [am(text("reading"), uses("t1")),
                                    um(result("t1"), text("go on"))]


def empty_input_object(body: dict[str, Any]) -> None:
    assert body["messages"][1]["content"][0]["input"] == {}


def four_breakpoints_none_on_thinking(body: dict[str, Any]) -> None:
    raw = orjson.dumps(body).decode()
    assert raw.count('"cache_control"') == 4
    turn = body["messages"][1]["content"]
    assert "cache_control" not in turn[0] and turn[1]["cache_control"] == CACHE
    assert body["messages"][2]["content"][0]["cache_control"] == CACHE  # the latest stays


MESSAGES: dict[str, Case] = {
    "a tool_result for a call answered two turns before": Case(Situation(
        {"messages": [um("read"), am(uses("t1")), um(result("t1")), am(text("read it")),
                      um(result("t1"), text("again?"))], "tools": TOOLS},
        ("duplicate_tool_result_dropped",), "unexpected `tool_use_id`"),
        the_later_answer_kept),
    "a tool_result answering a server tool's id": Case(Situation(
        {"messages": [um("weather?"), am(web_search_use("srvtoolu_1"),
                                         search_result("srvtoolu_1"), text("sunny")),
                      um(result("srvtoolu_1"), text("thanks"))], "tools": WEB_TOOLS},
        ("orphan_tool_result_dropped",), "unexpected `tool_use_id`")),
    "a web search left without its result before the user's next turn": Case(Situation(
        {"messages": [um("weather?"), am(text("Let me search."),
                                         web_search_use("srvtoolu_9")),
                      um("never mind, what is 2+2?")], "tools": WEB_TOOLS},
        ("server_tool_use_dropped",),
        "web_search tool use with id srvtoolu_9 was found without a corresponding",
        valid={"messages": [um("weather?"), am(text("Let me search."),
                                               web_search_use("srvtoolu_9"))],
               "tools": WEB_TOOLS}), the_search_call_dropped),
    "a turn of nothing but an unanswered web search": Case(Situation(
        {"messages": [um("weather?"), am(web_search_use("srvtoolu_8")), um("well?")],
         "tools": WEB_TOOLS},
        ("server_tool_use_dropped",), "was found without a corresponding")),
    "thinking on, an assistant prefill without thinking at the end": Case(Situation(
        {"messages": [um("name a colour"), am(text("The colour is"))],
         "thinking": THINKING_ON},
        ("thinking_disabled",), "a final `assistant` message must start with a thinking",
        valid={"messages": [um("name a colour"), am(text("The colour is"))]}),
        the_prefill_kept_thinking_off),
    "an assistant turn of nothing but redacted thinking": Case(Situation(
        {"messages": [um("hi"), am(redacted()), um("hello?")]},
        ("thinking_block_dropped",), "cannot be `thinking`")),
    "a breakpoint on a redacted_thinking block": Case(Situation(
        {"messages": [um("read"), am({**redacted(), "cache_control": CACHE}, uses("t1")),
                      um(result("t1"))], "tools": TOOLS},
        ("cache_breakpoint_moved",), "cache_control: Extra inputs are not permitted"),
        breakpoint_on_the_tool_use),
    "two parallel calls, one answered now, the other two turns late": Case(Situation(
        {"messages": [um("read both"), am(uses("t1"), uses("t2")), um(result("t1")),
                      am(text("still waiting on b")), um(result("t2"), text("here is b"))],
         "tools": TOOLS},
        ("tool_result_reordered",), "ids were found without `tool_result` blocks"),
        both_results_in_the_answer_turn),
    "the user's words, then the tool_result as a second user message": Case(Situation(
        {"messages": [um("read"), am(uses("t1")), um("wait, also this:"), um(result("t1"))],
         "tools": TOOLS},
        ("tool_result_reordered",), "Did not find 1 `tool_result` block(s) at the beginning",
        valid={"messages": [um("read"), am(uses("t1")), um(result("t1")),
                            um("wait, also this:")], "tools": TOOLS}),
        result_first_in_the_answer),
    "a tool_result written into the assistant message after its tool_use": Case(Situation(
        {"messages": [um("read"), am(text("reading"), uses("t1"), result("t1")),
                      um("go on")], "tools": TOOLS},
        ("tool_result_reordered",), "tool_result blocks can only be in user messages"),
        the_result_in_the_user_turn),
    "a tool_use whose input is null (an interrupted stream)": Case(Situation(
        {"messages": [um("read"), am({"type": "tool_use", "id": "t1", "name": "read_file",
                                      "input": None}), um(result("t1"))], "tools": TOOLS},
        ("tool_input_parsed",), "tool_use.input: Input should be a valid dictionary"),
        empty_input_object),
    "five breakpoints, one on a thinking block": Case(Situation(
        {"system": [text("rules", cache_control=CACHE)],
         "tools": [{**TOOLS[0], "cache_control": CACHE}],
         "messages": [um(text("read", cache_control=CACHE)),
                      am({**think("plan"), "cache_control": CACHE}, uses("t1")),
                      um({**result("t1"), "cache_control": CACHE})]},
        ("cache_breakpoint_moved", "cache_breakpoint_removed"),
        "cache_control: Extra inputs are not permitted"), four_breakpoints_none_on_thinking),
    "a system list whose only block is empty and carries the breakpoint": Case(Situation(
        {"system": [text("", cache_control=CACHE)], "messages": [um("hi")]},
        ("empty_content_dropped",), "system: text content blocks must be non-empty")),
}


@pytest.mark.parametrize("name", list(MESSAGES))
async def test_messages_heldout(gateway_factory: GatewayFactory, name: str) -> None:
    case = MESSAGES[name]
    await run_messages_case(gateway_factory, case.situation)
    if case.check is None:
        return
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            await c.messages.create(model=CLAUDE, max_tokens=64,  # type: ignore[call-overload]
                                    **case.situation.broken)
        case.check(fake.requests[-1].body)


DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                           "data": "line 1\nline 2"}, "title": "a.txt"}
SEARCH_FAILED = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_e", "content": {
    "type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}}

MESSAGES_VALID: dict[str, dict[str, Any]] = {
    "a tool result holding a document and an image, marked for caching": {
        "tools": TOOLS, "messages": [um("read a.txt and the chart"), am(uses("t1")), um(
            {"type": "tool_result", "tool_use_id": "t1", "cache_control": CACHE, "content": [
                DOCUMENT, {"type": "image", "source": {"type": "base64",
                                                      "media_type": "image/png",
                                                      "data": PNG}}]})]},
    "breakpoints on a tool_use and on its tool_result": {
        "tools": TOOLS, "messages": [
            um("read"), am(text("reading"), {**uses("t1"), "cache_control": CACHE}),
            um({**result("t1"), "cache_control": CACHE}, text("and summarize"))]},
    "a web search that failed, and the answer saying so": {
        "tools": WEB_TOOLS, "messages": [
            um("weather?"), am(web_search_use("srvtoolu_e"),
                               SEARCH_FAILED, text("I could not search.")),
            um("try later then")]},
}


@pytest.mark.parametrize("name", list(MESSAGES_VALID))
async def test_valid_messages_arrive_as_sent(gateway_factory: GatewayFactory,
                                             name: str) -> None:
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        await assert_arrives_as_sent(gw, f"{gw.root}/v1/messages",
                                     {"model": CLAUDE, "max_tokens": 64,
                                      **MESSAGES_VALID[name]}, ANTHROPIC_AUTH, fake)


MESSAGES_SENSELESS: dict[str, list[Any]] = {
    "a block of a type no API knows in an assistant turn": [
        um("read"), am({"type": "tool_call", "id": "x1", "name": "read_file"}), um("go on")],
    "content holding a bare number": [um("hi"), {"role": "assistant", "content": [42]},
                                      um("go on")],
}


@pytest.mark.parametrize("name", list(MESSAGES_SENSELESS))
async def test_senseless_messages_are_a_clear_client_error(gateway_factory: GatewayFactory,
                                                           name: str) -> None:
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with httpx.AsyncClient() as c:
            answer = await c.post(f"{gw.root}/v1/messages", content=orjson.dumps(
                {"model": CLAUDE, "max_tokens": 64, "messages": MESSAGES_SENSELESS[name]}),
                headers={**ANTHROPIC_AUTH, "content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    error = answer.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert "messages.1.content.0" in error["error"]["message"]


# -- Responses: a chat-converted agent continuing by id -----------------------------------


async def test_a_tool_message_answering_the_continued_responses_call(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # An agent converted from Chat Completions continues by previous_response_id and
    # answers the stored call with a chat tool message: it goes as that call's output.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        first = await c.responses.create(model=GPT, input="read TOOL a", tools=FN)  # type: ignore[arg-type]
        call = first.output[0]
        assert call.type == "function_call"
        raw = await c.responses.with_raw_response.create(
            model=GPT, previous_response_id=first.id, tools=FN,  # type: ignore[arg-type]
            input=[{"role": "tool", "tool_call_id": call.call_id,  # type: ignore[list-item]
                    "content": "alpha"}])
    assert raw.headers["x-gateway-repairs"] == "tool_message_converted=1"
    assert raw.parse().output_text == "tool results: alpha"
    assert fake_responses.requests[-1].body["input"] == [
        {"type": "function_call_output", "call_id": call.call_id, "output": "alpha"}]


async def test_a_repaired_messages_history_streams_with_its_repairs_reported(
        gateway_factory: GatewayFactory) -> None:
    # A web search left unanswered mid-history and a prefill with thinking on, streamed.
    body = {"thinking": THINKING_ON, "tools": WEB_TOOLS, "messages": [
        um("weather?"), am(text("Let me search."), web_search_use("srvtoolu_s")),
        um("never mind. Name a colour"), am(text("The colour is"))]}
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c, c.messages.stream(
                model=CLAUDE, max_tokens=64, **body) as stream:  # type: ignore[arg-type]
            final = await stream.get_final_message()
            repairs = stream.response.headers["x-gateway-repairs"]
        sent = fake.requests[-1].body
    assert final.content and final.content[0].type == "text"
    assert repairs == "server_tool_use_dropped=1,thinking_disabled=1"
    assert "thinking" not in sent and sent["stream"] is True
    assert sent["messages"][1]["content"] == [text("Let me search.")]
