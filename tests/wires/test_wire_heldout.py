"""Held-out wire situations: broken Responses / Messages histories of the same kinds as
tests/data/wire-errors.jsonl but of shapes test_wire_situations.py does not send (reasoning
between a call and its output, an output before its call, custom and computer calls without
their outputs, a user message typed as the model's, a tool result that is not first in its
turn or answers one call twice, server tool results split from their call, breakpoints
inside tool results, an empty system block, ...).

Each runs end to end as there: the native fake refuses it directly with the provider's
words, the official SDK through the gateway gets a 200 and ``x-gateway-repairs`` naming the
repair, and a valid neighbour of the same shape arrives byte for byte, unreported.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import httpx
import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from tests.conftest import GatewayFactory
from tests.fakes.anthropic_rules import sign_thinking
from tests.fakes.responses_server import FakeResponses, validate_adjacent_outputs
from tests.wires.test_wire_rules import _BLOCKS, _item, _messages_round, _responses_round
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

# -- Responses --------------------------------------------------------------------------

CUSTOM = [{"type": "custom", "name": "apply_patch", "description": "apply a patch"}]


def ccall(call_id: str, item_id: str | None = None) -> dict[str, Any]:
    item = {"type": "custom_tool_call", "call_id": call_id, "name": "apply_patch",
            "input": "*** Begin Patch"}
    if item_id is not None:
        item["id"] = item_id
    return item


def cout(call_id: str) -> dict[str, Any]:
    return {"type": "custom_tool_call_output", "call_id": call_id, "output": "applied"}


def computer(call_id: str) -> dict[str, Any]:
    return {"type": "computer_call", "id": "cu_1", "call_id": call_id,
            "action": {"type": "screenshot"}, "pending_safety_checks": [],
            "status": "completed"}


def shell_out(call_id: str) -> dict[str, Any]:
    return {"type": "local_shell_call_output", "call_id": call_id, "output": "ok"}


WEB_SEARCH = {"type": "web_search_call", "id": "ws_1", "status": "completed",
              "action": {"type": "search", "query": "weather"}}


def user_parts(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": list(parts)}


RESPONSES: dict[str, Situation] = {
    "reasoning item orphaned between a call and its output": Situation(
        {"input": [u("read"), fcall("call_1", "fc_1"), rs("rs_7"), fout("call_1"), u("go on")],
         "tools": FN},
        ("reasoning_item_dropped",), "of type 'reasoning' was provided without its required",
        valid={"input": [u("read"), rs("rs_7"), fcall("call_1", "fc_1"), fout("call_1"),
                         u("go on")], "tools": FN}),
    "reasoning item last in the input": Situation(
        {"input": [u("hi"), said("hello"), u("again"), rs("rs_8")]},
        ("reasoning_item_dropped",), "of type 'reasoning' was provided without its required",
        valid={"input": [u("hi"), rs("rs_8"), said("hello"), u("again")]}),
    "reasoning before a server-side web search": Situation(
        {"input": [u("weather?"), rs("rs_ws"), WEB_SEARCH, rs("rs_end")]},
        ("reasoning_item_dropped",), "of type 'reasoning' was provided without its required",
        valid={"input": [u("weather?"), rs("rs_ws"), WEB_SEARCH, said("sunny"),
                         u("and tomorrow?")]}),
    "reasoning id minted by another backend": Situation(
        {"input": [u("read"), rs("reasoning_0"), fcall("call_1", "fc_1"), fout("call_1"),
                   u("go on")], "tools": FN},
        ("reasoning_item_dropped",), "Expected an ID that begins with 'rs'"),
    "encrypted reasoning from another org before a message": Situation(
        {"input": [u("hi"), rs("rs_org", "enc-from-another-org"), said("hello", "msg_org"),
                   u("again")]},
        ("encrypted_item_dropped",), "could not be verified", strict=True),
    "function_call_output before its call": Situation(
        {"input": [u("read"), fout("call_early"), fcall("call_early"), u("go on")],
         "tools": FN},
        ("orphan_tool_result_dropped",), "No tool call found for function call output"),
    "function_call_output answering a call id nobody made": Situation(
        {"input": [u("read"), fcall("call_a"), fout("call_b"), u("go on")], "tools": FN},
        ("orphan_tool_result_dropped", "tool_result_synthesized"),
        "No tool call found for function call output with call_id call_b"),
    "custom tool call without its output": Situation(
        {"input": [u("patch"), ccall("call_ctc", "ctc_1"), u("never mind")], "tools": CUSTOM},
        ("tool_result_synthesized",), "No tool output found for custom tool call call_ctc",
        valid={"input": [u("patch"), ccall("call_ctc", "ctc_1"), cout("call_ctc"),
                         u("thanks")], "tools": CUSTOM}),
    "orphan custom tool call output": Situation(
        {"input": [u("hi"), cout("call_lost"), u("go on")], "tools": CUSTOM},
        ("orphan_tool_result_dropped",), "No tool call found for custom tool call output"),
    "computer call without its output": Situation(
        {"input": [u("look"), computer("call_cu"), u("stop")]},
        ("tool_result_synthesized",), "No tool output found for computer call call_cu"),
    "orphan local shell call output": Situation(
        {"input": [u("ls"), shell_out("call_sh"), u("go on")]},
        ("orphan_tool_result_dropped",), "No tool call found for local shell call output"),
    "one call id used by two calls": Situation(
        {"input": [u("read"), fcall("terminal:0", "fc_1"), fout("terminal:0"), u("again"),
                   fcall("terminal:0", "fc_2"), fout("terminal:0"), u("go on")], "tools": FN},
        ("duplicate_tool_call_deduped",), "Duplicate function_call_output for call_id",
        strict=True,
        valid={"input": [u("read"), fcall("terminal:0", "fc_1"), fout("terminal:0"),
                         u("again"), fcall("terminal:1", "fc_2"), fout("terminal:1"),
                         u("go on")], "tools": FN}),
    "duplicate message item id": Situation(
        {"input": [u("hi"), said("hello", "msg_dup"), u("again"), said("hello", "msg_dup"),
                   u("and?")]},
        ("duplicate_item_dropped",), "Duplicate item found with id msg_dup"),
    "user message typed as the model's": Situation(
        {"input": [user_parts({"type": "output_text", "text": "hi", "annotations": []}),
                   said("hello"), u("again")]},
        ("assistant_content_retyped",), "Invalid value: 'output_text'",
        valid={"input": [user_parts({"type": "input_text", "text": "hi"}), said("hello"),
                         u("again")]}),
    "item_reference to an item never stored": Situation(
        {"input": [u("read"), {"type": "item_reference", "id": "fc_never"},
                   fout("call_x"), u("go on")], "tools": FN},
        ("item_reference_dropped", "orphan_tool_result_dropped"), "not found", strict=True),
    "two parallel calls, one answered": Situation(
        {"input": [u("read both"), fcall("call_p1", "fc_p1"), fcall("call_p2", "fc_p2"),
                   fout("call_p1"), u("go on")], "tools": FN},
        ("tool_result_synthesized",), "No tool output found for function call call_p2",
        valid={"input": [u("read both"), fcall("call_p1", "fc_p1"), fcall("call_p2", "fc_p2"),
                         fout("call_p1"), fout("call_p2"), u("go on")], "tools": FN}),
    "call, then the model's text, then no output": Situation(
        {"input": [u("read"), fcall("call_m", "fc_m"), said("checking", "msg_m"), u("stop")],
         "tools": FN},
        ("tool_result_synthesized",), "No tool output found for function call call_m",
        valid={"input": [u("read"), fcall("call_m", "fc_m"), said("checking", "msg_m"),
                         fout("call_m"), u("go on")], "tools": FN}),
    "function call sent without the reasoning it was made with": Situation(
        {"input": [u("read"), fcall("call_l", "fc_linked"), fout("call_l"), u("go on")],
         "tools": FN},
        ("item_id_removed",), "of type 'function_call' was provided without its required "
        "'reasoning' item", strict=True, links={"fc_linked": "rs_linked"},
        valid={"input": [u("read"), rs("rs_linked"), fcall("call_l", "fc_linked"),
                         fout("call_l"), u("go on")], "tools": FN}),
    "reasoning item followed by a developer message": Situation(
        {"input": [u("hi"), rs("rs_dev"), {"role": "developer", "content": "be brief"},
                   u("again")]},
        ("reasoning_item_dropped",), "of type 'reasoning' was provided without its required",
        valid={"input": [u("hi"), {"role": "developer", "content": "be brief"},
                         rs("rs_dev"), said("ok"), u("again")]}),
    "developer message typed as the model's": Situation(
        {"input": [{"type": "message", "role": "developer",
                    "content": [{"type": "output_text", "text": "be brief"}]}, u("hi")]},
        ("assistant_content_retyped",), "Invalid value: 'output_text'",
        valid={"input": [{"type": "message", "role": "developer",
                          "content": [{"type": "input_text", "text": "be brief"}]}, u("hi"),
                         {"type": "message", "role": "assistant", "content": [
                             {"type": "refusal", "refusal": "no"}]}, u("please")]}),
    "empty call_id on a custom tool call and its output": Situation(
        {"input": [u("patch"), ccall(""), cout(""), u("go on")], "tools": CUSTOM},
        ("call_id_synthesized",), "Expected a string with minimum length 1"),
    "id-only reasoning under store=false before a message": Situation(
        {"input": [u("hi"), rs("rs_gone", secret=None), said("hello", "msg_after"),
                   u("again")], "store": False},
        ("reasoning_item_dropped",), "Items are not persisted when `store`",
        valid={"input": [u("hi"), rs("rs_kept"), said("hello", "msg_after"), u("again")],
               "store": False}),
}


@pytest.mark.parametrize("name", list(RESPONSES))
async def test_responses_heldout(gateway_factory: GatewayFactory,
                                 fake_responses: FakeResponses, name: str) -> None:
    await run_responses_case(gateway_factory, fake_responses, RESPONSES[name])


# Valid on the OpenAI Responses API (outputs pair with calls by call_id, wherever they come
# after them), refused by stricter Responses servers (DeepSeek: "No tool output found for
# tool call"): they go as sent, and only a refusal lays the outputs out after their calls.
ORDER_FREE = {
    "parallel outputs in another order": [
        u("read both"), fcall("call_p1", "fc_p1"), fcall("call_p2", "fc_p2"),
        fout("call_p2"), fout("call_p1"), u("go on")],
    "a user message between a call and its output": [
        u("read"), fcall("call_u", "fc_u"), u("hurry"), fout("call_u")],
}


@pytest.mark.parametrize("name", list(ORDER_FREE))
async def test_order_free_outputs_arrive_as_sent(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses, name: str) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    await assert_arrives_as_sent(
        gw, f"{gw.base_url}/responses", {"model": GPT, "input": ORDER_FREE[name], "tools": FN},
        {"authorization": "Bearer client-key"}, fake_responses)


async def test_an_output_after_other_items_is_laid_out_when_a_strict_server_refuses_it(
        gateway_factory: GatewayFactory) -> None:
    name = "a user message between a call and its output"
    async with FakeResponses(api_key="upstream-openai-key", adjacent_outputs=True) as strict:
        gw = await gateway_factory(native_config(strict.base_url, "http://127.0.0.1:9"))
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                      max_retries=0) as c:
            raw = await c.responses.with_raw_response.create(
                model=GPT, input=ORDER_FREE[name], tools=FN)  # type: ignore[arg-type]
        assert raw.parse().output_text
        assert "tool_result_reordered" in raw.headers["x-gateway-repairs"]
        first, second = strict.requests  # as sent, refused; then laid out and answered
        assert first.body["input"] == ORDER_FREE[name]
        validate_adjacent_outputs(second.body["input"])  # (raises when it is not)


async def test_previous_response_with_its_items_sent_again(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # The client continues a response by id and also sends that response's function_call
    # again (as Responses demos do): the upstream holds it already ("Duplicate item").
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        first = await c.responses.create(model=GPT, input="read TOOL a", tools=FN)
        call = first.output[0]
        assert call.type == "function_call"
        again = [call.model_dump(exclude_none=True),
                 {"type": "function_call_output", "call_id": call.call_id, "output": "x"}]
        before = len(fake_responses.requests)
        raw = await c.responses.with_raw_response.create(
            model=GPT, previous_response_id=first.id, input=again, tools=FN)
    assert "tool results: x" in raw.parse().output_text
    assert "duplicate_item_dropped" in raw.headers["x-gateway-repairs"]
    sent = fake_responses.requests[before:]
    assert [i["type"] for i in sent[-1].body["input"]] == ["function_call_output"]


async def test_previous_response_the_gateway_never_saw_with_its_items_sent_again(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # The same, for a response made at the provider directly: the gateway holds nothing to
    # compare with, so the provider's "Duplicate item" refusal drops the replayed items.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with httpx.AsyncClient() as direct:
        first = (await direct.post(
            f"{fake_responses.base_url}/v1/responses",
            json={"model": GPT, "input": "read TOOL a", "tools": FN},
            headers={"authorization": "Bearer upstream-openai-key"})).json()
    call = first["output"][0]
    again = [call, {"type": "function_call_output", "call_id": call["call_id"], "output": "y"}]
    before = len(fake_responses.requests)
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        raw = await c.responses.with_raw_response.create(
            model=GPT, previous_response_id=first["id"], input=again, tools=FN)
    assert "tool results: y" in raw.parse().output_text
    assert "duplicate_item_dropped" in raw.headers["x-gateway-repairs"]
    sent = fake_responses.requests[before:]
    assert len(sent) == 2 and sent[0].body["input"][0]["id"] == call["id"]
    assert [i["type"] for i in sent[1].body["input"]] == ["function_call_output"]


async def test_empty_input_is_a_clear_client_error(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # Nothing to repair: the provider's own 400 reaches the client, in its wire's format.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model=GPT, input=[])
    assert refused.value.status_code == 400
    assert "empty array" in refused.value.message
    assert all(r.body["input"] == [] for r in fake_responses.requests)


# -- Messages ---------------------------------------------------------------------------

def _png(side: int = 8, stored: bool = False) -> str:
    """A PNG; ``stored``: written without compression (over 5 MB from 1400 px up)."""
    out = io.BytesIO()
    Image.new("RGB", (side, side), (200, 30, 30)).save(
        out, format="PNG", compress_level=0 if stored else 6)
    return base64.b64encode(out.getvalue()).decode()


PNG = _png()


def _jpeg() -> str:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (30, 30, 200)).save(out, format="JPEG")
    return base64.b64encode(out.getvalue()).decode()


def server_use(tool_id: str) -> dict[str, Any]:
    return {"type": "server_tool_use", "id": tool_id, "name": "web_search",
            "input": {"query": "weather"}}


def search_result(tool_id: str) -> dict[str, Any]:
    return {"type": "web_search_tool_result", "tool_use_id": tool_id, "content": [
        {"type": "web_search_result", "url": "https://example.com", "title": "Weather",
         "encrypted_content": "EqgfCioIARgB", "page_age": None}]}


WEB_TOOLS = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]


def redacted(data: str = "EmwKAhgBEgy3va3pzix") -> dict[str, Any]:
    return {"type": "redacted_thinking", "data": data}


MESSAGES: dict[str, Situation] = {
    "tool_use input as a JSON string (a history converted from Chat Completions)": Situation(
        {"messages": [um("read a"), am({"type": "tool_use", "id": "t1", "name": "read_file",
                                        "input": '{"path": "a.py"}'}),
                      um(result("t1"))], "tools": TOOLS},
        ("tool_input_parsed",), "tool_use.input: Input should be a valid dictionary",
        valid={"messages": [um("read a"), am({"type": "tool_use", "id": "t1",
                                              "name": "read_file",
                                              "input": {"path": "a.py"}}),
                            um(result("t1"))], "tools": TOOLS}),
    "tool_result arriving two turns late": Situation(
        {"messages": [um("read"), am(uses("toolu_late")), um("are you there?"),
                      am(text("yes")), um(result("toolu_late"), text("here it is"))],
         "tools": TOOLS},
        ("tool_result_reordered",), "ids were found without `tool_result` blocks"),
    "tool_result after text in its user turn": Situation(
        {"messages": [um("read"), am(uses("t1")), um(text("here:"), result("t1"))],
         "tools": TOOLS},
        ("tool_result_reordered",), "Did not find 1 `tool_result` block(s) at the beginning",
        valid={"messages": [um("read"), am(uses("t1")), um(result("t1"), text("here:"))],
               "tools": TOOLS}),
    "one tool_use answered twice": Situation(
        {"messages": [um("read"), am(uses("t1")), um(result("t1"), result("t1"))],
         "tools": TOOLS},
        ("duplicate_tool_result_dropped",), "each tool_use must have a single result"),
    "tool_use ending the conversation": Situation(
        {"messages": [um("read"), am(text("reading"), uses("t_end"))], "tools": TOOLS},
        ("tool_result_synthesized",), "ids were found without `tool_result` blocks"),
    "redacted thinking without its data": Situation(
        {"messages": [um("hi"), am({"type": "redacted_thinking"}, text("hello")), um("x")]},
        ("thinking_block_dropped",), "redacted_thinking.data: Field required",
        valid={"messages": [um("hi"), am(redacted(), text("hello")), um("x")],
               "thinking": THINKING_ON}),
    "thinking with a signature of another block": Situation(
        {"messages": [um("hi"), am(think("mine", sign_thinking("theirs")), text("hello")),
                      um("again")], "thinking": THINKING_ON},
        ("thinking_block_dropped",), "cannot be modified", strict=True,
        valid={"messages": [um("hi"), am(think("mine"), text("hello")), um("again")],
               "thinking": THINKING_ON}),
    "empty text block in a user turn beside real text": Situation(
        {"messages": [um(text("read the file"), text(""))]},
        ("empty_content_dropped",), "text content blocks must be non-empty",
        valid={"messages": [um("read the file"), am(text("ok")), um("go on"),
                            um("really")]}),
    "whitespace-only final assistant text after thinking": Situation(
        {"messages": [um("hi"), am(think("plan"), text("  \n"))]},
        ("empty_content_dropped", "thinking_block_dropped"),
        "text content blocks must contain non-whitespace"),
    "prefill given as a string with trailing whitespace": Situation(
        {"messages": [um("name a colour"), {"role": "assistant", "content": "The colour is "}]},
        ("trailing_whitespace_trimmed",), "cannot end with trailing whitespace",
        valid={"messages": [um("name a colour"),
                            {"role": "assistant", "content": "The colour is"}]}),
    "web search result split from its server_tool_use": Situation(
        {"messages": [um("weather?"), am(server_use("srvtoolu_1")), um("and?"),
                      am(search_result("srvtoolu_1"), text("sunny"))], "tools": WEB_TOOLS},
        ("orphan_tool_result_dropped",),
        "unexpected `tool_use_id` found in `web_search_tool_result` blocks",
        valid={"messages": [um("weather?"), am(server_use("srvtoolu_1"),
                                               search_result("srvtoolu_1"), text("sunny")),
                            um("and tomorrow?")], "tools": WEB_TOOLS}),
    "empty text block in a system list with cache_control": Situation(
        {"system": [text("rules", cache_control=CACHE), text("")],
         "messages": [um("hi")]},
        ("empty_content_dropped",), "system: text content blocks must be non-empty",
        valid={"system": [text("rules"), text("more rules", cache_control=CACHE)],
               "messages": [um("hi")]}),
    "five breakpoints, two inside tool results": Situation(
        {"system": [text("rules", cache_control=CACHE)], "tools": TOOLS, "messages": [
            um("read"), am(uses("t1"), uses("t2")),
            um({"type": "tool_result", "tool_use_id": "t1",
                "content": [text("a", cache_control=CACHE)]},
               {"type": "tool_result", "tool_use_id": "t2",
                "content": [text("b", cache_control=CACHE)]}),
            am(text("done", cache_control=CACHE)), um(text("next", cache_control=CACHE))]},
        ("cache_breakpoint_removed",), "A maximum of 4 blocks with cache_control",
        valid={"system": [text("rules", cache_control=CACHE)], "tools": TOOLS, "messages": [
            um("read"), am(uses("t1")),
            um({"type": "tool_result", "tool_use_id": "t1",
                "content": [text("a", cache_control=CACHE)]}),
            am(text("done", cache_control=CACHE)), um(text("next", cache_control=CACHE))]}),
    "image whose media type names another format": Situation(
        {"messages": [um({"type": "image", "source": {"type": "base64",
                                                      "media_type": "image/jpeg",
                                                      "data": PNG}}, text("what is this?"))]},
        (), "Image does not match the provided media type", strict=True,
        valid={"messages": [um({"type": "image", "source": {"type": "base64",
                                                            "media_type": "image/png",
                                                            "data": PNG}},
                               text("what is this?"))]}),
    "consecutive assistant turns with thinking off": Situation(
        {"messages": [um("hi"), am(text("hello"), think("late")), am(text("again")),
                      um("ok")]},
        ("thinking_block_dropped",), "cannot be `thinking`",
        valid={"messages": [um("hi"), am(think("early"), text("hello")), am(text("again")),
                            um("ok"), am(redacted(), text("sure")), um("bye")]}),
    "two tool_uses, one tool_result": Situation(
        {"messages": [um("read both"), am(uses("t1"), uses("t2")), um(result("t1"))],
         "tools": TOOLS},
        ("tool_result_synthesized",), "ids were found without `tool_result` blocks",
        valid={"messages": [um("read both"), am(uses("t1"), uses("t2")), um(result("t1")),
                            um(result("t2"))], "tools": TOOLS}),
    "whitespace-only text as a whole middle turn": Situation(
        {"messages": [um("hi"), am(text(" \n ")), um("again")]},
        ("empty_content_dropped",), "text content blocks must contain non-whitespace text"),
    "whitespace-only prefill": Situation(
        {"messages": [um("write"), am(text("  "))]},
        ("empty_content_dropped",),
        "text content blocks must contain non-whitespace text"),
    "empty string user turn": Situation(
        {"messages": [um("hi"), am(text("hello")), {"role": "user", "content": ""},
                      am(text("?")), um("go on")]},
        ("empty_content_dropped",), "all messages must have non-empty content"),
    "tool_use, more assistant text in a second message, no tool_result": Situation(
        {"messages": [um("read"), am(uses("t1")), am(text("reading it now")), um("well?")],
         "tools": TOOLS},
        ("tool_result_synthesized",), "ids were found without `tool_result` blocks",
        valid={"messages": [um("read"), am(uses("t1")), am(text("reading it now")),
                            um(result("t1"))], "tools": TOOLS}),
    "an image over 5 MB": Situation(
        {"messages": [um({"type": "image", "source": {"type": "base64",
                                                      "media_type": "image/png",
                                                      "data": _png(1400, stored=True)}},
                         text("what is this?"))]},
        (), "image exceeds 5 MB maximum", strict=True),
    "image labelled image/jpg": Situation(
        {"messages": [um({"type": "image", "source": {"type": "base64", "media_type": "image/jpg",
                                                      "data": _jpeg()}}, text("what is it?"))]},
        (), "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
        strict=True),
    "image in a tool result with a wrong media type": Situation(
        {"messages": [um("screenshot"), am(uses("t1")), um(
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/gif",
                                             "data": PNG}}]})], "tools": TOOLS},
        (), "Image does not match the provided media type", strict=True),
}


@pytest.mark.parametrize("name", list(MESSAGES))
async def test_messages_heldout(gateway_factory: GatewayFactory, name: str) -> None:
    await run_messages_case(gateway_factory, MESSAGES[name])


# -- the round trip over random histories ---------------------------------------------------


def _parsed(value: Any) -> Any:
    """``value`` as a server reads it (distinct objects, as JSON parsing makes them)."""
    return orjson.loads(orjson.dumps(value))


@st.composite
def _complete_item(draw: Any) -> dict[str, Any]:
    item = draw(_item())
    if item["type"] in ("function_call", "custom_tool_call"):
        item["name"] = "f"
        item["arguments" if item["type"] == "function_call" else "input"] = "{}"
    if item["type"].endswith("output"):
        item["output"] = "o"
    return item


@settings(max_examples=150, deadline=None)
@given(st.lists(_complete_item(), max_size=10))
def test_a_repaired_input_needs_no_repair_again(items: list[dict[str, Any]]) -> None:
    # Reading, projecting and rendering a Responses input (reasoning, calls, the model's
    # messages among them, references, outputs in any order) settles in one round.
    body = _parsed({"model": GPT, "input": [u("hi"), *items]})
    before = _parsed(body)
    sent, _ = _responses_round(body)
    assert body == before
    again, more = _responses_round(sent)
    assert more == set() and again == sent


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant"]),
                          st.lists(_BLOCKS, min_size=1, max_size=4)), min_size=1, max_size=6))
def test_repaired_messages_need_no_repair_again(turns: list[tuple[str, list[Any]]]) -> None:
    # The same for Messages: assistant messages in a row, server tool blocks, breakpoints
    # inside tool results, thinking anywhere.
    body = _parsed({"model": CLAUDE, "max_tokens": 64,
                    "tools": [{"name": "f", "input_schema": {"type": "object"}}],
                    "messages": [um("hi"), *({"role": r, "content": b} for r, b in turns)]})
    before = _parsed(body)
    sent, _ = _messages_round(body)
    assert body == before
    again, more = _messages_round(sent)
    assert more == set() and again == sent
