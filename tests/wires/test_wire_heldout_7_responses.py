"""Held-out Responses situations, seventh set: ``/v1/responses`` as agents send it after
built-in tools, cancelled streams, trimmers and model switches, through the official
``openai`` SDK (``create``, ``stream=True``, the ``responses.stream`` and ``responses.parse``
helpers) to a gateway in front of the strict native fake (tests/fakes/responses_server.py)
and in front of a model that speaks only Chat Completions.

- histories of the built-in tools as the API returned them (code interpreter runs with
  logs and images, file search results, web searches with their actions, a generated
  image's 1.5 MB base64, MCP tool lists, failed MCP calls, a denied approval), an Agents
  SDK handoff whose nested history opens the input with an assistant message, a call
  resent with ``status: "in_progress"`` and its output, citations and logprobs resent:
  byte for byte;
- a body with every current knob (``background``, ``prompt_cache_key``,
  ``safety_identifier``, ``max_tool_calls``, ``include``, ``parallel_tool_calls: false``
  over several calls, a strict ``json_schema`` format with strict tools, ``allowed_tools``):
  byte for byte natively, and its meaning kept through the translation;
- a retry loop that appended a generated image twice, a stream cancelled mid-call
  (truncated arguments, no output), a LangGraph trimmer under ``store: false`` keeping a
  summarized reasoning item without its encrypted content: repaired, reported, and
  needing nothing the second time;
- a model switch across two providers with ``previous_response_id`` (the first one's
  encrypted reasoning cannot be read by the second);
- a 1,000-item input with 300 calls, some cut by a trimmer;
- ``tool_choice`` forcing a built-in tool the request does not declare: the provider's
  clear 400 (never a 5xx), whole and streamed;
- ``background: true`` to a chat-only model: answered, never a hang;
- repaired requests read with ``responses.stream(text_format=...)`` and ``responses.parse``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from pydantic import BaseModel

from gateway.referee import Referee
from gateway.server.wire_routes import RESPONSE_STATE
from gateway.wires.responses_rules import repair_input
from tests.conftest import GatewayFactory
from tests.fakes.responses_server import FakeResponses
from tests.wires.test_wire_heldout import PNG
from tests.wires.test_wire_situations import (
    FN,
    GPT,
    assert_arrives_as_sent,
    fake_responses,
    fcall,
    fout,
    native_config,
    said,
    u,
)

__all__ = ["fake_responses"]  # the fixture, shared with test_wire_situations

UPSTREAM = {"authorization": "Bearer upstream-openai-key"}
CLIENT = {"authorization": "Bearer client-key"}
OTHER = "o4-mini"  # a model group on another provider


class Said(BaseModel):
    """The structured answer the fake gives to a schema with a ``said`` property."""

    said: str


SAID_FORMAT = {"type": "json_schema", "name": "Said", "strict": True,
               "schema": {"type": "object", "properties": {"said": {"type": "string"}},
                          "required": ["said"], "additionalProperties": False}}
STRICT_FN = [{"type": "function", "name": "read_file", "description": "read a file",
              "strict": True,
              "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                             "required": ["path"], "additionalProperties": False}}]


def call(call_id: str, item_id: str, **fields: Any) -> dict[str, Any]:
    return {**fcall(call_id, item_id), **fields}


def types(items: list[Any]) -> list[str]:
    return [i.get("type", "message") for i in items]


# -- what the built-in tools return, resent as history ----------------------------------

BIG_IMAGE = PNG + "A" * 1_500_000  # a generated image's base64 (1.5 MB)
IMAGE_GEN = {"type": "image_generation_call", "id": "ig_7", "status": "completed",
             "result": BIG_IMAGE}
CODE_RUN = {"type": "code_interpreter_call", "id": "ci_7", "status": "completed",
            "container_id": "cntr_7", "code": "import matplotlib; plot()",
            "outputs": [{"type": "logs", "logs": "saved plot.png\n"},
                        {"type": "image", "url": "https://files.example/plot.png"}]}
FILES = {"type": "file_search_call", "id": "fs_7", "status": "completed",
         "queries": ["refund policy", "returns window"],
         "results": [{"file_id": "file-7", "filename": "policy.md", "score": 0.93,
                      "text": "Refunds within 30 days.", "attributes": {"team": "support"}}]}
SEARCHES = [
    {"type": "web_search_call", "id": "ws_7a", "status": "completed",
     "action": {"type": "search", "query": "aiohttp release notes",
                "sources": [{"type": "url", "url": "https://docs.aiohttp.org"}]}},
    {"type": "web_search_call", "id": "ws_7b", "status": "completed",
     "action": {"type": "open_page", "url": "https://docs.aiohttp.org/changes.html"}},
    {"type": "web_search_call", "id": "ws_7c", "status": "completed",
     "action": {"type": "find", "url": "https://docs.aiohttp.org/changes.html",
                "pattern": "3.10"}}]
MCP_SERVER = {"type": "mcp", "server_label": "deepwiki",
              "server_url": "https://mcp.deepwiki.com/mcp", "require_approval": "always"}
MCP_LIST = {"type": "mcp_list_tools", "id": "mcpl_7", "server_label": "deepwiki",
            "tools": [{"name": "ask_question", "input_schema": {"type": "object"},
                       "annotations": {"read_only": True}, "description": "ask"}]}
MCP_FAILED = {"type": "mcp_call", "id": "mcp_7", "server_label": "deepwiki",
              "name": "ask_question", "arguments": '{"question": "what?"}', "output": None,
              "error": "MCP server timed out", "status": "failed"}
MCP_ASKED = {"type": "mcp_approval_request", "id": "mcpr_7", "server_label": "deepwiki",
             "name": "ask_question", "arguments": '{"question": "delete it?"}'}
MCP_DENIED = {"type": "mcp_approval_response", "approval_request_id": "mcpr_7",
              "approve": False, "reason": "not on the production wiki"}
REASONED = {"type": "reasoning", "id": "rs_7", "encrypted_content": "gAAAA-own-7",
            "summary": [{"type": "summary_text", "text": "**Plotting** the refunds"}]}
CITED = {"type": "message", "id": "msg_7c", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Refunds take 30 days (plot.png).",
                      "annotations": [
                          {"type": "file_citation", "file_id": "file-7",
                           "filename": "policy.md", "index": 0},
                          {"type": "container_file_citation", "container_id": "cntr_7",
                           "file_id": "cfile_7", "filename": "plot.png", "start_index": 20,
                           "end_index": 28},
                          {"type": "file_path", "file_id": "cfile_7", "index": 20}],
                      "logprobs": [{"token": "Refunds", "logprob": -0.01,
                                    "bytes": [82, 101], "top_logprobs": [
                                        {"token": "Refunds", "logprob": -0.01,
                                         "bytes": [82, 101]}]}]}]}
# openai-agents' nest_handoff_history: the earlier turns folded into one assistant message.
NESTED = {"role": "assistant", "content": (
    "For context, here is the conversation so far between the user and the previous "
    "agent:\n<CONVERSATION HISTORY>\n1. user: refund order 7\n</CONVERSATION HISTORY>")}

VALID: dict[str, dict[str, Any]] = {
    "every built-in tool's items resent, a 1.5 MB generated image among them": {
        "input": [u("plot the refunds and draw a logo"), MCP_LIST, MCP_FAILED, *SEARCHES,
                  FILES, REASONED, CODE_RUN, IMAGE_GEN, CITED, u("now the returns")],
        "tools": [{"type": "code_interpreter", "container": {"type": "auto"}},
                  {"type": "file_search", "vector_store_ids": ["vs_7"]},
                  {"type": "web_search"}, {"type": "image_generation"}, MCP_SERVER],
        "include": ["code_interpreter_call.outputs", "file_search_call.results",
                    "web_search_call.action.sources"]},
    # (apply_patch_call_output's output is optional: a patch applied with nothing to say)
    "an apply_patch result without an output": {
        "input": [u("rename a to b"),
                  {"type": "apply_patch_call", "call_id": "call_p9", "status": "completed",
                   "operation": {"type": "update_file", "path": "a.py", "diff": "-a\n+b\n"}},
                  {"type": "apply_patch_call_output", "call_id": "call_p9",
                   "status": "completed"},
                  u("thanks")],
        "tools": [{"type": "apply_patch"}]},
    "an MCP approval the user denied, with its reason": {
        "input": [u("clean the wiki"), MCP_LIST, MCP_ASKED, MCP_DENIED,
                  said("I did not delete it."), u("fine")], "tools": [MCP_SERVER]},
    "an Agents SDK handoff with nested history (the input opens with the assistant)": {
        "input": [NESTED, call("call_h7", "fc_h7", name="transfer_to_billing_agent",
                               status="completed"),
                  {**fout("call_h7"), "output": '{"assistant": "Billing agent"}'}],
        "instructions": "You are the billing agent.", "tools": FN},
    "a call saved with status in_progress, answered": {
        "input": [u("read a.py"), call("call_p7", "fc_p7", status="in_progress"),
                  fout("call_p7"), u("go on")], "tools": FN},
    "every current knob, sequential calls under parallel_tool_calls false": {
        "input": [u("read a, b and c"),
                  call("call_s1", "fc_s1", arguments='{"path": "a"}', status="completed"),
                  fout("call_s1"),
                  call("call_s2", "fc_s2", arguments='{"path": "b"}', status="completed"),
                  fout("call_s2"),
                  call("call_s3", "fc_s3", arguments='{"path": "c"}', status="completed"),
                  fout("call_s3"), u("sum up")],
        "tools": STRICT_FN, "parallel_tool_calls": False, "max_tool_calls": 3,
        "tool_choice": {"type": "allowed_tools", "mode": "auto",
                        "tools": [{"type": "function", "name": "read_file"}]},
        "text": {"format": SAID_FORMAT, "verbosity": "low"},
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"], "store": True, "background": True,
        "prompt_cache_key": "repo-7:agent", "safety_identifier": "user-7f3a",
        "service_tier": "flex", "top_logprobs": 2, "truncation": "disabled",
        "metadata": {"run": "7"}},
}


@pytest.mark.parametrize("name", list(VALID))
async def test_valid_input_arrives_as_sent(gateway_factory: GatewayFactory,
                                           fake_responses: FakeResponses, name: str) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    await assert_arrives_as_sent(gw, f"{gw.base_url}/responses", {"model": GPT, **VALID[name]},
                                 CLIENT, fake_responses)


# -- a chat-only model ----------------------------------------------------------------------

@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict") as ref:
        yield ref


def chat_config(referee: Referee) -> dict[str, Any]:
    return {"model_list": [{"model_name": GPT, "litellm_params": {
        "model": "hosted_vllm/referee", "api_base": referee.base_url, "api_key": "k"}}],
        "gateway": {"api_keys": ["client-key"]}}


@pytest.mark.parametrize("name", list(VALID))
async def test_a_chat_only_model_answers_the_same_input(
        gateway_factory: GatewayFactory, referee: Referee, name: str) -> None:
    gw = await gateway_factory(chat_config(referee))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        answer = await c.responses.create(model=GPT, **VALID[name])
    assert answer.status == "completed"
    sent = referee.requests[-1].json()
    assert BIG_IMAGE not in orjson.dumps(sent).decode()  # built-in items stay behind


async def test_the_knobs_keep_their_meaning_through_the_translation(
        gateway_factory: GatewayFactory, referee: Referee) -> None:
    gw = await gateway_factory(chat_config(referee))
    body = VALID["every current knob, sequential calls under parallel_tool_calls false"]
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        await c.responses.create(model=GPT, **body)
    sent = referee.requests[-1].json()
    assert sent["parallel_tool_calls"] is False
    assert sent["response_format"] == {"type": "json_schema", "json_schema": {
        k: SAID_FORMAT[k] for k in ("name", "schema", "strict")}}
    assert sent["tools"][0]["function"]["strict"] is True
    assert [m["role"] for m in sent["messages"]] == ["user", *["assistant", "tool"] * 3,
                                                      "user"]


async def test_allowed_tools_offer_a_chat_only_model_only_those_tools(
        gateway_factory: GatewayFactory, referee: Referee) -> None:
    # tool_choice allowed_tools keeps the full tool list (for the prompt cache) but lets
    # the model call only some, and "required" one of them: a chat server that knows no
    # allowed_tools is offered just those, under that mode (it was offered every tool,
    # free not to call any).
    gw = await gateway_factory(chat_config(referee))
    write = {**FN[0], "name": "write_file", "description": "write a file"}
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        await c.responses.create(
            model=GPT, input="read a.py", tools=[*FN, write],  # type: ignore[list-item]
            tool_choice={"type": "allowed_tools", "mode": "required",
                         "tools": [{"type": "function", "name": "read_file"}]})
    sent = referee.requests[-1].json()
    assert [t["function"]["name"] for t in sent["tools"]] == ["read_file"]
    assert sent["tool_choice"] == "required"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_background_to_a_chat_only_model_is_answered(
        gateway_factory: GatewayFactory, referee: Referee, stream: bool) -> None:
    # Clients that set background: true by default (and poll) get the answer at once:
    # a chat model has no background mode, and the request never hangs waiting for one.
    gw = await gateway_factory(chat_config(referee))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        if stream:
            events = [e async for e in await c.responses.create(
                model=GPT, input="hello", background=True, stream=True)]
            assert events[-1].type == "response.completed"
            answer = events[-1].response
        else:
            answer = await c.responses.create(model=GPT, input="hello", background=True)
    assert answer.status == "completed" and answer.output_text


# -- repairs -------------------------------------------------------------------------------

async def send_twice(gw_url: str, fake: FakeResponses, body: dict[str, Any],
                     refusal: str | None) -> list[Any]:
    """The provider's words for the broken input, then the input through the gateway:
    answered, repaired once upstream; returns what the upstream accepted."""
    if refusal is not None:
        async with httpx.AsyncClient() as direct:
            said_to_it = await direct.post(f"{fake.base_url}/v1/responses", json=body,
                                           headers=UPSTREAM)
        assert said_to_it.status_code in (400, 404), said_to_it.text
        assert refusal in said_to_it.json()["error"]["message"]
    before = len(fake.requests)
    async with openai.AsyncOpenAI(base_url=gw_url, api_key="client-key", max_retries=0) as c:
        raw = await c.responses.with_raw_response.create(**body)
    assert raw.parse().output_text
    assert raw.headers.get("x-gateway-repairs")
    accepted: list[Any] = fake.requests[-1].body["input"]
    assert len(fake.requests) - before == 1, "repaired up front, not on a refusal"
    assert repair_input(accepted, store=body.get("store") is not False) == (accepted, ())
    # The accepted history, sent as it is, needs nothing.
    async with httpx.AsyncClient() as c2:
        again = await c2.post(f"{gw_url}/responses", json={**body, "input": accepted},
                              headers=CLIENT)
    assert again.status_code == 200, again.text
    assert "x-gateway-repairs" not in again.headers
    return accepted


async def test_a_retry_loop_that_appended_a_generated_image_twice(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # A custom loop retried after a timeout and appended the same response output again.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    body = {"model": GPT, "tools": [{"type": "image_generation"}],
            "input": [u("draw a logo"), IMAGE_GEN, IMAGE_GEN, u("make it blue")]}
    accepted = await send_twice(gw.base_url, fake_responses, body, "Duplicate item found")
    assert types(accepted) == ["message", "image_generation_call", "message"]
    assert accepted[1] == IMAGE_GEN  # the image itself, untouched


async def test_a_stream_cancelled_mid_call_is_answered(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # The user pressed Esc while the arguments streamed: the call was saved in_progress,
    # its arguments cut, and never run; the next turn says "continue".
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    cut = call("call_x7", "fc_x7", arguments='{"path": "a.', status="in_progress")
    body = {"model": GPT, "tools": FN, "input": [u("read a.py"), cut, u("continue")]}
    accepted = await send_twice(gw.base_url, fake_responses, body,
                                "No tool output found for function call call_x7")
    assert accepted[1] == cut  # the call as it was saved
    assert types(accepted) == ["message", "function_call", "function_call_output", "message"]
    assert accepted[2]["call_id"] == "call_x7"


async def test_a_langgraph_trimmer_under_store_false_keeps_a_summary_only_reasoning(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # LangChain with use_responses_api and store=False but no include of the encrypted
    # content: its reasoning items carry a summary and an id the API never kept.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    thought = {"type": "reasoning", "id": "rs_lg7",
               "summary": [{"type": "summary_text", "text": "**Reading** a.py first"}]}
    body = {"model": GPT, "tools": FN, "store": False,
            "input": [u("read a.py"), thought, fcall("call_lg7"), fout("call_lg7"),
                      u("and b.py")]}
    accepted = await send_twice(gw.base_url, fake_responses, body,
                                "Items are not persisted when `store` is set to false")
    assert types(accepted) == ["message", "function_call", "function_call_output", "message"]


def long_history() -> list[dict[str, Any]]:
    """1,000 items: 300 calls with their outputs, 200 answered steps between them."""
    items: list[dict[str, Any]] = [u("refactor the repository")]
    for k in range(300):
        items += [call(f"call_{k}", f"fc_{k}", arguments=orjson.dumps(
            {"path": f"src/m{k}.py"}).decode()), {**fout(f"call_{k}"), "output": f"file {k}"}]
        if k < 200:
            items += [said(f"step {k} done", f"msg_{k}"), u(f"next {k}")]
    return items


async def test_a_thousand_items_cut_by_a_trimmer_in_places(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    items = long_history()
    assert len(items) == 1001
    cut_outputs = {f"call_{k}" for k in range(10, 14)}
    cut_calls = {f"call_{k}" for k in range(20, 24)}
    broken = [i for i in items
              if not (i.get("type") == "function_call_output" and i["call_id"] in cut_outputs)
              and not (i.get("type") == "function_call" and i["call_id"] in cut_calls)]
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    body = {"model": GPT, "tools": FN, "input": broken}
    accepted = await send_twice(gw.base_url, fake_responses, body,
                                "No tool call found for function call output with call_id call_20")
    outputs = {i["call_id"] for i in accepted if i.get("type") == "function_call_output"}
    calls = {i["call_id"] for i in accepted if i.get("type") == "function_call"}
    assert outputs == calls == {f"call_{k}" for k in range(300)} - cut_calls
    # Everything else arrives as it was.
    assert [i for i in accepted if i.get("type") != "function_call_output"] == \
        [i for i in broken if i.get("type") != "function_call_output"]


async def test_a_thousand_items_to_a_chat_only_model(gateway_factory: GatewayFactory,
                                                     referee: Referee) -> None:
    items = long_history()
    broken = [i for i in items if not (i.get("type") == "function_call_output"
                                       and i["call_id"] == "call_299")]
    gw = await gateway_factory(chat_config(referee))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        answer = await c.responses.create(model=GPT, tools=FN,  # type: ignore[arg-type]
                                          input=broken)  # type: ignore[arg-type]
    assert answer.status == "completed"
    sent = referee.requests[-1].json()["messages"]
    assert sum(1 for m in sent if m["role"] == "tool") == 300


# -- a model switch across providers ----------------------------------------------------

@pytest.fixture
async def other_provider() -> AsyncIterator[FakeResponses]:
    async with FakeResponses(api_key="upstream-other-key") as server:
        server.encryption = "gAAAAB"  # it cannot decrypt the first provider's reasoning
        yield server


async def test_a_model_switch_continues_another_providers_response(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses,
        other_provider: FakeResponses) -> None:
    # An agent starts on gpt-5 (reasoning, a call), then a router switches the next turn
    # to another model group with previous_response_id: the new provider neither knows
    # the response nor can read its encrypted reasoning.
    config = native_config(fake_responses.base_url, "http://127.0.0.1:9")
    config["model_list"].append({"model_name": OTHER, "litellm_params": {
        "model": f"openai/{OTHER}", "api_base": f"{other_provider.base_url}/v1",
        "api_key": "upstream-other-key"}})
    gw = await gateway_factory(config)
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        first = await c.responses.create(
            model=GPT, tools=FN, reasoning={"effort": "low"},  # type: ignore[arg-type]
            include=["reasoning.encrypted_content"], input="read notes.txt with the TOOL")
        made = [i.model_dump(exclude_none=True) for i in first.output]
        assert types(made) == ["reasoning", "function_call"]
        await gw.app[RESPONSE_STATE].flush()
        raw = await c.responses.with_raw_response.create(
            model=OTHER, tools=FN, previous_response_id=first.id,  # type: ignore[arg-type]
            input=[{"type": "function_call_output", "call_id": made[1]["call_id"],
                    "output": "the notes say 42"}])
    assert raw.parse().output_text == "tool results: the notes say 42"
    accepted = other_provider.requests[-1].body["input"]
    assert types(accepted) == ["message", "function_call", "function_call_output"]
    assert accepted[1]["call_id"] == made[1]["call_id"]


# -- tool_choice forcing a tool the request does not declare ------------------------------

@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_tool_choice_of_an_undeclared_builtin_is_the_providers_400(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses, stream: bool) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model=GPT, input="draw a cat", tools=FN,  # type: ignore[arg-type]
                                     tool_choice={"type": "image_generation"},  # type: ignore[typeddict-item]
                                     stream=stream)
    assert refused.value.status_code == 400
    assert "Tool choice 'image_generation' not found in 'tools' parameter" \
        in refused.value.message
    assert refused.value.param == "tool_choice"


# -- SDK helpers on repaired requests -----------------------------------------------------

async def test_a_repaired_request_read_with_the_stream_helper_and_a_pydantic_format(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    cut = call("call_h7", "fc_h7", arguments='{"pa', status="in_progress")
    c = openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key", max_retries=0)
    async with c, c.responses.stream(model=GPT, tools=FN,  # type: ignore[arg-type]
                                     text_format=Said,
                                     input=[u("read a.py"), cut, u("hello")],  # type: ignore[list-item]
                                     ) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.output_parsed == Said(said="you said: hello")


async def test_responses_parse_of_a_repaired_history_with_strict_tools(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        raw = await c.responses.with_raw_response.parse(
            model=GPT, tools=STRICT_FN, text_format=Said,  # type: ignore[arg-type]
            input=[u("read a.py"), IMAGE_GEN, IMAGE_GEN, u("hi")])  # type: ignore[list-item]
    assert "duplicate_item_dropped" in raw.headers["x-gateway-repairs"]
    assert raw.parse().output_parsed == Said(said="you said: read a.py hi")


# -- Codex's remote compaction of a broken history -----------------------------------------

async def test_codex_compacts_a_history_with_a_cancelled_call(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # openai/codex#5385: /compact after an interrupted turn fails with the provider's
    # "No tool output found for function call ..."; the gateway repairs the compacted
    # input as it repairs /responses (and says so), so the session can go on.
    history = [u("fix the failing test"), call("call_c7", "fc_c7", status="in_progress"),
               u("stop, run only test_a"), {**fout("call_gone"), "output": "1 failed"},
               IMAGE_GEN, IMAGE_GEN, u("and now?")]
    async with httpx.AsyncClient() as direct:
        said_to_it = await direct.post(f"{fake_responses.base_url}/v1/responses/compact",
                                       json={"model": GPT, "input": history},
                                       headers=UPSTREAM)
    assert said_to_it.status_code == 400
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        raw = await c.responses.with_raw_response.compact(
            model=GPT, input=history, instructions="You are Codex.")  # type: ignore[arg-type]
        compacted = raw.parse()
        assert compacted.output[-1].type == "compaction"
        repairs = raw.headers["x-gateway-repairs"]
        for kind in ("tool_result_synthesized", "orphan_tool_result_dropped",
                     "duplicate_item_dropped"):
            assert kind in repairs
        accepted = fake_responses.requests[-1].body
        assert accepted["instructions"] == "You are Codex."
        assert types(accepted["input"]) == ["message", "function_call",
                                            "function_call_output", "message",
                                            "image_generation_call", "message"]
        again = await c.responses.with_raw_response.compact(
            model=GPT, input=accepted["input"])
    assert "x-gateway-repairs" not in again.headers
    assert fake_responses.requests[-1].body["input"] == accepted["input"]


async def test_a_compaction_that_cannot_be_repaired_is_the_providers_400(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.compact(model=GPT, input=[  # type: ignore[arg-type]
                u("hi"), {"type": "reasoning", "id": "rs_x", "summary": [],
                          "encrypted_content": "not-ours"}, said("hello")])
    assert "could not be verified" in refused.value.message


async def test_codex_compacting_again_after_a_compaction_sends_the_history_as_it_is(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # Codex's second compaction: the first one's compaction item and kept user messages,
    # then the newer turns (reasoning, a shell call, an apply_patch custom call, their
    # outputs). Nothing to repair: it goes as sent, nothing reported.
    history = [
        {"type": "message", "role": "user", "id": "msg_c1_0", "status": "completed",
         "content": [{"type": "input_text", "text": "fix the failing test"}]},
        {"type": "compaction", "id": "cmp_0001", "encrypted_content": "gAAAA-compacted-9"},
        u("now the lint errors"),
        {"type": "reasoning", "id": "rs_k7", "summary": [], "encrypted_content": "gAAAA-k7"},
        {"type": "local_shell_call", "id": "lsh_k7", "call_id": "call_k7", "status":
         "completed", "action": {"type": "exec", "command": ["ruff", "check"], "env": {}}},
        {"type": "local_shell_call_output", "call_id": "call_k7", "output": "2 errors"},
        {"type": "custom_tool_call", "id": "ctc_k7", "call_id": "call_p7",
         "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch"},
        {"type": "custom_tool_call_output", "call_id": "call_p7", "output": "applied"},
        said("Fixed both.", "msg_k7"), u("thanks")]
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        raw = await c.responses.with_raw_response.compact(
            model=GPT, input=history)  # type: ignore[arg-type]
    assert raw.parse().output[-1].type == "compaction"
    assert "x-gateway-repairs" not in raw.headers
    assert fake_responses.requests[-1].body == {"model": GPT, "input": history}


# -- previous_response_id across a native and a chat-only model group --------------------

LOCAL = "local-coder"  # a model group served through Chat Completions


@pytest.mark.parametrize("first_model", [GPT, LOCAL], ids=["native-then-chat",
                                                            "chat-then-native"])
async def test_a_chain_continues_on_a_model_group_of_the_other_kind(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses, referee: Referee,
        first_model: str) -> None:
    # A router (or a fallback) sends the next turn of an Agents SDK chain to a model of
    # the other kind: the response it continues was made where the new upstream never
    # saw it, so the gateway gives the new one the conversation it kept.
    config = native_config(fake_responses.base_url, "http://127.0.0.1:9")
    config["model_list"].append({"model_name": LOCAL, "litellm_params": {
        "model": "hosted_vllm/referee", "api_base": referee.base_url, "api_key": "k"}})
    gw = await gateway_factory(config)
    then = LOCAL if first_model == GPT else GPT
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        first = await c.responses.create(model=first_model, input="my name is Ada",
                                         reasoning={"effort": "low"} if first_model == GPT
                                         else None)
        await gw.app[RESPONSE_STATE].flush()
        second = await c.responses.create(model=then, previous_response_id=first.id,
                                          input="what is my name?")
    assert second.status == "completed"
    if then == LOCAL:
        sent = referee.requests[-1].json()["messages"]
        assert [m["role"] for m in sent] == ["user", "assistant", "user"]
        assert sent[0]["content"] == "my name is Ada"
    else:
        accepted = fake_responses.requests[-1].body
        assert "previous_response_id" not in accepted
        assert types(accepted["input"]) == ["message", "message", "message"]
        assert accepted["input"][0]["content"] == "my name is Ada"
