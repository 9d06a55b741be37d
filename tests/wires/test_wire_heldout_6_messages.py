"""Held-out wire situations, sixth set, Messages only, written from the field rather than
from the earlier sets: what Claude Code, the Agent SDK, LangChain, the Vercel AI SDK and
hand-written loops send. A thinking block dumped with a null signature, a tool turn whose
thinking lost its signature when the stream was cut, a session switched to another model
(its thinking signed by the old one), an empty ``tools`` list beside tool blocks, an error
result of whitespace, two call ids that differ only by a character the API refuses, base64
wrapped over lines (``base64.encodebytes``), an image whose upload failed (empty base64),
tool results split by a hook's reminder message, a breakpoint on an empty block ending a
prefill, a step's words written as a plain string message after its call (or a blank
one), a call of no arguments saved without its ``input``, and the ``count_tokens``
endpoint given the same broken histories.

Each broken history is refused by the native fake with the API's words and answered
through the gateway (the official SDK) with ``x-gateway-repairs`` naming the repair; what
the upstream finally accepted is checked where the repair's meaning matters. Valid
neighbours arrive byte for byte, unreported; what no repair can make sense of gets a 4xx in
the Messages error shape.
"""

from __future__ import annotations

import base64
import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import orjson
import pytest

from gateway.projection.exchanges import SYNTHETIC_TOOL_RESULT_TEXT
from gateway.projection.render import EMPTY_TOOL_OUTPUT_TEXT
from tests.conftest import GatewayFactory
from tests.fakes.anthropic_rules import sign_thinking
from tests.fakes.anthropic_server import FakeAnthropic
from tests.wires.test_wire_heldout import (
    PNG,
    WEB_TOOLS,
    _jpeg,
    redacted,
    search_result,
    server_use,
)
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
    run_messages_case,
    text,
    think,
    um,
    uses,
)

ANTHROPIC_AUTH = {"x-api-key": "client-key", "anthropic-version": "2023-06-01"}
UPSTREAM_AUTH = {"x-api-key": "upstream-anthropic-key", "anthropic-version": "2023-06-01"}
WRAPPED = base64.encodebytes(base64.b64decode(PNG)).decode()  # 76 columns, "\n" after each
JPEG = _jpeg()  # (its base64 holds "+" and "/")
URL_SAFE = base64.urlsafe_b64encode(base64.b64decode(JPEG)).decode().rstrip("=")
REMINDER = "<system-reminder>The PostToolUse hook ran.</system-reminder>"
PDF = base64.b64encode(b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF").decode()
SAMPLING = {"stop_sequences": ["</answer>"], "metadata": {"user_id": "u-42"},
            "service_tier": "auto",
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}


@dataclass
class Case:
    """A situation, and what must hold of what the upstream finally accepted."""

    situation: Situation
    check: Callable[[dict[str, Any]], None] | None = None


def image(data: str, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": data}}


def read(tool_id: str, path: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "read_file", "input": {"path": path}}


def answer(tool_id: str, output: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": output, **extra}


def blocks_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for m in body["messages"] for b in (
        m["content"] if isinstance(m["content"], list) else [text(m["content"])])]


# -- what the upstream accepted ------------------------------------------------------------


def the_unsigned_thinking_gone(body: dict[str, Any]) -> None:
    assert body["messages"][1]["content"] == [text("hello")]


def the_used_tool_declared(body: dict[str, Any]) -> None:
    assert [t["name"] for t in body["tools"]] == ["read_file"]
    assert body["tool_choice"] == {"type": "none"}  # declared to read the history, not to call


def thinking_off_the_signed_turn_kept(body: dict[str, Any]) -> None:
    assert "thinking" not in body
    assert body["messages"][1]["content"] == [think("plan a"), read("t1", "a")]
    assert body["messages"][3]["content"] == [read("t2", "b")]


def the_blank_error_says_empty(body: dict[str, Any]) -> None:
    said = body["messages"][2]["content"][0]
    assert said["is_error"] is True and said["content"] == EMPTY_TOOL_OUTPUT_TEXT


def each_output_with_its_own_call(body: dict[str, Any]) -> None:
    calls = [b for b in blocks_of(body) if b["type"] == "tool_use"]
    outputs = [b for b in blocks_of(body) if b["type"] == "tool_result"]
    ids = [c["id"] for c in calls]
    assert len(set(ids)) == 2 and all(re.fullmatch(r"[a-zA-Z0-9_-]+", x) for x in ids)
    assert "call_1" in ids  # the id that was valid is left as it was
    assert [(c["input"]["path"], o["tool_use_id"], o["content"]) for c, o in zip(
        calls, outputs, strict=True)] == [("a", ids[0], "A"), ("b", ids[1], "B")]


def the_image_unwrapped(body: dict[str, Any]) -> None:
    assert body["messages"][0]["content"] == [image(PNG), text("what is on screen?")]


def the_screenshot_unwrapped(body: dict[str, Any]) -> None:
    assert body["messages"][2]["content"][0]["content"] == [text("the screen:"), image(PNG)]


def results_first_then_the_reminder(body: dict[str, Any]) -> None:
    after = [b for m in body["messages"][2:] for b in (
        m["content"] if isinstance(m["content"], list) else [text(m["content"])])]
    assert [b.get("tool_use_id", b.get("text")) for b in after] == ["t1", "t2", REMINDER]
    assert all(m["role"] == "user" for m in body["messages"][2:])


def the_breakpoint_on_the_prefill_words(body: dict[str, Any]) -> None:
    assert body["messages"][-1] == am(text("The answer:", cache_control=CACHE))


def the_settings_as_sent(body: dict[str, Any]) -> None:
    assert {k: body[k] for k in SAMPLING} == SAMPLING
    assert body["messages"] == [um("hi"), um("again")]


def the_step_answered_before_the_user(body: dict[str, Any]) -> None:
    # The words stay where the client wrote them; the call's stand-in result comes after
    # the whole turn, before the user's new words.
    assert body["messages"][1:3] == [am(read("t1", "a")),
                                     {"role": "assistant", "content": "Reading it now."}]
    assert body["messages"][3]["content"] == [answer("t1", SYNTHETIC_TOOL_RESULT_TEXT)]
    assert body["messages"][4] == um("never mind")


def the_call_without_arguments(body: dict[str, Any]) -> None:
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "t1", "name": "list_files", "input": {}}]


def thinking_kept_on_after_the_redacted_block(body: dict[str, Any]) -> None:
    assert body["thinking"] == THINKING_ON
    assert body["messages"][1]["content"] == [redacted(), read("t1", "a")]


def the_blank_step_gone(body: dict[str, Any]) -> None:
    assert body["messages"] == [um("read a"), am(read("t1", "a")), um(answer("t1", "A"))]


def the_photo_in_plain_base64(body: dict[str, Any]) -> None:
    assert body["messages"][0]["content"][0] == image(JPEG, "image/jpeg")
    assert body["messages"][0]["content"][1:] == [image(PNG), text("compare them")]


def the_png_relabelled(body: dict[str, Any]) -> None:
    # The same bytes under the name the API takes: the image is not removed.
    assert body["messages"][0]["content"] == [image(PNG), text("what is this?")]


def the_retried_output_kept(body: dict[str, Any]) -> None:
    assert body["messages"][2:] == [um(answer("t1", "B (retried)"))]


def the_early_result_gone_the_call_answered(body: dict[str, Any]) -> None:
    assert body["messages"] == [
        um("read a"), am(read("t1", "a")), um(answer("t1", SYNTHETIC_TOOL_RESULT_TEXT)),
        um("go on")]


LIST_FILES = [{"name": "list_files", "description": "list the files",
               "input_schema": {"type": "object", "properties": {}}}]

MESSAGES: dict[str, Case] = {
    # LangChain / pydantic dumps of a thinking block made without one: "signature": null.
    "a thinking block dumped with a null signature": Case(Situation(
        {"messages": [um("hi"), am({"type": "thinking", "thinking": "hm", "signature": None},
                                   text("hello")), um("and now?")]},
        ("thinking_block_dropped",), "signature: Input should be a valid string"),
        the_unsigned_thinking_gone),
    # An agent that filters its tool table per turn sends "tools": [] with its history.
    "tool blocks in the history and an empty tools list": Case(Situation(
        {"tools": [], "messages": [um("read a"), am(read("t1", "a")), um(answer("t1", "A")),
                                   am(text("It says A.")), um("thanks, summarize")]},
        ("tools_declared",), "must define tools"), the_used_tool_declared),
    # The stream was cut after the thinking text, before its signature_delta.
    "thinking on, the latest tool turn's thinking cut before its signature": Case(Situation(
        {"thinking": THINKING_ON, "tools": TOOLS, "messages": [
            um("read a then b"), am(think("plan a"), read("t1", "a")), um(answer("t1", "A")),
            am({"type": "thinking", "thinking": "now b"}, read("t2", "b")),
            um(answer("t2", "B"))]},
        ("thinking_block_dropped", "thinking_disabled"), "signature: Field required"),
        thinking_off_the_signed_turn_kept),
    "an error result whose output is only whitespace": Case(Situation(
        {"tools": TOOLS, "messages": [um("run it"), am(uses("t1")),
                                      um(answer("t1", " \n", is_error=True))]},
        ("tool_result_rendered",), "text content blocks must contain non-whitespace text"),
        the_blank_error_says_empty),
    # A bridge wrote one call as "call.1"; the next call really is "call_1".
    "two call ids that differ only by a character the API refuses": Case(Situation(
        {"tools": TOOLS, "messages": [
            um("read a, then b"), am(read("call.1", "a")), um(answer("call.1", "A")),
            am(read("call_1", "b")), um(answer("call_1", "B"))]},
        ("tool_id_rewritten",), "tool_use.id: String should match pattern"),
        each_output_with_its_own_call),
    # Python's base64.encodebytes / `openssl base64`: a line break every 76 / 64 characters.
    "a screenshot whose base64 is wrapped over lines": Case(Situation(
        {"messages": [um(image(WRAPPED), text("what is on screen?"))]},
        ("image_data_url_unwrapped",), "image.source.base64: invalid base64 data"),
        the_image_unwrapped),
    "a tool's screenshot as a data URL wrapped over lines": Case(Situation(
        {"tools": TOOLS, "messages": [um("shoot"), am(uses("t1")), um(answer("t1", [
            text("the screen:"), image(f"data:image/png;base64,{WRAPPED}")]))]},
        ("image_data_url_unwrapped",), "image.source.base64: invalid base64 data"),
        the_screenshot_unwrapped),
    # Node's toString("base64url"), Go's RawStdEncoding: another alphabet, no padding.
    "images in URL-safe base64 and without their padding": Case(Situation(
        {"messages": [um(image(URL_SAFE, "image/jpeg"), image(PNG.rstrip("=")),
                         text("compare them"))]},
        ("image_data_url_unwrapped",), "image.source.base64: invalid base64 data"),
        the_photo_in_plain_base64),
    # Claude Code's hooks add a reminder as its own user message between parallel results.
    "parallel results split by a hook's reminder message": Case(Situation(
        {"tools": TOOLS, "messages": [
            um("read a and b"), am(read("t1", "a"), read("t2", "b")), um(answer("t1", "A")),
            um(text(REMINDER)), um(answer("t2", "B"))]},
        ("tool_result_reordered",), "Did not find 1 `tool_result` block(s)"),
        results_first_then_the_reminder),
    "an empty block carrying the breakpoint at the end of a prefill": Case(Situation(
        {"messages": [um(text("answer in one word", cache_control=CACHE)),
                      am(text("The answer:"), text("", cache_control=CACHE))]},
        ("cache_breakpoint_moved",), "cache_control cannot be set for empty text blocks"),
        the_breakpoint_on_the_prefill_words),
    "a repaired request with every sampling setting a client sets": Case(Situation(
        {**SAMPLING, "tools": TOOLS, "messages": [um("hi"), am(text("")), um("again")]},
        ("empty_content_dropped",), "text content blocks must be non-empty"),
        the_settings_as_sent),
    # The Vercel AI SDK writes a step's words as their own assistant message after the call.
    "a call, its step's words as a plain string message, then the user": Case(Situation(
        {"tools": TOOLS, "messages": [
            um("read a"), am(read("t1", "a")),
            {"role": "assistant", "content": "Reading it now."}, um("never mind")]},
        ("tool_result_synthesized",), "ids were found without `tool_result` blocks"),
        the_step_answered_before_the_user),
    # The Vercel AI SDK's input: undefined for a call of no arguments, lost by JSON.stringify.
    "a call of no arguments saved without its input": Case(Situation(
        {"tools": LIST_FILES, "messages": [
            um("what is here?"), am({"type": "tool_use", "id": "t1", "name": "list_files"}),
            um(answer("t1", "a.py b.py"))]},
        ("tool_input_parsed",), "tool_use.input: Field required"), the_call_without_arguments),
    "thinking on, an unsigned block after the redacted one opening the tool turn": Case(
        Situation({"thinking": THINKING_ON, "tools": TOOLS, "messages": [
            um("read a"), am(redacted(), {"type": "thinking", "thinking": "then a"},
                             read("t1", "a")), um(answer("t1", "A"))]},
            ("thinking_block_dropped",), "signature: Field required"),
        thinking_kept_on_after_the_redacted_block),
    # A Java client's MediaType.toString(), an "IMAGE/PNG" from a file dialog's filter.
    "an image labelled image/PNG": Case(Situation(
        {"messages": [um(image(PNG, "image/PNG"), text("what is this?"))]},
        (), "Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
        strict=True), the_png_relabelled),
    # A tool run retried after a timeout, its second output appended as a new user message.
    "one call's output sent again as a second user message": Case(Situation(
        {"tools": TOOLS, "messages": [um("read b"), am(read("t1", "b")),
                                      um(answer("t1", "B")), um(answer("t1", "B (retried)"))]},
        ("duplicate_tool_result_dropped",), "Found multiple `tool_result` blocks with id: t1"),
        the_retried_output_kept),
    # A store that saves a turn's output before the call that made it.
    "a result saved before the call that made it": Case(Situation(
        {"tools": TOOLS, "messages": [um("read a"), um(answer("t1", "A")), am(read("t1", "a")),
                                      um("go on")]},
        ("orphan_tool_result_dropped", "tool_result_synthesized"),
        "unexpected `tool_use_id` found in `tool_result` blocks: t1"),
        the_early_result_gone_the_call_answered),
    "a blank string message between a call and its result": Case(Situation(
        {"tools": TOOLS, "messages": [um("read a"), am(read("t1", "a")),
                                      {"role": "assistant", "content": ""},
                                      um(answer("t1", "A"))]},
        ("empty_content_dropped",), "all messages must have non-empty content"),
        the_blank_step_gone),
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


@pytest.mark.parametrize("name", list(MESSAGES))
def test_a_repaired_history_needs_no_repair_again(name: str) -> None:
    # The client's body is never mutated; what was sent, sent again, changes nothing.
    situation = MESSAGES[name].situation
    body = orjson.loads(orjson.dumps({"model": CLAUDE, "max_tokens": 64, **situation.broken}))
    before = copy.deepcopy(body)
    sent, kinds = _messages_round(body, situation.refusal if situation.strict else None)
    assert body == before
    assert set(situation.repairs) <= kinds
    again, more = _messages_round(orjson.loads(orjson.dumps(sent)))
    assert more == set() and again == sent


MESSAGES_VALID: dict[str, dict[str, Any]] = {
    "parallel results answered in another order than called": {"tools": TOOLS, "messages": [
        um("read a and b"), am(read("t1", "a"), read("t2", "b")),
        um(answer("t2", "B"), answer("t1", "A"))]},
    "a hook's reminder after the results, as its own string message": {
        "tools": TOOLS, "messages": [um("read a"), am(read("t1", "a")),
                                     um(answer("t1", "A")), um(REMINDER)]},
    "a step's words as a string message after its call, the result after both": {
        "tools": TOOLS, "messages": [
            um("read a"), am(read("t1", "a")),
            {"role": "assistant", "content": "Reading it now."}, um(answer("t1", "A"))]},
    "thinking on, the step's words as a string message between the call and its result": {
        "thinking": THINKING_ON, "tools": TOOLS, "messages": [
            um("read a"), am(think("plan"), read("t1", "a")),
            {"role": "assistant", "content": "Reading it now."}, um(answer("t1", "A"))]},
    "a web search and a client tool call in one turn, the client's answered": {
        "tools": [*TOOLS, *WEB_TOOLS], "messages": [
            um("weather, then read a"), am(server_use("srvtoolu_01"),
                                           search_result("srvtoolu_01"), text("Sunny."),
                                           read("t1", "a")), um(answer("t1", "A"))]},
    "a step's words as a string message before its call": {"tools": TOOLS, "messages": [
        um("read a"), {"role": "assistant", "content": "Let me check."},
        am(read("t1", "a")), um(answer("t1", "A"))]},
    "thinking on, a finished tool turn, a plain answer, then the user's words": {
        "thinking": THINKING_ON, "tools": TOOLS, "messages": [
            um("read a"), am(think("plan"), read("t1", "a")), um(answer("t1", "A")),
            am(text("It says A.")), um("thanks")]},
    "thinking off, signed and redacted thinking kept from when it was on": {
        "tools": TOOLS, "messages": [
            um("read a"), am(redacted(), think("plan"), read("t1", "a")),
            um(answer("t1", "A")), am(text("It says A.")), um("thanks")]},
    "a cited PDF under an hour-long system breakpoint": {
        "system": [text("You review contracts.", cache_control=CACHE_1H)],
        "messages": [um({"type": "document", "title": "a.pdf", "citations": {"enabled": True},
                         "source": {"type": "base64", "media_type": "application/pdf",
                                    "data": PDF}, "cache_control": CACHE},
                        text("summarize it"))]},
    # Claude Code's tool search answers with references to deferred tools.
    "a tool search answered with tool references, an empty system string": {
        "system": "", "tools": TOOLS, "messages": [
            um("find a tool to read files"), am(read("t1", "a")),
            um(answer("t1", [{"type": "tool_reference", "tool_name": "read_file"}]))]},
    "every sampling setting a client sets, on a valid history": {
        **SAMPLING, "tools": TOOLS, "messages": [um("hi"), am(text("hello")), um("again")]},
    "an error result given as text blocks beside a plain one": {
        "tools": TOOLS, "messages": [um("run both"), am(uses("t1"), uses("t2")), um(
            answer("t1", [text("exit 1"), text("permission denied")], is_error=True),
            answer("t2", [text("ok")], is_error=False))]},
}


@pytest.mark.parametrize("name", list(MESSAGES_VALID))
async def test_valid_messages_arrive_as_sent(gateway_factory: GatewayFactory,
                                             name: str) -> None:
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        await assert_arrives_as_sent(gw, f"{gw.root}/v1/messages",
                                     {"model": CLAUDE, "max_tokens": 64,
                                      **MESSAGES_VALID[name]}, ANTHROPIC_AUTH, fake)


async def test_interleaved_thinking_around_a_web_search_arrives_as_sent(
        gateway_factory: GatewayFactory) -> None:
    # With the interleaved-thinking beta the model thinks again after a server tool's
    # result, in the same assistant message: valid, so nothing is moved or reported.
    turn = am(think("search first"), server_use("srvtoolu_01"), search_result("srvtoolu_01"),
              think("sunny, say so"), text("Sunny."))
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        await assert_arrives_as_sent(
            gw, f"{gw.root}/v1/messages",
            {"model": CLAUDE, "max_tokens": 64, "thinking": THINKING_ON, "tools": WEB_TOOLS,
             "messages": [um("weather?"), turn, um("and tomorrow?")]},
            {**ANTHROPIC_AUTH, "anthropic-beta": "interleaved-thinking-2025-05-14"}, fake)
    assert fake.requests[-1].headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"


MESSAGES_REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    # Nothing says what a call on the user's side meant: the provider's words come back.
    "a tool_use written into the user's turn": (
        {"tools": TOOLS, "messages": [um("hi"), am(text("hello")), um(read("t1", "a"))]},
        "messages.2.content.0: tool_use blocks can only be in assistant messages"),
    "an OpenAI-only field (stream_options)": (
        {"stream_options": {"include_usage": True}, "messages": [um("hi")]},
        "stream_options: Extra inputs are not permitted"),
    "no max_tokens": ({"max_tokens": None, "messages": [um("hi")]},
                      "max_tokens: Field required"),
    "a tool_result without its tool_use_id": (
        {"tools": TOOLS, "messages": [um("read a"), am(read("t1", "a")), um(
            {"type": "tool_result", "content": "A"}, answer("t1", "A"))]},
        "messages.2.content.0.tool_use_id: Field required"),
    "a system list holding a bare string": (
        {"system": ["be brief"], "messages": [um("hi")]}, "system.0"),
    "content given as one block object, not a list": (
        {"messages": [{"role": "user", "content": text("hi")}]}, "messages.0.content"),
}


@pytest.mark.parametrize("name", list(MESSAGES_REFUSED))
async def test_what_no_repair_fixes_is_a_clear_client_error(gateway_factory: GatewayFactory,
                                                             name: str) -> None:
    given, words = MESSAGES_REFUSED[name]
    body = {k: v for k, v in {"model": CLAUDE, "max_tokens": 64, **given}.items()
            if v is not None}
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            with pytest.raises(anthropic.BadRequestError) as refused:
                await c.post("/v1/messages", body=body, cast_to=httpx.Response)
    assert refused.value.status_code == 400
    error = refused.value.body
    assert isinstance(error, dict) and error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert words in error["error"]["message"]
    assert "Traceback" not in refused.value.response.text
    assert len(fake.requests) <= 1  # refused once, never retried as if it could be repaired


async def test_a_streamed_request_no_repair_fixes_is_a_clear_error_before_any_event(
        gateway_factory: GatewayFactory) -> None:
    # The stream never opens: the SDK raises the 400 with the provider's words, as it
    # would talking to the API itself.
    given, words = MESSAGES_REFUSED["a tool_use written into the user's turn"]
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            with pytest.raises(anthropic.BadRequestError) as refused:
                async with c.messages.stream(model=CLAUDE, max_tokens=64,
                                             **given) as stream:
                    await stream.get_final_message()
    assert words in refused.value.message
    assert refused.value.response.headers["content-type"].startswith("application/json")
    assert len(fake.requests) == 1 and fake.requests[0].body["stream"] is True


# -- images whose bytes never arrived ------------------------------------------------------


async def test_a_failed_upload_is_left_out_with_a_note(gateway_factory: GatewayFactory) -> None:
    # anthropics/claude-code#12750: a screenshot whose upload failed is sent as empty base64
    # ("image cannot be empty") in a tool result every later turn repeats. The media rung
    # says in its place that an image was removed, and the session goes on.
    body = {"model": CLAUDE, "max_tokens": 64, "tools": TOOLS, "messages": [
        um("shoot"), am(uses("t1")), um(answer("t1", [text("the screen:"), image("")])),
        am(text("I could not see it.")), um("describe the layout then")]}
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with httpx.AsyncClient() as direct:
            refused = await direct.post(f"{fake.base_url}/v1/messages", json=body,
                                        headers=UPSTREAM_AUTH)
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            raw = await c.messages.with_raw_response.create(**body)  # type: ignore[call-overload]
        sent = fake.requests[-1].body
    assert refused.status_code == 400
    assert "image.source.base64: image cannot be empty" in refused.json()["error"]["message"]
    said = await raw.parse()
    assert said.content[0].type == "text" and "describe the layout" in said.content[0].text
    assert raw.headers["x-gateway-recovery"].startswith("media=")
    inner = sent["messages"][2]["content"][0]["content"]
    assert inner[0] == text("the screen:") and inner[1]["type"] == "text"
    assert inner[1]["text"].startswith("[image removed")
    assert sent["messages"][3:] == body["messages"][3:]


# -- a session switched to another model ---------------------------------------------------


async def test_thinking_another_model_signed_is_dropped_then_left_out_up_front(
        gateway_factory: GatewayFactory) -> None:
    # A Claude Code session moved from Opus to Sonnet mid-task (/model): the earlier turns'
    # thinking carries Opus's signatures, which Sonnet refuses ("Invalid `signature` in
    # `thinking` block"). The first turn, streamed, is retried without that thinking and
    # streams its answer; the next turn leaves it out before sending (one attempt).
    old = sign_thinking("plan", "claude-opus-4-1")
    turns = [um("read a"), am({**think("plan"), "signature": old}, read("t1", "a")),
             um(answer("t1", "A")), am(text("It says A.")), um("now summarize it")]
    async with FakeAnthropic(api_key="upstream-anthropic-key", model_bound=True) as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with httpx.AsyncClient() as direct:
            refused = await direct.post(f"{fake.base_url}/v1/messages", headers=UPSTREAM_AUTH,
                                        json={"model": CLAUDE, "max_tokens": 64,
                                              "tools": TOOLS, "messages": turns})
        fake.requests.clear()
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            async with c.messages.stream(model=CLAUDE, max_tokens=64, tools=TOOLS,  # type: ignore[arg-type]
                                         messages=turns) as stream:
                words = "".join([piece async for piece in stream.text_stream])
                headers = stream.response.headers
            first = len(fake.requests)
            raw = await c.messages.with_raw_response.create(
                model=CLAUDE, max_tokens=64, tools=TOOLS,  # type: ignore[arg-type]
                messages=[*turns, am(text("A is a letter.")), um("thanks")])
    assert "Invalid `signature` in `thinking` block" in refused.json()["error"]["message"]
    assert "summarize" in words
    assert headers["x-gateway-recovery"] == "strict"
    assert headers["x-gateway-repairs"] == "thinking_block_dropped=1"
    assert first == 2  # the client's history as sent, refused; then without the thinking
    assert fake.requests[0].body["messages"] == turns
    assert fake.requests[1].body["messages"][1]["content"] == [read("t1", "a")]
    assert len(fake.requests) == 3  # the next turn: sent once, already without it
    assert raw.headers["x-gateway-repairs"] == "thinking_block_dropped=1"
    assert "x-gateway-recovery" not in raw.headers
    assert fake.requests[2].body["messages"][1]["content"] == [read("t1", "a")]


# -- streaming a history repaired up front -------------------------------------------------


async def test_a_wrapped_screenshot_streamed_is_unwrapped_and_answered(
        gateway_factory: GatewayFactory) -> None:
    body = MESSAGES["a tool's screenshot as a data URL wrapped over lines"].situation.broken
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c, c.messages.stream(
                model=CLAUDE, max_tokens=64, **body) as stream:
            final = await stream.get_final_message()
            repairs = stream.response.headers["x-gateway-repairs"]
    assert len(fake.requests) == 1 and fake.requests[0].body["stream"] is True
    assert repairs == "image_data_url_unwrapped=1"
    assert final.content[0].type == "text" and "[images: 1]" in final.content[0].text
    the_screenshot_unwrapped(fake.requests[0].body)


# -- count_tokens --------------------------------------------------------------------------


async def test_count_tokens_counts_what_the_call_would_send(
        gateway_factory: GatewayFactory) -> None:
    # Claude Code counts a history before sending it: a history /v1/messages repairs is
    # counted as repaired (the wire's own finishing rules too), not refused by the count.
    broken = MESSAGES["thinking on, the latest tool turn's thinking cut before its "
                      "signature"].situation.broken
    emptied = MESSAGES["tool blocks in the history and an empty tools list"].situation.broken
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            thinking = await c.messages.with_raw_response.count_tokens(
                model=CLAUDE, **broken)
            declared = await c.messages.with_raw_response.count_tokens(
                model=CLAUDE, **emptied)
            valid = await c.messages.with_raw_response.count_tokens(
                model=CLAUDE, **MESSAGES_VALID["parallel results answered in another order "
                                               "than called"])
            await c.messages.create(model=CLAUDE, max_tokens=64, **broken)
    counted = [r.body for r in fake.requests[:3]]
    sent = fake.requests[3].body
    assert (await thinking.parse()).input_tokens > 0
    assert thinking.headers["x-gateway-repairs"] == "thinking_block_dropped=1,thinking_disabled=1"
    assert (await declared.parse()).input_tokens > 0
    assert declared.headers["x-gateway-repairs"] == "tools_declared=1"
    assert (await valid.parse()).input_tokens > 0 and "x-gateway-repairs" not in valid.headers
    assert [r.path for r in fake.requests] == ["/v1/messages/count_tokens"] * 3 + [
        "/v1/messages"]
    # The history counted is the history the call sends, thinking off as there.
    assert counted[0]["messages"] == sent["messages"]
    assert "thinking" not in counted[0] and "thinking" not in sent
    assert [t["name"] for t in counted[1]["tools"]] == ["read_file"]
    assert counted[2]["messages"] == MESSAGES_VALID[
        "parallel results answered in another order than called"]["messages"]
