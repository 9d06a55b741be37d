"""Held-out wire situations, fifth set, Messages only: broken histories agents send that
the earlier sets do not cover. Streaming leftovers on blocks (LangChain's ``index`` and
``partial_json``, a ``text`` field merged into a ``tool_use``), an error ``tool_result``
without content, a server tool id minted by another proxy, OpenAI-style ``image_url``
parts and data URLs in base64 images, a top-level ``cache_control`` beside four block
breakpoints, a ``ttl`` given in seconds, a one-hour system breakpoint after a five-minute
tool breakpoint, a history trimmed down to an orphan result or to a call without the
user's turn, tool ids lost on the way (empty), redacted thinking after text, whitespace
prefills given as strings, thinking on with a string prefill.

Each broken history is refused by the native fake with the API's words (sources in
tests/fakes/anthropic_rules.py) and answered through the gateway (the official SDK) with
``x-gateway-repairs`` naming the repair; what the upstream finally accepted is checked
where the repair's meaning matters. Valid neighbours arrive byte for byte, unreported;
what no repair can make sense of gets a 4xx in the Messages error shape.
"""

from __future__ import annotations

import base64
import copy
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import orjson
import pytest
from PIL import Image

from gateway.projection.render import EMPTY_TOOL_OUTPUT_TEXT
from tests.conftest import GatewayFactory
from tests.fakes.anthropic_server import FakeAnthropic
from tests.wires.test_wire_heldout import PNG, WEB_TOOLS, redacted, search_result, server_use
from tests.wires.test_wire_rules import _messages_round
from tests.wires.test_wire_situations import (
    CACHE,
    CACHE_1H,
    CLAUDE,
    THINKING_ON,
    TOOLS,
    Situation,
    am,
    assert_arrives_as_sent,
    native_config,
    result,
    run_messages_case,
    text,
    think,
    um,
    uses,
)

ANTHROPIC_AUTH = {"x-api-key": "client-key", "anthropic-version": "2023-06-01"}


@dataclass
class Case:
    """A situation, and what must hold of what the upstream finally accepted."""

    situation: Situation
    check: Callable[[dict[str, Any]], None] | None = None


def _bmp() -> str:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 200, 10)).save(out, format="BMP")
    return base64.b64encode(out.getvalue()).decode()


def image(data: str, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": data}}


def read(tool_id: str, path: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "read_file", "input": {"path": path}}


def answer(tool_id: str, output: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": output}


def error_result(tool_id: str, content: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "is_error": True,
            "content": content}


def blocks_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]


# -- what the upstream accepted ------------------------------------------------------------


def no_stream_leftovers(body: dict[str, Any]) -> None:
    # The call and the words stay as the model made them, only the stream's bookkeeping goes.
    assert body["messages"][1]["content"] == [text("Let me read it."), uses("t1")]


def the_thinking_kept_signed(body: dict[str, Any]) -> None:
    # The signed block goes back as the model made it, so thinking can stay on.
    assert body["thinking"] == THINKING_ON
    assert body["messages"][1]["content"] == [think("plan"), uses("t1")]


def the_merged_text_kept_before_the_call(body: dict[str, Any]) -> None:
    assert body["messages"][1]["content"] == [text("Reading a."), uses("t1")]


def the_partial_input_kept(body: dict[str, Any]) -> None:
    assert body["messages"][1]["content"] == [{**uses("t1"), "input": {"path": "a.py"}}]


def the_error_says_empty(body: dict[str, Any]) -> None:
    answer = body["messages"][2]["content"][0]
    assert answer["is_error"] is True and answer["tool_use_id"] == "t1"
    assert answer["content"] == EMPTY_TOOL_OUTPUT_TEXT


def the_search_under_one_valid_id(body: dict[str, Any]) -> None:
    call, found = body["messages"][1]["content"][:2]
    assert call["id"].startswith("srvtoolu_") and found["tool_use_id"] == call["id"]
    assert call["input"] == {"query": "weather"} and found["content"] == search_result(
        "x")["content"]


def an_anthropic_image(body: dict[str, Any]) -> None:
    assert body["messages"][0]["content"] == [image(PNG), text("what is this?")]


def a_url_image(body: dict[str, Any]) -> None:
    assert body["messages"][0]["content"][0] == {
        "type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}


def the_base64_unwrapped(body: dict[str, Any]) -> None:
    assert body["messages"][0]["content"][0] == image(PNG)


def three_explicit_breakpoints(body: dict[str, Any]) -> None:
    raw = orjson.dumps({k: v for k, v in body.items() if k != "cache_control"}).decode()
    assert raw.count('"cache_control"') == 3
    assert body["cache_control"] == CACHE  # the automatic one stays
    assert body["tools"][0]["cache_control"] == CACHE  # the stable head stays marked
    assert body["messages"][-1]["content"][0]["cache_control"] == CACHE  # and the latest


def an_hour_as_1h(body: dict[str, Any]) -> None:
    assert body["system"][0]["cache_control"] == CACHE_1H


def five_minutes_on_the_system(body: dict[str, Any]) -> None:
    assert body["tools"][0]["cache_control"] == CACHE
    assert body["system"][0]["cache_control"] == CACHE


def starts_with_the_user(body: dict[str, Any]) -> None:
    assert body["messages"][0]["role"] == "user"
    assert all(b.get("tool_use_id") != "t0" for b in blocks_of(body))


def redacted_first(body: dict[str, Any]) -> None:
    assert body["messages"][1]["content"] == [redacted(), text("hello"), uses("t1")]


def ids_valid_and_paired(body: dict[str, Any]) -> None:
    call = body["messages"][1]["content"][0]
    assert call["id"] and body["messages"][2]["content"][0]["tool_use_id"] == call["id"]


def each_result_with_its_call(body: dict[str, Any]) -> None:
    # Each output stays with the call that made it: "B" is the answer to reading b.
    calls = [b for b in blocks_of(body) if b["type"] == "tool_use"]
    answers = [b for b in blocks_of(body) if b["type"] == "tool_result"]
    assert [c["input"]["path"] for c in calls] == ["a", "b"]
    assert len({c["id"] for c in calls}) == 2
    assert [a["tool_use_id"] for a in answers] == [c["id"] for c in calls]
    assert [a["content"] for a in answers] == ["A", "B"]


def a_screenshot_image(body: dict[str, Any]) -> None:
    assert body["messages"][2]["content"][0]["content"] == [image(PNG)]


def the_prefill_gone(body: dict[str, Any]) -> None:
    assert body["messages"] == [um("write a haiku")]


def the_string_prefill_kept(body: dict[str, Any]) -> None:
    assert "thinking" not in body
    assert body["messages"][-1] == {"role": "assistant", "content": "The colour is"}


def the_blank_error_says_empty(body: dict[str, Any]) -> None:
    answer = body["messages"][2]["content"][0]
    assert answer["is_error"] is True and answer["content"] in (
        EMPTY_TOOL_OUTPUT_TEXT, [text(EMPTY_TOOL_OUTPUT_TEXT)])


MESSAGES: dict[str, Case] = {
    # langchain-ai/langchain#31208: streamed chunks keep their "index".
    "LangChain's streamed blocks sent back with their index": Case(Situation(
        {"messages": [um("read a"), am({**text("Let me read it."), "index": 0},
                                       {**uses("t1"), "index": 1}),
                      um(result("t1"))], "tools": TOOLS},
        ("block_field_dropped",), "index: Extra inputs are not permitted"),
        no_stream_leftovers),
    "LangChain's streamed thinking turn with its index, thinking on": Case(Situation(
        {"messages": [um("read a"), am({**think("plan"), "index": 0}, {**uses("t1"), "index": 1}),
                      um(result("t1"))], "tools": TOOLS, "thinking": THINKING_ON},
        ("block_field_dropped",), "index: Extra inputs are not permitted",
        valid={"messages": [um("read a"), am(think("plan"), uses("t1")), um(result("t1"))],
               "tools": TOOLS, "thinking": THINKING_ON}), the_thinking_kept_signed),
    # anthropics/claude-code#4378: the text of a turn merged into its tool_use block.
    "a tool_use carrying the turn's text": Case(Situation(
        {"messages": [um("read a"), am({**uses("t1"), "text": "Reading a."}),
                      um(result("t1"))], "tools": TOOLS},
        ("block_field_dropped",), "tool_use.text: Extra inputs are not permitted"),
        the_merged_text_kept_before_the_call),
    "a tool_use with its streamed partial_json and an empty input": Case(Situation(
        {"messages": [um("read a"), am({**uses("t1"), "input": {},
                                        "partial_json": '{"path": "a.py"}'}),
                      um(result("t1"))], "tools": TOOLS},
        ("block_field_dropped",), "tool_use.partial_json: Extra inputs are not permitted"),
        the_partial_input_kept),
    # bytedance/trae-agent#230, jlevy/markform#153.
    "an error tool_result with empty string content": Case(Situation(
        {"messages": [um("run it"), am(uses("t1")), um(error_result("t1", ""))],
         "tools": TOOLS},
        ("tool_result_rendered",), "content cannot be empty if `is_error` is true",
        valid={"messages": [um("run it"), am(uses("t1")),
                            um(error_result("t1", "timed out"))], "tools": TOOLS}),
        the_error_says_empty),
    "an error tool_result with an empty content list": Case(Situation(
        {"messages": [um("run it"), am(uses("t1")), um(error_result("t1", []))],
         "tools": TOOLS},
        ("tool_result_rendered",), "content cannot be empty if `is_error` is true"),
        the_error_says_empty),
    "an error tool_result whose only text block is blank": Case(Situation(
        {"messages": [um("run it"), am(uses("t1")), um(error_result("t1", [text("")]))],
         "tools": TOOLS},
        ("empty_content_dropped",), "text content blocks must be non-empty"),
        the_blank_error_says_empty),
    "an error tool_result without content": Case(Situation(
        {"messages": [um("run it"), am(uses("t1")),
                      um({"type": "tool_result", "tool_use_id": "t1", "is_error": True}),
                      ], "tools": TOOLS},
        ("tool_result_rendered",), "content cannot be empty if `is_error` is true"),
        the_error_says_empty),
    # ding113/claude-code-hub#470: a relay renamed the server tool's ids.
    "a web search whose id another proxy minted": Case(Situation(
        {"messages": [um("weather?"), am({**server_use("x"), "id": "ws-call.1"},
                                         {**search_result("x"), "tool_use_id": "ws-call.1"},
                                         text("sunny")), um("and tomorrow?")],
         "tools": WEB_TOOLS},
        ("tool_id_rewritten",), "server_tool_use.id: String should match pattern",
        valid={"messages": [um("weather?"), am(server_use("srvtoolu_01Ab_9"),
                                               search_result("srvtoolu_01Ab_9"),
                                               text("sunny")), um("and tomorrow?")],
               "tools": WEB_TOOLS}), the_search_under_one_valid_id),
    # AstrBotDevs/AstrBot#4444: an OpenAI-style part kept in a Messages history.
    "an OpenAI-style image_url part holding a data URL": Case(Situation(
        {"messages": [um({"type": "image_url",
                          "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                         text("what is this?"))]},
        ("image_part_converted",), "Input tag 'image_url' found using 'type'"),
        an_anthropic_image),
    "an OpenAI-style image_url part holding a web address": Case(Situation(
        {"messages": [um({"type": "image_url", "image_url": "https://example.com/cat.png"},
                         text("what is this?"))]},
        ("image_part_converted",), "Input tag 'image_url' found using 'type'"),
        a_url_image),
    # livekit/agents#3867, felixarntz/ai-services#19.
    "a base64 image sent as a whole data URL": Case(Situation(
        {"messages": [um(image(f"data:image/png;base64,{PNG}"), text("what is this?"))]},
        ("image_data_url_unwrapped",), "image.source.base64: invalid base64 data"),
        the_base64_unwrapped),
    # VicBilibily/GCMP#370: automatic caching takes the fifth breakpoint.
    "automatic caching beside four block breakpoints": Case(Situation(
        {"cache_control": CACHE, "system": [text("rules", cache_control=CACHE)],
         "tools": [{**TOOLS[0], "cache_control": CACHE}],
         "messages": [um(text("a", cache_control=CACHE)), am(text("b")),
                      um(text("c", cache_control=CACHE))]},
        ("cache_breakpoint_removed",), "A maximum of 4 blocks with cache_control",
        valid={"cache_control": CACHE, "system": [text("rules", cache_control=CACHE)],
               "tools": [{**TOOLS[0], "cache_control": CACHE}],
               "messages": [um(text("a")), am(text("b")),
                            um(text("c", cache_control=CACHE))]}),
        three_explicit_breakpoints),
    # cnighswonger/claude-code-cache-fix#14: an interceptor writing the hour in seconds.
    "a breakpoint whose ttl is given in seconds": Case(Situation(
        {"system": [text("rules", cache_control={"type": "ephemeral", "ttl": 3600})],
         "messages": [um("hi")]},
        ("cache_ttl_adjusted",), "ttl: Input should be '5m' or '1h'"), an_hour_as_1h),
    "a one-hour system breakpoint after a five-minute tool breakpoint": Case(Situation(
        {"tools": [{**TOOLS[0], "cache_control": CACHE}],
         "system": [text("rules", cache_control=CACHE_1H)], "messages": [um("hi")]},
        ("cache_ttl_adjusted",), "must not come after a ttl='5m' cache_control block",
        valid={"tools": [{**TOOLS[0], "cache_control": CACHE_1H}],
               "system": [text("rules", cache_control=CACHE)], "messages": [um("hi")]}),
        five_minutes_on_the_system),
    "cache_control on a whitespace-only text block after real text": Case(Situation(
        {"messages": [um(text("read the file"), text("\n\n", cache_control=CACHE))]},
        ("cache_breakpoint_moved",), "cache_control cannot be set for empty text blocks")),
    # A context trimmer cut between a call and its result: the history opens on the result.
    "a trimmed history opening on an orphan tool_result": Case(Situation(
        {"messages": [um(result("t0")), am(text("The file says hi.")), um("thanks, now b")],
         "tools": TOOLS},
        # (the result goes, and with it what came before the user's first words)
        ("leading_non_user_dropped",), "unexpected `tool_use_id` found in `tool_result`",
        strict=True), starts_with_the_user),
    "a trimmed history opening on the assistant's tool call": Case(Situation(
        {"messages": [am(uses("t1")), um(result("t1")), am(text("done")), um("next?")],
         "tools": TOOLS},
        ("leading_non_user_dropped",), 'first message must use the "user" role',
        strict=True)),
    "redacted thinking after the turn's text": Case(Situation(
        {"messages": [um("read"), am(text("hello"), redacted(), uses("t1")),
                      um(result("t1"))], "tools": TOOLS},
        ("thinking_block_moved",), "must come before any other block"), redacted_first),
    # A converter from a provider without call ids (Gemini) leaves them empty.
    "a tool call and its result with empty ids": Case(Situation(
        {"messages": [um("read"), am({**uses(""), "id": ""}), um(result("")),
                      um("and summarize")], "tools": TOOLS},
        ("tool_id_rewritten",), "tool_use.id: String should match pattern"),
        ids_valid_and_paired),
    "two parallel calls and their results, all with empty ids": Case(Situation(
        {"messages": [um("read a and b"), am(read("", "a"), read("", "b")),
                      um(answer("", "A"), answer("", "B"))], "tools": TOOLS},
        ("tool_id_rewritten",), "tool_use.id: String should match pattern"),
        each_result_with_its_call),
    "two tool turns, every id empty": Case(Situation(
        {"messages": [um("read a, then b"), am(read("", "a")), um(answer("", "A")),
                      am(read("", "b")), um(answer("", "B"))], "tools": TOOLS},
        ("tool_id_rewritten",), "tool_use.id: String should match pattern"),
        each_result_with_its_call),
    "a screenshot returned as an OpenAI-style image_url in a tool result": Case(Situation(
        {"messages": [um("shoot"), am(uses("t1")), um(
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]})],
         "tools": TOOLS},
        ("image_part_converted",), "Input tag 'image_url' found using 'type'"),
        a_screenshot_image),
    "a whitespace-only prefill given as a string": Case(Situation(
        {"messages": [um("write a haiku"), {"role": "assistant", "content": " \n"}]},
        ("empty_content_dropped",), "text content blocks must contain non-whitespace"),
        the_prefill_gone),
    "thinking on, a prefill given as a plain string": Case(Situation(
        {"messages": [um("name a colour"), {"role": "assistant", "content": "The colour is"}],
         "thinking": THINKING_ON},
        ("thinking_disabled",), "a final `assistant` message must start with a thinking"),
        the_string_prefill_kept),
    "a BMP screenshot labelled image/bmp": Case(Situation(
        {"messages": [um(image(_bmp(), "image/bmp"), text("what is this?"))]},
        (), "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
        strict=True)),
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
            await c.messages.create(model=CLAUDE, max_tokens=64, **case.situation.broken)
        case.check(fake.requests[-1].body)


CODE_USE = {"type": "server_tool_use", "id": "srvtoolu_c1", "name": "bash_code_execution",
            "input": {"command": "ls"}}
CODE_RESULT = {"type": "bash_code_execution_tool_result", "tool_use_id": "srvtoolu_c1",
               "content": {"type": "bash_code_execution_result", "stdout": "a.py\n",
                           "stderr": "", "return_code": 0, "content": []}}

MESSAGES_VALID: dict[str, dict[str, Any]] = {
    "answer blocks dumped by the SDK with their null and default fields": {
        "tools": TOOLS, "messages": [
            um("read"), am({**text("reading"), "citations": None},
                           {**uses("t1"), "caller": {"type": "direct"}}),
            um(result("t1"))]},
    "an error result with its message, a plain one with empty content": {
        "tools": TOOLS, "messages": [
            um("run both"), am(uses("t1"), uses("t2")),
            um(error_result("t1", "exit 1"), {**result("t2"), "is_error": False})]},
    "a code execution turn in a container": {
        "container": "container_011", "messages": [
            um("list files"), am(CODE_USE, CODE_RESULT, text("One file: a.py")),
            um("thanks")]},
    "an image and a document from the Files API": {"messages": [
        um({"type": "image", "source": {"type": "file", "file_id": "file_011img"}},
           {"type": "document", "source": {"type": "file", "file_id": "file_011pdf"}},
           text("compare them"))]},
    "automatic caching with three block breakpoints, hour ones first": {
        "cache_control": CACHE, "tools": [{**TOOLS[0], "cache_control": CACHE_1H}],
        "system": [text("rules", cache_control=CACHE_1H)],
        "messages": [um(text("a", cache_control=CACHE)), am(text("b")), um("c")]},
    "an assistant turn mid-history ending in a newline": {"messages": [
        um("hi"), {"role": "assistant", "content": "Hello!\n"}, um("again")]},
    "a web search whose id has the server tool's own form": {
        "tools": WEB_TOOLS, "messages": [
            um("weather?"), am(server_use("srvtoolu_01_x"), search_result("srvtoolu_01_x"),
                               text("sunny")), um("ok")]},
}


@pytest.mark.parametrize("name", list(MESSAGES_VALID))
async def test_valid_messages_arrive_as_sent(gateway_factory: GatewayFactory,
                                             name: str) -> None:
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        await assert_arrives_as_sent(gw, f"{gw.root}/v1/messages",
                                     {"model": CLAUDE, "max_tokens": 64,
                                      **MESSAGES_VALID[name]}, ANTHROPIC_AUTH, fake)


MESSAGES_REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    # Settings no history repair may change: the provider's words come back.
    "thinking on with a forced tool choice": (
        {"thinking": THINKING_ON, "tools": TOOLS, "tool_choice": {"type": "any"},
         "messages": [um("read a")]},
        "Thinking may not be enabled when tool_choice forces tool use."),
    "a chat-style tool message": (
        {"tools": TOOLS, "messages": [um("read"), am(uses("t1")),
                                      {"role": "tool", "tool_call_id": "t1",
                                       "content": "contents"}]},
        "messages.2.role: Input should be 'user' or 'assistant'"),
    "no messages at all": ({"messages": []}, "messages"),
}


@pytest.mark.parametrize("name", list(MESSAGES_REFUSED))
async def test_what_no_repair_fixes_is_a_clear_client_error(gateway_factory: GatewayFactory,
                                                             name: str) -> None:
    body, words = MESSAGES_REFUSED[name]
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with httpx.AsyncClient() as c:
            answer = await c.post(f"{gw.root}/v1/messages", content=orjson.dumps(
                {"model": CLAUDE, "max_tokens": 64, **body}),
                headers={**ANTHROPIC_AUTH, "content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    error = answer.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert words in error["error"]["message"]
    assert "Traceback" not in answer.text


async def test_an_image_whose_data_is_no_image_is_left_out_with_a_note(
        gateway_factory: GatewayFactory) -> None:
    # Yeachan-Heo/gajae-code#2806: a lost blob's placeholder written where the base64 was,
    # in a tool result every later turn sends again. The media rung leaves a note in its
    # place instead of the session failing for good.
    body = {"model": CLAUDE, "max_tokens": 64, "tools": TOOLS, "messages": [
        um("shot"), am(uses("t1")), um({"type": "tool_result", "tool_use_id": "t1", "content": [
            text("the screen:"),
            image("[Session resident imageData blob missing: sha256:ab12]", "image/webp")]})]}
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            raw = await c.messages.with_raw_response.create(**body)  # type: ignore[call-overload]
        sent = fake.requests[-1].body
    assert (await raw.parse()).content[0].type == "text"
    assert raw.headers["x-gateway-recovery"].startswith("media=")
    inner = sent["messages"][2]["content"][0]["content"]
    assert inner[0] == text("the screen:")
    assert all(b["type"] == "text" for b in inner) and len(inner) == 2


@pytest.mark.parametrize("name", list(MESSAGES))
def test_a_repaired_history_needs_no_repair_again(name: str) -> None:
    # The client's body is never mutated; what was sent, sent again, changes nothing.
    situation = MESSAGES[name].situation
    body = orjson.loads(orjson.dumps({"model": CLAUDE, "max_tokens": 64, **situation.broken}))
    before = copy.deepcopy(body)
    sent, kinds = _messages_round(body, situation.refusal if situation.strict else None)
    assert body == before
    assert situation.strict or set(situation.repairs) <= kinds
    again, more = _messages_round(orjson.loads(orjson.dumps(sent)))
    assert more == set() and again == sent


async def test_langchain_streaming_its_own_streamed_turn_back(
        gateway_factory: GatewayFactory) -> None:
    # A LangChain agent streams, keeps the chunks' blocks (index, partial_json) and sends
    # them back streaming the next turn: the stream is answered, the repair reported.
    turn = [{"type": "text", "text": "Let me read it.", "index": 0},
            {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {},
             "partial_json": '{"path": "a.py"}', "index": 1}]
    body = {"tools": TOOLS, "messages": [
        um("read a.py"), {"role": "assistant", "content": turn},
        um({"type": "tool_result", "tool_use_id": "toolu_01", "content": "print(1)"})]}
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c, c.messages.stream(
                model=CLAUDE, max_tokens=64, **body) as stream:  # type: ignore[arg-type]
            final = await stream.get_final_message()
            repairs = stream.response.headers["x-gateway-repairs"]
        sent = fake.requests[-1].body
    assert len(fake.requests) == 1
    assert final.content[0].type == "text" and "print(1)" in final.content[0].text
    assert repairs == "block_field_dropped=2"
    assert sent["messages"][1]["content"] == [
        text("Let me read it."), {"type": "tool_use", "id": "toolu_01", "name": "read_file",
                                  "input": {"path": "a.py"}}]
