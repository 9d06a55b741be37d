"""Held-out Responses situations, sixth set: ``/v1/responses`` histories as agents write
them in the field, sent through the official ``openai`` SDK to a gateway in front of the
strict native fake (tests/fakes/responses_server.py), which refuses each broken one with the
API's own wording first.

- calls saved without their value: the Vercel AI SDK leaving an undefined tool input out
  ("Missing required parameter: 'input[1].arguments'"), an interrupted stream saving
  ``arguments`` / a custom call's ``input`` as null;
- outputs of the wrong kind or shape: a ``custom_tool_call_output`` for a function call, a
  shell tool's output for a local shell call, a tool output of chat ``text`` parts, a
  computer call's screenshot as an ``input_image`` part or a data URL;
- a stale output before its call beside the real one after it; a store=false session
  whose reasoning and call were kept as references only;
- the OpenAI Agents SDK after a LiteLLM model: every item id ``__fake_id__``; a client
  numbering its messages ``msg_<n>`` where the API's own ``msg_4`` sits (two different
  assistant messages under one id are not copies);
- ``previous_response_id`` with the whole history sent again (the user's words too);
- inputs of which nothing can be sent (a lone output, lone reasoning): a clear 400 that
  says why, not the provider's "empty array";
- what no repair can make sense of: a clear 400 in the Responses error shape;
- streamed repairs (up front and on the strict rung): the events in order, the completed
  response carrying the output, and a continuation of the streamed answer;
- odd but valid inputs (a bare string with every current field and an unknown one, Codex's
  adjacent user messages, a store=true reasoning reference before its call, a stored
  prompt and no input at all, outputs after the user's next words): byte for byte,
  unreported.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.referee import Referee
from gateway.server.wire_routes import RESPONSE_STATE
from gateway.wires.responses_rules import repair_input
from tests.conftest import GatewayFactory
from tests.fakes.responses_server import FakeResponses
from tests.wires.test_wire_heldout import CUSTOM, PNG, ccall
from tests.wires.test_wire_heldout_3 import shell, shell_v2_out
from tests.wires.test_wire_situations import (
    FN,
    GPT,
    assert_arrives_as_sent,
    fake_responses,
    fcall,
    fout,
    native_config,
    rs,
    said,
    u,
)

__all__ = ["fake_responses"]  # the fixture, shared with test_wire_situations

UPSTREAM = {"authorization": "Bearer upstream-openai-key"}
CLIENT = {"authorization": "Bearer client-key"}
FAKE_ID = "__fake_id__"  # the Agents SDK's id for items a non-OpenAI model made


@dataclass
class Case:
    """A broken input, the repairs the gateway must name, what the provider says to it
    (None: it takes it, the repair is the spec's own), and what must hold of what the
    upstream finally accepted."""

    body: dict[str, Any]
    repairs: tuple[str, ...]
    refusal: str | None
    check: Callable[[list[Any]], None] | None = None
    strict: bool = False
    prepare: Callable[[FakeResponses], None] | None = None


def types(items: list[Any]) -> list[str]:
    return [i.get("type", "message") for i in items]


def out(call_id: str, kind: str = "function_call_output", value: Any = "contents",
        ) -> dict[str, Any]:
    return {"type": kind, "call_id": call_id, "output": value}


def ref(item_id: str) -> dict[str, Any]:
    return {"type": "item_reference", "id": item_id}


def without(item: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != key}


# -- checks on what the upstream accepted ------------------------------------------------

def called_without_arguments(items: list[Any]) -> None:
    assert items[1] == {**fcall("call_a", "fc_a"), "arguments": "{}"}
    assert items[2] == fout("call_a")


def custom_call_without_input(items: list[Any]) -> None:
    assert items[1] == {**ccall("call_c", "ctc_c"), "input": ""}


def custom_output_as_function_output(items: list[Any]) -> None:
    assert items[2] == out("call_p", value="applied")


def shell_runs_as_local_text(items: list[Any]) -> None:
    assert items[2] == out("call_ls", "local_shell_call_output", "3 passed")


def chat_parts_as_input_text(items: list[Any]) -> None:
    assert items[2]["output"] == [{"type": "input_text", "text": "line 1"},
                                  {"type": "input_text", "text": "line 2"}]


def the_fresh_output_only(items: list[Any]) -> None:
    assert types(items) == ["message", "function_call", "function_call_output", "message"]
    assert items[2]["output"] == "fresh"


def references_and_their_output_gone(items: list[Any]) -> None:
    assert items == [u("read a.py"), u("go on")]


SCREEN = f"data:image/png;base64,{PNG}"
COMPUTER = [{"type": "computer_use_preview", "display_width": 1024, "display_height": 768,
             "environment": "browser"}]
CLICK = {"type": "computer_call", "id": "cu_6", "call_id": "call_cu6", "status": "completed",
         "action": {"type": "click", "button": "left", "x": 10, "y": 20},
         "pending_safety_checks": []}


def the_screenshot_kept(items: list[Any]) -> None:
    assert items[1] == CLICK
    assert items[2] == {"type": "computer_call_output", "call_id": "call_cu6",
                        "output": {"type": "computer_screenshot", "image_url": SCREEN}}


def both_messages_kept_without_ids(items: list[Any]) -> None:
    assert not any("id" in i for i in items)
    assert [i["content"][0]["text"] for i in items if i.get("role") == "assistant"] \
        == ["looking", "done"]
    assert types(items) == ["message", "message", "function_call", "function_call_output",
                            "message", "message"]


def both_answers_kept(items: list[Any]) -> None:
    assert [i["content"][0]["text"] for i in items if i.get("role") == "assistant"] \
        == ["hello", "done"]
    assert items[1]["id"] == "msg_4" and "id" not in items[5]


def blank_turn_gone(items: list[Any]) -> None:
    assert items == [u("hi"), said("hello"), u("go on")]


RESPONSES: dict[str, Case] = {
    "Vercel AI SDK: a tool call whose input was undefined (no arguments field)": Case(
        {"input": [u("read"), without(fcall("call_a", "fc_a"), "arguments"),
                   fout("call_a"), u("go on")], "tools": FN},
        ("tool_value_serialized",), "Missing required parameter: 'input[1].arguments'.",
        called_without_arguments),
    "an interrupted stream saved the call with arguments null": Case(
        {"input": [u("read"), {**fcall("call_a", "fc_a"), "arguments": None},
                   fout("call_a"), u("go on")], "tools": FN},
        ("tool_value_serialized",),
        "'input[1].arguments': expected a string, but got null instead",
        called_without_arguments),
    "a custom tool call saved with input null": Case(
        {"input": [u("patch"), {**ccall("call_c", "ctc_c"), "input": None},
                   out("call_c", "custom_tool_call_output"), u("go on")], "tools": CUSTOM},
        ("tool_value_serialized",), "'input[1].input': expected a string, but got null",
        custom_call_without_input),
    "Codex: a function call answered by a custom_tool_call_output (tool turned function)": Case(
        {"input": [u("patch a.py"), fcall("call_p", "fc_p"),
                   out("call_p", "custom_tool_call_output", "applied"), u("go on")],
         "tools": FN},
        ("tool_output_retyped",),
        "No tool call found for custom tool call output with call_id call_p.",
        custom_output_as_function_output),
    "a local shell call answered with the shell tool's output item": Case(
        {"input": [u("ls"), shell("call_ls"), shell_v2_out("call_ls"), u("go on")]},
        ("tool_output_retyped",), "No tool call found for shell call output",
        shell_runs_as_local_text),
    "LangChain: a tool output of chat text content blocks": Case(
        {"input": [u("read"), fcall("call_t", "fc_t"),
                   out("call_t", value=[{"type": "text", "text": "line 1"},
                                        {"type": "text", "text": "line 2"}]),
                   u("go on")], "tools": FN},
        ("assistant_content_retyped",), "Invalid value: 'text'. Supported values are: "
        "'input_text', 'input_image', and 'input_file'.", chat_parts_as_input_text),
    "a stale output before its call, the real one after it": Case(
        {"input": [u("read"), out("call_s", value="stale"), fcall("call_s", "fc_s"),
                   out("call_s", value="fresh"), u("go on")], "tools": FN},
        ("orphan_tool_result_dropped",),
        "No tool call found for function call output with call_id call_s.",
        the_fresh_output_only),
    "Vercel AI SDK, store=false: reasoning and call kept as references only": Case(
        {"input": [u("read a.py"), ref("rs_v6"), ref("fc_v6"), fout("call_v6"),
                   u("go on")], "tools": FN, "store": False},
        ("item_reference_dropped", "orphan_tool_result_dropped"),
        "Items are not persisted when `store` is set to false",
        references_and_their_output_gone),
    "Agents SDK after a LiteLLM model: every item id __fake_id__": Case(
        {"input": [u("read"), said("looking", FAKE_ID), fcall("call_f", FAKE_ID),
                   fout("call_f"), said("done", FAKE_ID), u("go on")], "tools": FN},
        ("item_id_removed",),
        "Invalid 'input[1].id': '__fake_id__'. Expected an ID that begins with 'msg'.",
        both_messages_kept_without_ids),
    "a computer-use loop answering with its screenshot as an input_image part": Case(
        {"input": [u("open the page"), CLICK,
                   out("call_cu6", "computer_call_output",
                       {"type": "input_image", "image_url": SCREEN, "detail": "auto"}),
                   u("go on")], "tools": COMPUTER, "truncation": "auto"},
        ("tool_output_retyped",), "expected a computer call output, but got an invalid",
        the_screenshot_kept),
    "a computer-use loop answering with the screenshot's data URL as text": Case(
        {"input": [u("open the page"), CLICK, out("call_cu6", "computer_call_output", SCREEN),
                   u("go on")], "tools": COMPUTER, "truncation": "auto"},
        ("tool_output_retyped",), "expected a computer call output, but got a string",
        the_screenshot_kept),
    "pi: a message numbered msg_4 by the client where the API's own msg_4 sits": Case(
        {"input": [u("hi"), said("hello", "msg_4"), u("read"), fcall("call_m", "fc_m"),
                   fout("call_m"), said("done", "msg_4"), u("go on")], "tools": FN},
        ("item_id_removed",), "Duplicate item found with id msg_4", both_answers_kept),
    "Codex: Enter on an empty prompt (a whitespace-only user turn)": Case(
        {"input": [u("hi"), said("hello"), u("  \n"), u("go on")]},
        ("empty_content_dropped",), None, blank_turn_gone),
}


async def run_case(gateway_factory: GatewayFactory, fake: FakeResponses, case: Case,
                   ) -> None:
    """The provider's own words for the broken input, then the same input through the
    gateway: answered, its repairs named, what the upstream accepted checked (and needing
    no repair again)."""
    if case.prepare is not None:
        case.prepare(fake)
    gw = await gateway_factory(native_config(fake.base_url, "http://127.0.0.1:9"))
    body = {"model": GPT, **case.body}
    async with httpx.AsyncClient() as direct:
        said_to_it = await direct.post(f"{fake.base_url}/v1/responses", json=body,
                                       headers=UPSTREAM)
    if case.refusal is None:
        assert said_to_it.status_code == 200
    else:
        assert said_to_it.status_code in (400, 404), said_to_it.text
        assert case.refusal in said_to_it.json()["error"]["message"]
    before = len(fake.requests)
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        raw = await c.responses.with_raw_response.create(**body)
    assert raw.parse().output_text
    for kind in case.repairs:
        assert kind in raw.headers["x-gateway-repairs"]
    assert len(fake.requests[before:]) == (2 if case.strict else 1)
    accepted = fake.requests[-1].body["input"]
    if case.check is not None:
        case.check(accepted)
    assert repair_input(accepted, store=case.body.get("store") is not False) \
        == (accepted, ())


@pytest.mark.parametrize("name", list(RESPONSES))
async def test_responses_heldout_6(gateway_factory: GatewayFactory,
                                   fake_responses: FakeResponses, name: str) -> None:
    await run_case(gateway_factory, fake_responses, RESPONSES[name])


# -- previous_response_id with the whole history sent again --------------------------------

async def test_a_continuation_resending_the_whole_history_sends_only_what_is_new(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # A custom loop that keeps its own history and also passes previous_response_id: the
    # stored items (reasoning, call: "Duplicate item found") and the user's first words
    # (no id, but the start of the stored conversation) are held upstream already.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        first = await c.responses.create(model=GPT, tools=FN,  # type: ignore[arg-type]
                                         input=[u("read a.py TOOL")],  # type: ignore[list-item]
                                         reasoning={"effort": "low"})
        made = [item.model_dump(exclude_none=True) for item in first.output]
        assert types(made) == ["reasoning", "function_call"]
        output = out(made[1]["call_id"], value="print(1)")
        history = [u("read a.py TOOL"), *made, output]
        async with httpx.AsyncClient() as direct:
            refused = await direct.post(
                f"{fake_responses.base_url}/v1/responses", headers=UPSTREAM,
                json={"model": GPT, "tools": FN, "previous_response_id": first.id,
                      "reasoning": {"effort": "low"}, "input": history})
        assert "Duplicate item found" in refused.json()["error"]["message"]
        raw = await c.responses.with_raw_response.create(
            model=GPT, tools=FN, previous_response_id=first.id,  # type: ignore[arg-type]
            reasoning={"effort": "low"}, input=history)  # type: ignore[arg-type]
        assert raw.parse().output_text == "tool results: print(1)"
        assert raw.headers["x-gateway-repairs"] == "duplicate_item_dropped=3"
        assert fake_responses.requests[-1].body["input"] == [output]
        # a third turn resending all of it again: only the user's new words go
        second = raw.parse()
        history += [item.model_dump(exclude_none=True) for item in second.output]
        third = await c.responses.with_raw_response.create(
            model=GPT, tools=FN, previous_response_id=second.id,  # type: ignore[arg-type]
            reasoning={"effort": "low"}, input=[*history, u("thanks")])  # type: ignore[arg-type]
        assert third.parse().output_text == "you said: thanks"
        assert fake_responses.requests[-1].body["input"] == [u("thanks")]
        # the user's same words typed again, alone, are a new turn: sent as they are
        again = await c.responses.with_raw_response.create(
            model=GPT, previous_response_id=third.parse().id,
            input=[u("read a.py TOOL")])  # type: ignore[list-item]
    assert "x-gateway-repairs" not in again.headers
    assert fake_responses.requests[-1].body["input"] == [u("read a.py TOOL")]


# -- nothing left to send: a clear 400 that says why ---------------------------------------

@pytest.mark.parametrize("given", [
    pytest.param([fout("call_trimmed")], id="a lone output whose call was trimmed"),
    pytest.param([rs("rs_lone")], id="a lone reasoning item"),
    pytest.param([rs("rs_lone", secret=None), out("call_x", "custom_tool_call_output")],
                 id="reasoning by id and an orphan custom output"),
])
async def test_an_input_of_nothing_sendable_is_a_clear_400(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses,
        given: list[Any]) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model=GPT, tools=FN,  # type: ignore[arg-type]
                                     input=given)  # type: ignore[arg-type]
    error = refused.value.body
    assert isinstance(error, dict) and error["type"] == "invalid_request_error"
    assert error["param"] == "input"
    assert "none of its" in error["message"] and "empty array" not in error["message"]
    assert "_dropped=" in error["message"]  # what was left out, by repair
    assert not fake_responses.requests  # nothing went upstream


async def test_an_empty_input_gets_the_providers_own_words(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model=GPT, input=[])
    error = refused.value.body
    assert isinstance(error, dict) and "Invalid 'input': empty array" in error["message"]


# -- what no repair can make sense of: a clear 4xx in the Responses error shape -------------

PATCH_CALL = {"type": "apply_patch_call", "id": "apc_6", "call_id": "call_ap",
              "status": "completed",
              "operation": {"type": "update_file", "path": "a.py", "diff": "@@ -1 +1 @@"}}

# The provider's words reach the client (after the gateway tried what it could).
PROVIDER_REFUSES: dict[str, tuple[dict[str, Any], str]] = {
    "Codex: a client-only ghost_snapshot item left in the input": (
        {"input": [u("hi"), {"type": "ghost_snapshot", "ghost_commit": {"id": "3f2a"}},
                   u("go on")]}, "Invalid value: 'ghost_snapshot'"),
    "an apply_patch output that does not say whether the patch applied": (
        {"input": [u("patch"), PATCH_CALL,
                   {"type": "apply_patch_call_output", "call_id": "call_ap", "output": "ok"},
                   u("go on")], "tools": [{"type": "apply_patch"}]},
        "Missing required parameter: 'input[2].status'."),
    "a Gemini history with the model's turn in role 'model'": (
        {"input": [u("hi"), {"role": "model", "content": "hello"}, u("go on")]},
        "Invalid value: 'model'. Supported values are: 'assistant', 'system', 'developer', "
        "and 'user'."),
}


@pytest.mark.parametrize("name", list(PROVIDER_REFUSES))
async def test_what_cannot_be_repaired_is_the_providers_400(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses, name: str) -> None:
    body, words = PROVIDER_REFUSES[name]
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model=GPT, **body)
    error = refused.value.body
    assert isinstance(error, dict) and error["type"] == "invalid_request_error"
    assert words in error["message"]
    assert "upstream-openai-key" not in refused.value.response.text
    # the input went as sent (nothing in it the gateway could have repaired)
    assert fake_responses.requests[0].body["input"] == body["input"]


# The gateway's own refusal, before any upstream call (the body is not a Responses body).
GATEWAY_REFUSES: dict[str, tuple[dict[str, Any], str, str]] = {
    "input given as one message object, not a list": (
        {"input": {"role": "user", "content": "hi"}}, "input",
        "Invalid type for 'input'"),
    "a message whose content is one part object, not a list": (
        {"input": [{"role": "user", "content": {"type": "input_text", "text": "hi"}}]},
        "input[0].content", "Invalid type for 'input[0].content'"),
    "LangChain: tools in the Chat Completions shape": (
        {"input": "hi", "tools": [{"type": "function", "function": {
            "name": "read_file", "parameters": {"type": "object", "properties": {}}}}]},
        "tools[0].name", "Missing required parameter: 'tools[0].name'."),
}


@pytest.mark.parametrize("name", list(GATEWAY_REFUSES))
async def test_a_body_that_is_not_a_responses_body_is_a_clear_400(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses, name: str) -> None:
    body, param, words = GATEWAY_REFUSES[name]
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with httpx.AsyncClient() as c:
        answer = await c.post(f"{gw.base_url}/responses", headers=CLIENT,
                              json={"model": GPT, **body})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert words in error["message"]
    assert not fake_responses.requests


# -- streamed repairs --------------------------------------------------------------------

async def stream_events(gw_url: str, body: dict[str, Any],
                        ) -> tuple[httpx.Headers, list[Any]]:
    async with openai.AsyncOpenAI(base_url=gw_url, api_key="client-key",
                                  max_retries=0) as c, \
            c.responses.with_streaming_response.create(stream=True, **body) as raw:
        events = [event async for event in await raw.parse()]
        return raw.headers, events


def assert_one_clean_stream(events: list[Any]) -> Any:
    """The events of one response, in order; the completed response."""
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    assert [e.type for e in events].count("response.created") == 1
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    done = [e.item.id for e in events if e.type == "response.output_item.done"]
    completed = events[-1].response
    assert [item.id for item in completed.output] == done
    return completed


async def test_a_repaired_stream_ends_in_a_call_that_is_continued(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # The Vercel AI SDK streams every step: a history whose call lost its arguments is
    # repaired up front; the model's next call streams back, and its output continues the
    # streamed response by id.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    body = {"model": GPT, "tools": FN,
            "input": [u("read"), without(fcall("call_a", "fc_a"), "arguments"),
                      fout("call_a"), u("now b.py TOOL")]}
    headers, events = await stream_events(gw.base_url, body)
    assert headers["x-gateway-repairs"] == "tool_value_serialized=1"
    completed = assert_one_clean_stream(events)
    call = completed.output[0]
    assert call.type == "function_call"
    arguments = "".join(e.delta for e in events
                        if e.type == "response.function_call_arguments.delta")
    assert arguments == call.arguments
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        answer = await c.responses.create(
            model=GPT, tools=FN, previous_response_id=completed.id,  # type: ignore[arg-type]
            input=[out(call.call_id, value="b!")])  # type: ignore[list-item]
    assert answer.output_text == "tool results: contents; b!"


async def test_a_stream_repaired_on_the_strict_rung_is_one_clean_stream(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # Encrypted reasoning of another organization is refused ("could not be verified")
    # before any byte went out: the client sees one stream, of the second attempt.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    body = {"model": GPT, "tools": FN,
            "input": [u("read"), rs("rs_other", "enc-other-org"), fcall("call_1", "fc_1"),
                      fout("call_1"), u("go on")]}
    headers, events = await stream_events(gw.base_url, body)
    assert headers["x-gateway-recovery"] == "strict"
    assert "encrypted_item_dropped" in headers["x-gateway-repairs"]
    completed = assert_one_clean_stream(events)
    assert completed.output_text == "you said: go on"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == completed.output_text
    assert len(fake_responses.requests) == 2
    assert "reasoning" not in types(fake_responses.requests[-1].body["input"])


# -- odd but valid: byte for byte, unreported ------------------------------------------------

def stored(*items: dict[str, Any]) -> Callable[[FakeResponses], None]:
    def prepare(fake: FakeResponses) -> None:
        fake.persisted.update((i["id"], i) for i in items)
    return prepare


RESPONSES_VALID: dict[str, tuple[dict[str, Any], Callable[[FakeResponses], None] | None]] = {
    "a bare string input with every current field and one the gateway does not know": ({
        "input": "hi", "instructions": "Be brief.", "truncation": "auto",
        "include": ["reasoning.encrypted_content", "message.output_text.logprobs"],
        "store": False, "service_tier": "flex", "text": {"verbosity": "low"},
        "reasoning": {"effort": "minimal", "summary": "auto"}, "max_tool_calls": 3,
        "prompt_cache_key": "session-6", "safety_identifier": "user-6", "top_logprobs": 2,
        "metadata": {"run": "6"}, "a_field_of_next_year": {"on": True}}, None),
    "Codex: developer notes, two user messages in a row, reasoning whose content is null": ({
        "input": [{"role": "developer", "content": "Sandbox: read-only."},
                  u("<environment_context>cwd: /repo</environment_context>"),
                  u("fix the failing test"),
                  {**rs("rs_cx6", "gAAAA-own-cx6"), "content": None},
                  fcall("call_cx6", "fc_cx6"), fout("call_cx6"), u("go on")],
        "tools": FN, "store": False, "include": ["reasoning.encrypted_content"],
        "parallel_tool_calls": False}, None),
    "Vercel AI SDK, store=true: reasoning by reference before its call in full": ({
        "input": [u("read a.py"), ref("rs_vr6"), fcall("call_vr6", "fc_vr6"),
                  fout("call_vr6"), u("go on")], "tools": FN},
        stored(rs("rs_vr6", "gAAAA-own-vr6"))),
    "store=true: reasoning in full before its call by reference": ({
        "input": [u("read a.py"), rs("rs_vr7", "gAAAA-own-vr7"), ref("fc_vr7"),
                  fout("call_vr7"), u("go on")], "tools": FN},
        stored(fcall("call_vr7", "fc_vr7"))),
    "a call without parameters (arguments '') and a tool that printed nothing": ({
        "input": [u("what time is it"), {**fcall("call_t6", "fc_t6"), "arguments": ""},
                  out("call_t6", value=""), u("go on")], "tools": FN}, None),
    "a stored prompt template standing for the input (no input field at all)": ({
        "prompt": {"id": "pmpt_6", "version": "2", "variables": {"city": "Paris"}}}, None),
    "parallel calls, one output after the user's next words (paired by call id)": ({
        "input": [u("read both"), fcall("call_p1", "fc_p1"), fcall("call_p2", "fc_p2"),
                  fout("call_p1"), u("hurry up"), fout("call_p2")], "tools": FN}, None),
}


@pytest.mark.parametrize("name", list(RESPONSES_VALID))
async def test_valid_responses_input_arrives_as_sent(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses, name: str) -> None:
    body, prepare = RESPONSES_VALID[name]
    if prepare is not None:
        prepare(fake_responses)
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    await assert_arrives_as_sent(gw, f"{gw.base_url}/responses", {"model": GPT, **body},
                                 CLIENT, fake_responses)
    assert orjson.loads(fake_responses.requests[-1].raw).get("input") == body.get("input")


# -- the same broken histories to a model that speaks only Chat Completions ----------------

@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict") as ref:
        yield ref


@pytest.mark.parametrize("name", list(RESPONSES))
async def test_a_chat_only_upstream_answers_the_repaired_history(
        gateway_factory: GatewayFactory, referee: Referee, name: str) -> None:
    gw = await gateway_factory({
        "model_list": [{"model_name": GPT, "litellm_params": {
            "model": "hosted_vllm/referee", "api_base": referee.base_url, "api_key": "k"}}],
        "gateway": {"api_keys": ["client-key"]}})
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        answer = await c.responses.create(model=GPT, **RESPONSES[name].body)
    assert answer.status == "completed"


async def test_a_resent_history_is_sent_once_to_a_chat_only_upstream_too(
        gateway_factory: GatewayFactory, referee: Referee) -> None:
    # The same resend through the translation: the gateway expands previous_response_id
    # into the whole conversation itself, so what the client sent again must go.
    gw = await gateway_factory({
        "model_list": [{"model_name": GPT, "litellm_params": {
            "model": "hosted_vllm/referee", "api_base": referee.base_url, "api_key": "k"}}],
        "gateway": {"api_keys": ["client-key"]}})
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        first = await c.responses.create(model=GPT, tools=FN,  # type: ignore[arg-type]
                                         input=[u("read notes.txt with the TOOL")])  # type: ignore[list-item]
        made = [item.model_dump(exclude_none=True) for item in first.output]
        assert types(made) == ["function_call"]
        history = [u("read notes.txt with the TOOL"), *made,
                   out(made[0]["call_id"], value="the file says 42")]
        await gw.app[RESPONSE_STATE].flush()
        raw = await c.responses.with_raw_response.create(
            model=GPT, tools=FN, previous_response_id=first.id,  # type: ignore[arg-type]
            input=history)
    assert raw.parse().status == "completed"
    assert "duplicate_item_dropped" in raw.headers["x-gateway-repairs"]
    sent = referee.requests[-1].json()["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[2]["content"] == "the file says 42"


@pytest.mark.parametrize("via_gateway", [True, False], ids=["kept", "never-seen"])
async def test_vercel_references_to_the_continued_responses_items_go(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses,
        via_gateway: bool) -> None:
    # vercel/ai#15492: with previousResponseId and store: true, the AI SDK sends the
    # response's reasoning and call again as item_references ("Duplicate item found with
    # id rs_..."). A response the gateway kept is cleared up front; one it never saw, on
    # the provider's refusal.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    body = {"model": GPT, "tools": FN, "reasoning": {"effort": "low"},
            "input": [u("read a.py TOOL")]}
    async with httpx.AsyncClient() as direct:
        url = f"{gw.base_url}/responses" if via_gateway else \
            f"{fake_responses.base_url}/v1/responses"
        first = (await direct.post(url, json=body,
                                   headers=CLIENT if via_gateway else UPSTREAM)).json()
    reasoning, call = first["output"]
    output = out(call["call_id"], value="print(1)")
    new_input = [ref(reasoning["id"]), ref(call["id"]), output]
    before = len(fake_responses.requests)
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        raw = await c.responses.with_raw_response.create(
            model=GPT, tools=FN, reasoning={"effort": "low"},  # type: ignore[arg-type]
            previous_response_id=first["id"], input=new_input)  # type: ignore[arg-type]
    assert raw.parse().output_text == "tool results: print(1)"
    assert "duplicate_item_dropped" in raw.headers["x-gateway-repairs"]
    sent = fake_responses.requests[before:]
    assert len(sent) == (1 if via_gateway else 2)
    if not via_gateway:
        assert raw.headers["x-gateway-recovery"] == "strict"
    assert sent[-1].body["input"] == [output]
