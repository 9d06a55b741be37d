"""Held-out Responses situations, fifth set: broken ``/v1/responses`` histories that agents
and frameworks send and the earlier sets do not.

- reasoning carrying ``reasoning_text`` content (a gpt-oss / vLLM session, a translated
  Claude thinking block): "array too long. Expected an array with maximum length 0";
- a reasoning ``summary`` sent as its text, or with parts typed ``output_text``;
- messages with an empty ``content`` list, chat-style parts (``text``, ``image_url``,
  ``file``) and an ``input_image`` whose ``image_url`` is an object;
- a chat-style assistant turn with ``tool_calls`` (LangChain / Vercel messages handed to
  ``responses.create``);
- tool outputs as a bare number, an empty part list or one part object; shell outputs in
  the other shell tool's form;
- an ``item_reference`` repeating an item sent in full, or sent twice;
- message and call ids replayed under ``store: false`` to an organization that refuses
  them;
- what no repair can make sense of: a call without its name, ``previous_response_id``
  together with ``conversation`` (a clear 400 in the Responses error shape).

Each broken history is refused by the native fake (tests/fakes/responses_server.py) with
the API's wording, then sent through the gateway with the official ``openai`` SDK: the
answer is a 200 whose ``x-gateway-repairs`` names the repair, and the history the upstream
accepted is checked where the repair's meaning matters, and needs no repair again. The
same broken histories are answered by a model that speaks only Chat Completions (the
translated path). Valid but unusual histories reach the upstream byte for byte, unreported.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

import httpx
import openai
import pytest

from gateway.projection.render import EMPTY_TOOL_OUTPUT_TEXT
from gateway.referee import Referee
from gateway.wires.responses_rules import repair_input
from tests.conftest import GatewayFactory
from tests.fakes.responses_server import FakeResponses
from tests.wires.test_wire_heldout import CUSTOM, PNG, ccall
from tests.wires.test_wire_heldout_3 import shell, shell_v2, shell_v2_out
from tests.wires.test_wire_situations import (
    FN,
    GPT,
    Situation,
    assert_arrives_as_sent,
    fake_responses,
    fcall,
    fout,
    native_config,
    rs,
    run_responses_case,
    said,
    u,
)

__all__ = ["fake_responses"]  # the fixture, shared with test_wire_situations

OPENAI_AUTH = {"authorization": "Bearer client-key"}
IMAGE = f"data:image/png;base64,{PNG}"


@dataclass
class Case:
    """A situation, what the fake must hold first, and what must hold of what the upstream
    finally accepted."""

    situation: Situation
    check: Callable[[list[Any]], None] | None = None
    prepare: Callable[[FakeResponses], None] | None = None


def types(items: list[Any]) -> list[str]:
    return [i.get("type", "message") for i in items]


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": list(parts)}


def ref(item_id: str) -> dict[str, Any]:
    return {"type": "item_reference", "id": item_id}


def thought_text(secret: str | None) -> dict[str, Any]:
    return {"type": "reasoning", "id": "rs_9a5d", "summary": [], "encrypted_content": secret,
            "content": [{"type": "reasoning_text", "text": "We need to read a.py first."}]}


def stored(*items: dict[str, Any]) -> Callable[[FakeResponses], None]:
    def prepare(fake: FakeResponses) -> None:
        fake.persisted.update((i["id"], i) for i in items)
    return prepare


def refusing_stateless_ids(fake: FakeResponses) -> None:
    fake.stateless_ids = True


# -- checks on what the upstream accepted ------------------------------------------------

def no_reasoning(items: list[Any]) -> None:
    assert "reasoning" not in types(items)
    assert types(items) == ["message", "function_call", "function_call_output", "message"]


def reasoning_kept_without_its_text(items: list[Any]) -> None:
    assert items[1] == {"type": "reasoning", "id": "rs_9a5d", "summary": [],
                        "encrypted_content": "gAAAA-own-9a5d"}
    assert items[2] == fcall("call_1")  # (the strict rung sends the history stateless)


def empty_message_gone(items: list[Any]) -> None:
    assert all(i.get("content") not in ([], None) for i in items
               if i.get("type", "message") == "message")


def number_as_text(items: list[Any]) -> None:
    assert items[2] == {"type": "function_call_output", "call_id": "call_n", "output": "42"}


def empty_list_says_empty(items: list[Any]) -> None:
    assert items[2]["output"] == EMPTY_TOOL_OUTPUT_TEXT


def one_part_as_a_list(items: list[Any]) -> None:
    assert items[2]["output"] == [{"type": "input_image", "image_url": IMAGE}]


def chat_parts_typed(items: list[Any]) -> None:
    assert items[0]["content"] == [{"type": "input_text", "text": "read a.py"}]
    assert items[1]["content"] == [{"type": "output_text", "text": "done", "annotations": []}]


def chat_image_typed(items: list[Any]) -> None:
    assert items[0]["content"][1] == {"type": "input_image", "image_url": IMAGE,
                                      "detail": "low"}


def chat_file_typed(items: list[Any]) -> None:
    assert items[0]["content"][1] == {"type": "input_file", "filename": "a.pdf",
                                      "file_data": "data:application/pdf;base64,JVBERi0x"}


def image_url_flattened(items: list[Any]) -> None:
    assert items[0]["content"][1] == {"type": "input_image", "image_url": IMAGE,
                                      "detail": "high"}


def summary_text_kept(items: list[Any]) -> None:
    assert items[1]["summary"] == [{"type": "summary_text", "text": "**Planning** the read"}]


def summary_parts_typed(items: list[Any]) -> None:
    assert items[1]["summary"] == [{"type": "summary_text", "text": "plan"}]


def chat_turn_as_items(items: list[Any]) -> None:
    assert items[1:3] == [
        {"role": "assistant", "content": "reading it"},
        {"type": "function_call", "call_id": "call_lc", "name": "read_file",
         "arguments": '{"path": "a.py"}'}]
    assert items[3] == {"type": "function_call_output", "call_id": "call_lc", "output": "42"}
    assert types(items) == ["message", "message", "function_call", "function_call_output",
                            "message"]


def shell_text_as_a_run(items: list[Any]) -> None:
    assert items[2] == {"type": "shell_call_output", "call_id": "call_sh5", "output": [
        {"stdout": "3 passed", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}


def runs_as_local_text(items: list[Any]) -> None:
    assert items[2] == {"type": "local_shell_call_output", "call_id": "call_ls5",
                        "output": "3 passed"}


def reference_dropped_full_item_kept(items: list[Any]) -> None:
    assert types(items) == ["message", "message", "message", "message"]
    assert items[1] == said("hello", "msg_ref1")


def one_reference_left(items: list[Any]) -> None:
    assert types(items).count("item_reference") == 1


def ids_gone(items: list[Any]) -> None:
    assert not any("id" in i for i in items)
    assert types(items) == ["message", "function_call", "function_call_output", "message",
                            "message"]


RESPONSES: dict[str, Case] = {
    "reasoning text of an open-weight model (gpt-oss via vLLM) replayed to OpenAI": Case(
        Situation({"input": [u("read"), thought_text(None), fcall("call_1", "fc_1"),
                             fout("call_1"), u("go on")], "tools": FN},
                  ("reasoning_item_dropped",),
                  "array too long. Expected an array with maximum length 0", strict=True),
        no_reasoning),
    "own encrypted reasoning that also carries its reasoning_text": Case(
        Situation({"input": [u("read"), thought_text("gAAAA-own-9a5d"),
                             fcall("call_1", "fc_1"), fout("call_1"), u("go on")],
                   "tools": FN},
                  ("reasoning_content_dropped",),
                  "array too long. Expected an array with maximum length 0", strict=True),
        reasoning_kept_without_its_text),
    "a user message whose only part was filtered out (content [])": Case(
        Situation({"input": [u("hi"), said("hello"), user(), u("are you there?")]},
                  ("empty_content_dropped",), "'input[2].content': empty array"),
        empty_message_gone),
    "an assistant message with no parts after a tool output": Case(
        Situation({"input": [u("read"), fcall("call_e", "fc_e"), fout("call_e"),
                             {"type": "message", "role": "assistant", "content": []},
                             u("go on")], "tools": FN},
                  ("empty_content_dropped",), "'input[3].content': empty array"),
        empty_message_gone),
    "an assistant turn with null content (its tool calls lost on the way)": Case(
        Situation({"input": [u("hi"), {"role": "assistant", "content": None},
                             u("are you there?")]},
                  ("empty_content_dropped",), "but got null instead"), empty_message_gone),
    "a tool output that is a bare number (a calculator tool)": Case(
        Situation({"input": [u("6*7?"), fcall("call_n", "fc_n"),
                             {**fout("call_n"), "output": 42}, u("and?")], "tools": FN},
                  ("tool_value_serialized",), "but got an integer instead"), number_as_text),
    "a tool that returned no content blocks (an empty part list)": Case(
        Situation({"input": [u("list"), fcall("call_z", "fc_z"),
                             {**fout("call_z"), "output": []}, u("and?")], "tools": FN},
                  ("tool_result_rendered",), "'input[2].output': empty array"),
        empty_list_says_empty),
    "a tool output that is one part object, not a list": Case(
        Situation({"input": [u("screenshot"), fcall("call_i", "fc_i"),
                             {**fout("call_i"), "output": {"type": "input_image",
                                                           "image_url": IMAGE}},
                             u("what is on it?")], "tools": FN},
                  ("tool_value_serialized",), "but got an object instead"), one_part_as_a_list),
    "chat-style text parts in a Responses history (converted by hand)": Case(
        Situation({"input": [user({"type": "text", "text": "read a.py"}),
                             {"type": "message", "role": "assistant",
                              "content": [{"type": "text", "text": "done"}]},
                             u("thanks")]},
                  ("content_part_typed",), "Invalid value: 'text'"), chat_parts_typed),
    "a chat-style image_url part in a user message": Case(
        Situation({"input": [user({"type": "input_text", "text": "what is this?"},
                                  {"type": "image_url",
                                   "image_url": {"url": IMAGE, "detail": "low"}})]},
                  ("content_part_typed",), "Invalid value: 'image_url'"), chat_image_typed),
    "a chat-style file part in a user message": Case(
        Situation({"input": [user({"type": "input_text", "text": "summarize"},
                                  {"type": "file", "file": {
                                      "filename": "a.pdf",
                                      "file_data": "data:application/pdf;base64,JVBERi0x"}})]},
                  ("content_part_typed",), "Invalid value: 'file'"), chat_file_typed),
    "an input_image whose image_url is an object {url, detail}": Case(
        Situation({"input": [user({"type": "input_text", "text": "what is this?"},
                                  {"type": "input_image",
                                   "image_url": {"url": IMAGE, "detail": "high"}})]},
                  ("content_part_typed",), "expected a string, but got an object instead"),
        image_url_flattened),
    "a reasoning summary sent as its text": Case(
        Situation({"input": [u("read"), {**rs("rs_st"), "summary": "**Planning** the read"},
                             fcall("call_1", "fc_1"), fout("call_1"), u("go on")],
                   "tools": FN},
                  ("reasoning_summary_added",), "'input[1].summary': expected an array"),
        summary_text_kept),
    "reasoning summary parts typed like message text": Case(
        Situation({"input": [u("read"), {**rs("rs_sp"), "summary": [
            {"type": "output_text", "text": "plan", "annotations": []}]},
                             fcall("call_1", "fc_1"), fout("call_1"), u("go on")],
                   "tools": FN},
                  ("assistant_content_retyped",),
                  "Invalid value: 'output_text'. Supported values are: 'summary_text'."),
        summary_parts_typed),
    "a chat-style assistant turn with tool_calls and its tool message": Case(
        Situation({"input": [u("read a.py"),
                             {"role": "assistant", "content": "reading it", "tool_calls": [
                                 {"id": "call_lc", "type": "function",
                                  "function": {"name": "read_file",
                                               "arguments": '{"path": "a.py"}'}}]},
                             {"role": "tool", "tool_call_id": "call_lc", "content": "42"},
                             u("go on")], "tools": FN},
                  ("tool_message_converted",), "Unknown parameter: 'input[1].tool_calls'."),
        chat_turn_as_items),
    "a shell call answered with plain text": Case(
        Situation({"input": [u("run the tests"), shell_v2("call_sh5"),
                             {"type": "shell_call_output", "call_id": "call_sh5",
                              "output": "3 passed"}, u("and?")],
                   "tools": [{"type": "shell"}]},
                  ("tool_output_retyped",), "expected an array of shell call output content"),
        shell_text_as_a_run),
    "a local shell call answered with the shell tool's runs": Case(
        Situation({"input": [u("run the tests"), shell("call_ls5"),
                             {"type": "local_shell_call_output", "call_id": "call_ls5",
                              "output": shell_v2_out("x")["output"]}, u("and?")]},
                  ("tool_output_retyped",), "expected a string, but got an array instead"),
        runs_as_local_text),
    "an item_reference repeating an item sent in full": Case(
        Situation({"input": [u("hi"), said("hello", "msg_ref1"), u("again"),
                             ref("msg_ref1"), u("and?")]},
                  ("duplicate_item_dropped",), "Duplicate item found with id msg_ref1"),
        reference_dropped_full_item_kept, stored(said("hello", "msg_ref1"))),
    "one stored item referenced twice (a retry appended it again)": Case(
        Situation({"input": [u("hi"), ref("msg_ref2"), u("again"), ref("msg_ref2"),
                             u("and?")]},
                  ("duplicate_item_dropped",), "Duplicate item found with id msg_ref2"),
        one_reference_left, stored(said("hello", "msg_ref2"))),
    "message and call ids replayed under store=false to an org that refuses them": Case(
        Situation({"input": [u("read"), fcall("call_s", "fc_s"), fout("call_s"),
                             said("done", "msg_s"), u("go on")], "tools": FN,
                   "store": False},
                  ("item_id_removed",), "Items are not persisted when `store` is set to false",
                  strict=True), ids_gone, refusing_stateless_ids),
}


async def run_case(gateway_factory: GatewayFactory, fake: FakeResponses, case: Case) -> None:
    """The situation's runner, then the check on the input the upstream accepted."""
    if case.prepare is not None:
        case.prepare(fake)
    await run_responses_case(gateway_factory, fake, replace(case.situation, valid=None))
    accepted = fake.requests[-1].body["input"]
    if case.check is not None:
        case.check(accepted)
    # what the upstream accepted needs no repair again
    assert repair_input(accepted, store=case.situation.broken.get("store") is not False) \
        == (accepted, ())


@pytest.mark.parametrize("name", list(RESPONSES))
async def test_responses_heldout(gateway_factory: GatewayFactory,
                                 fake_responses: FakeResponses, name: str) -> None:
    await run_case(gateway_factory, fake_responses, RESPONSES[name])


async def test_the_repaired_stream_reports_its_repairs(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    """A chat-style history streamed through the SDK: the stream completes and the
    response headers name the repairs."""
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    body = RESPONSES["a chat-style assistant turn with tool_calls and its tool message"]
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c, c.responses.with_streaming_response.create(
            model=GPT, stream=True, **body.situation.broken) as raw:
        assert "tool_message_converted" in raw.headers["x-gateway-repairs"]
        events = [event.type async for event in await raw.parse()]
    assert events[-1] == "response.completed"
    chat_turn_as_items(fake_responses.requests[-1].body["input"])


# -- what no repair can make sense of: a clear 400 in the Responses error shape ------------

async def test_a_call_without_its_name_is_a_clear_client_error(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    nameless = {k: v for k, v in fcall("call_q", "fc_q").items() if k != "name"}
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model=GPT, tools=FN,  # type: ignore[arg-type]
                                     input=[u("read"), nameless, fout("call_q")])  # type: ignore[list-item]
    error = refused.value.body
    assert isinstance(error, dict) and error["type"] == "invalid_request_error"
    assert error["param"] == "input[1].name"
    assert not fake_responses.requests  # nothing went upstream


async def test_previous_response_and_conversation_together_is_a_clear_400(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        first = await c.responses.create(model=GPT, input="hi")
        async with httpx.AsyncClient() as direct:  # the conversation, made upstream
            made = await direct.post(f"{fake_responses.base_url}/v1/conversations", json={},
                                     headers={"authorization": "Bearer upstream-openai-key"})
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model=GPT, input="again", previous_response_id=first.id,
                                     conversation=made.json()["id"])
    error = refused.value.body
    assert isinstance(error, dict) and error["type"] == "invalid_request_error"
    assert "Mutually exclusive parameters" in error["message"]
    # refused before any upstream call: the two name different histories
    assert [r.path for r in fake_responses.requests] == ["/v1/responses", "/v1/conversations"]


# -- odd but valid: byte for byte, unreported ------------------------------------------------

RESPONSES_VALID: dict[str, dict[str, Any]] = {
    "instructions beside system and developer messages, one mid-history": {
        "instructions": "You are terse.",
        "input": [{"role": "system", "content": "Answer in English."}, u("hi"),
                  said("hello"), {"role": "developer", "content": "From now on: lists."},
                  u("plan my day")]},
    "an answer cut by max_output_tokens (incomplete) and a refusal part": {
        "input": [u("write a long story"),
                  {"type": "message", "id": "msg_cut", "role": "assistant",
                   "status": "incomplete",
                   "content": [{"type": "output_text", "text": "Once upon a", "annotations": []}]},
                  u("something else then"),
                  {"type": "message", "role": "assistant", "status": "completed",
                   "content": [{"type": "refusal", "refusal": "I can't help with that."}]},
                  u("ok, a poem")]},
    "images at detail original and low, a file by id": {
        "input": [user({"type": "input_text", "text": "compare"},
                       {"type": "input_image", "image_url": IMAGE, "detail": "original"},
                       {"type": "input_image", "image_url": IMAGE, "detail": "low"},
                       {"type": "input_file", "file_id": "file-abc123"})]},
    "a web search without results, a cited answer, an mcp call that failed": {
        "input": [u("weather in Paris, then ask the wiki"),
                  {"type": "web_search_call", "id": "ws_5", "status": "completed",
                   "action": {"type": "search", "query": "weather Paris"}},
                  {"type": "mcp_call", "id": "mcp_5", "server_label": "deepwiki",
                   "name": "ask_question", "arguments": "{}", "output": None,
                   "error": "server unreachable"},
                  {"type": "message", "id": "msg_ws5", "role": "assistant",
                   "status": "completed", "content": [{
                       "type": "output_text", "text": "Sunny; the wiki was down.",
                       "annotations": [{"type": "url_citation", "url": "https://example.com",
                                        "title": "Weather", "start_index": 0,
                                        "end_index": 5}]}]},
                  u("thanks")],
        "tools": [{"type": "web_search"},
                  {"type": "mcp", "server_label": "deepwiki",
                   "server_url": "https://mcp.deepwiki.com/mcp", "require_approval": "never"}]},
    "an empty function output and a custom tool output of image parts": {
        "input": [u("touch a file, then patch"), fcall("call_v5", "fc_v5"),
                  {"type": "function_call_output", "call_id": "call_v5", "output": ""},
                  ccall("call_v6", "ctc_v6"),
                  {"type": "custom_tool_call_output", "call_id": "call_v6", "output": [
                      {"type": "input_text", "text": "applied, screenshot:"},
                      {"type": "input_image", "image_url": IMAGE, "detail": "auto"}]},
                  u("go on")], "tools": [*FN, *CUSTOM]},
    "commentary and final answer messages with phase and extra fields": {
        "input": [u("fix the bug"),
                  {"type": "message", "id": "msg_c1", "role": "assistant",
                   "phase": "commentary", "status": "completed",
                   "content": [{"type": "output_text", "text": "Looking at a.py.",
                                "annotations": [], "logprobs": []}]},
                  fcall("call_v7", "fc_v7"), fout("call_v7"),
                  {"type": "message", "id": "msg_c2", "role": "assistant",
                   "phase": "final_answer", "status": "completed",
                   "content": [{"type": "output_text", "text": "Fixed.", "annotations": []}]},
                  u("thanks")], "tools": FN},
    "a stateless chain with item ids under store=false": {
        "input": [u("read"), rs("rs_v8", "gAAAA-own-v8"), fcall("call_v8", "fc_v8"),
                  fout("call_v8"), said("done", "msg_v8"), u("go on")],
        "tools": FN, "store": False, "include": ["reasoning.encrypted_content"]},
}


@pytest.mark.parametrize("name", list(RESPONSES_VALID))
async def test_valid_responses_input_arrives_as_sent(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses, name: str) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    await assert_arrives_as_sent(gw, f"{gw.base_url}/responses",
                                 {"model": GPT, **RESPONSES_VALID[name]}, OPENAI_AUTH,
                                 fake_responses)



# -- the same histories to a model that speaks only Chat Completions -----------------------

@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict") as ref:
        yield ref


@pytest.mark.parametrize("name", list(RESPONSES))
async def test_a_chat_only_upstream_gets_the_repaired_history(
        gateway_factory: GatewayFactory, referee: Referee, name: str) -> None:
    """Translated to chat for an upstream that speaks nothing else, each history is answered
    (what only the Responses API stores, references and ids, is not the translation's)."""
    gw = await gateway_factory({
        "model_list": [{"model_name": GPT, "litellm_params": {
            "model": "hosted_vllm/referee", "api_base": referee.base_url, "api_key": "k"}}],
        "gateway": {"api_keys": ["client-key"]}})
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        answer = await c.responses.create(model=GPT, **RESPONSES[name].situation.broken)
    assert answer.status == "completed"
