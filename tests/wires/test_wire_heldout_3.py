"""Held-out wire situations, third set: Responses / Messages histories an outsider sends that
test_wire_situations.py and test_wire_heldout.py do not (built-in tool items of every kind
with the output shapes they take, call ids left out or over 64 characters, ids of the wrong
item kind, arguments and outputs as objects, item references, breakpoints too many, out of
TTL order or on blank blocks, thinking that ends a turn as redacted thinking, interleaved
thinking, search results and MCP blocks, streamed repairs and refusals, chains of
``previous_response_id`` and Conversations API ``conversation`` continued through the
gateway, stateless reasoning chains under ``store: false``).

Each broken history is refused by the native fake with the provider's words and answered
through the gateway with ``x-gateway-repairs`` naming the repair; what the upstream got is
checked where the repair's shape matters. Each valid one (odd but valid shapes included)
arrives at the upstream byte for byte, unreported.
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

from tests.conftest import GatewayFactory
from tests.fakes.anthropic_rules import sign_thinking
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.responses_server import FakeResponses
from tests.wires.test_wire_heldout import (
    CUSTOM,
    PNG,
    WEB_TOOLS,
    ccall,
    cout,
    redacted,
    search_result,
    server_use,
)
from tests.wires.test_wire_situations import (
    CACHE,
    CACHE_1H,
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
Check = Callable[[list[Any]], None]


@dataclass
class Case:
    """A situation, and what must hold of the history the upstream finally accepted."""

    situation: Situation
    check: Check | None = None


# -- Responses: items ---------------------------------------------------------------------

SCREENSHOT = {"type": "computer_screenshot",
              "image_url": f"data:image/png;base64,{PNG}"}


def computer(call_id: str, item_id: str = "cu_1") -> dict[str, Any]:
    return {"type": "computer_call", "id": item_id, "call_id": call_id,
            "action": {"type": "click", "button": "left", "x": 10, "y": 20},
            "pending_safety_checks": [], "status": "completed"}


def computer_out(call_id: str) -> dict[str, Any]:
    return {"type": "computer_call_output", "call_id": call_id, "output": SCREENSHOT,
            "acknowledged_safety_checks": [{"id": "cu_sc_1", "code": "malicious_instructions",
                                            "message": "check the page"}]}


def shell(call_id: str) -> dict[str, Any]:
    return {"type": "local_shell_call", "id": "lsh_1", "call_id": call_id, "status": "completed",
            "action": {"type": "exec", "command": ["ls", "-la"], "env": {},
                       "working_directory": "/tmp"}}


def shell_out(call_id: str) -> dict[str, Any]:
    return {"type": "local_shell_call_output", "call_id": call_id, "output": "total 0\n"}


def shell_v2(call_id: str) -> dict[str, Any]:
    return {"type": "shell_call", "id": "sh_1", "call_id": call_id, "status": "completed",
            "action": {"commands": ["pytest -q"], "timeout_ms": 60000,
                       "max_output_length": 4096}}


def shell_v2_out(call_id: str) -> dict[str, Any]:
    return {"type": "shell_call_output", "call_id": call_id, "max_output_length": 4096,
            "output": [{"stdout": "3 passed", "stderr": "",
                        "outcome": {"type": "exit", "exit_code": 0}}]}


def patch(call_id: str) -> dict[str, Any]:
    return {"type": "apply_patch_call", "id": "apc_1", "call_id": call_id,
            "status": "completed", "operation": {"type": "update_file", "path": "a.py",
                                                 "diff": "@@\n-x\n+y\n"}}


def patch_out(call_id: str) -> dict[str, Any]:
    return {"type": "apply_patch_call_output", "call_id": call_id, "status": "completed",
            "output": "updated a.py"}


def shell_run_not_available(items: list[Any]) -> None:
    out = next(i for i in items if i.get("type") == "shell_call_output")
    assert out["output"][0]["outcome"] == {"type": "exit", "exit_code": 1}
    assert "not available" in out["output"][0]["stderr"]


def shell_run_as_sent(items: list[Any]) -> None:
    assert items[2] == shell_v2_out("call_sh") and len(items) == 4


def patch_failed(items: list[Any]) -> None:
    out = next(i for i in items if i.get("type") == "apply_patch_call_output")
    assert out["status"] == "failed" and "not available" in out["output"]


def without(item: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != key}


def types(items: list[Any]) -> list[str]:
    return [i.get("type", "message") for i in items]


def shell_output_synthesized(items: list[Any]) -> None:
    out = next(i for i in items if i.get("call_id") == "call_ls" and i is not items[2])
    assert out["type"] == "local_shell_call_output"
    assert "not available" in out["output"]


def computer_call_answered_or_gone(items: list[Any]) -> None:
    # The API takes only a screenshot as a computer call's output: a call whose output is
    # lost goes (with its reasoning), nothing is invented in its place.
    assert "computer_call" not in types(items)
    assert "computer_call_output" not in types(items)
    assert "reasoning" not in types(items)


def both_calls_paired(items: list[Any]) -> None:
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert calls == outputs and len(set(calls)) == 2 and all(calls)


def reasoning_kept(items: list[Any]) -> None:
    assert types(items) == ["message", "reasoning", "message", "message"]


def one_call_left(items: list[Any]) -> None:
    assert types(items).count("function_call") == 1


BRIDGE_ID = "cursor-pi-bridge-run-c2417032-9686-40f2-bd3c-a763fbaa7693-tool-"


def short_distinct_and_paired(items: list[Any]) -> None:
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert calls == outputs and len(set(calls)) == 2
    assert all(len(c) <= 64 for c in calls)


def outputs_in_the_order_sent(items: list[Any]) -> None:
    assert [i.get("call_id") for i in items[3:5]] == ["call_p2", "call_p1"]
    assert len(items) == 6


def serialized_as_json(items: list[Any]) -> None:
    assert orjson.loads(items[1]["arguments"]) == {"path": "a.py"}
    assert orjson.loads(items[2]["output"]) == {"text": "print(1)", "lines": 1}


IMAGE_GEN = {"type": "image_generation_call", "id": "ig_1", "status": "completed",
             "result": PNG}
MCP_TOOLS = {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "deepwiki",
             "tools": [{"name": "ask_question", "input_schema": {"type": "object"},
                        "annotations": None, "description": "ask"}]}
MCP_CALL = {"type": "mcp_call", "id": "mcp_1", "server_label": "deepwiki",
            "name": "ask_question", "arguments": '{"question": "what?"}',
            "output": "an answer", "error": None}
FILE_SEARCH = {"type": "file_search_call", "id": "fs_1", "status": "completed",
               "queries": ["refund policy"],
               "results": [{"file_id": "file-1", "filename": "policy.md", "score": 0.9,
                            "text": "30 days", "attributes": {}}]}
CODE = {"type": "code_interpreter_call", "id": "ci_1", "status": "completed",
        "container_id": "cntr_1", "code": "print(1)", "outputs": [{"type": "logs",
                                                                   "logs": "1"}]}
CITED = {"type": "message", "id": "msg_cited", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Refunds take 30 days.",
                      "annotations": [{"type": "url_citation", "url": "https://example.com",
                                       "title": "Policy", "start_index": 0, "end_index": 7}],
                      "logprobs": []}]}
THOUGHT = {"type": "reasoning", "id": "rs_sum", "encrypted_content": "gAAAA-own-sum",
           "summary": [{"type": "summary_text", "text": "**Planning** the answer"}]}

RESPONSES: dict[str, Case] = {
    "local shell call without its output": Case(Situation(
        {"input": [u("list"), rs("rs_ls"), shell("call_ls"), u("stop")]},
        ("tool_result_synthesized",), "No tool output found for local shell call call_ls",
        valid={"input": [u("list"), rs("rs_ls"), shell("call_ls"), shell_out("call_ls"),
                         u("thanks")]}), shell_output_synthesized),
    "shell call without its output": Case(Situation(
        {"input": [u("run the tests"), rs("rs_sh"), shell_v2("call_sh"), u("stop")],
         "tools": [{"type": "shell"}]},
        ("tool_result_synthesized",), "No tool output found for shell call call_sh",
        valid={"input": [u("run the tests"), rs("rs_sh"), shell_v2("call_sh"),
                         shell_v2_out("call_sh"), u("and now?")],
               "tools": [{"type": "shell"}]}), shell_run_not_available),
    "apply_patch call without its output": Case(Situation(
        {"input": [u("fix a.py"), patch("call_ap"), u("wait")],
         "tools": [{"type": "apply_patch"}]},
        ("tool_result_synthesized",), "No tool output found for apply patch call call_ap",
        valid={"input": [u("fix a.py"), patch("call_ap"), patch_out("call_ap"),
                         u("thanks")], "tools": [{"type": "apply_patch"}]}), patch_failed),
    "an orphan output after a shell run that is answered": Case(Situation(
        {"input": [u("run the tests"), shell_v2("call_sh"), shell_v2_out("call_sh"),
                   u("and?"), fout("call_gone")], "tools": [{"type": "shell"}]},
        ("orphan_tool_result_dropped",), "No tool call found for function call output"),
        shell_run_as_sent),
    "computer call without its output, after its reasoning": Case(Situation(
        {"input": [u("click it"), rs("rs_cu"), computer("call_cu"), u("stop, do it later")]},
        ("computer_call_dropped", "reasoning_item_dropped"),
        "No tool output found for computer call call_cu",
        valid={"input": [u("click it"), rs("rs_cu"), computer("call_cu"),
                         computer_out("call_cu"), u("thanks")]}),
        computer_call_answered_or_gone),
    "custom tool call carrying a function call's id": Case(Situation(
        {"input": [u("patch"), ccall("call_c", "fc_9"), cout("call_c"), u("go on")],
         "tools": CUSTOM},
        ("item_id_removed",), "Expected an ID that begins with 'ctc'",
        valid={"input": [u("patch"), ccall("call_c", "ctc_9"), cout("call_c"), u("go on")],
               "tools": CUSTOM})),
    "a function call appended twice, answered once": Case(Situation(
        {"input": [u("read"), fcall("call_d", "fc_d"), fcall("call_d", "fc_d"),
                   fout("call_d"), u("go on")], "tools": FN},
        ("duplicate_item_dropped",), "Duplicate item found with id fc_d"), one_call_left),
    "two calls and outputs without call_id fields": Case(Situation(
        {"input": [u("read both"), without(fcall("x", "fc_a"), "call_id"),
                   without(fcall("x", "fc_b"), "call_id"), without(fout("x"), "call_id"),
                   without(fout("x"), "call_id"), u("go on")], "tools": FN},
        ("call_id_synthesized",), "Missing required parameter: 'input[1].call_id'."),
        both_calls_paired),
    "call ids over 64 characters from a bridge, two sharing a prefix": Case(Situation(
        {"input": [u("read both"), fcall(BRIDGE_ID + "9", "fc_b9"),
                   fcall(BRIDGE_ID + "10", "fc_b10"), fout(BRIDGE_ID + "9"),
                   fout(BRIDGE_ID + "10"), u("go on")], "tools": FN},
        ("call_id_shortened",), "string too long. Expected a string with maximum length 64"),
        short_distinct_and_paired),
    "arguments and output as objects (a history converted from Messages)": Case(Situation(
        {"input": [u("read"), {**fcall("call_j", "fc_j"), "arguments": {"path": "a.py"}},
                   {**fout("call_j"), "output": {"text": "print(1)", "lines": 1}},
                   u("go on")], "tools": FN},
        ("tool_value_serialized",), "'input[1].arguments': expected a string, but got an object"),
        serialized_as_json),
    "an orphan output after parallel outputs in another order": Case(Situation(
        {"input": [u("read both"), fcall("call_p1", "fc_p1"), fcall("call_p2", "fc_p2"),
                   fout("call_p2"), fout("call_p1"), u("and?"), fout("call_gone")],
         "tools": FN},
        ("orphan_tool_result_dropped",), "No tool call found for function call output"),
        outputs_in_the_order_sent),
    "item_reference under store=false beside encrypted reasoning": Case(Situation(
        {"input": [u("hi"), {"type": "item_reference", "id": "msg_prev"}, rs("rs_keep"),
                   said("hello"), u("again")], "store": False},
        ("item_reference_dropped",), "Items are not persisted when `store`"),
        reasoning_kept),
}


async def run_case(gateway_factory: GatewayFactory, fake: FakeResponses, case: Case) -> None:
    """The situation's runner, then the check on the history the upstream accepted."""
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


# Odd but valid: every one reaches the upstream byte for byte, unreported.
RESPONSES_VALID: dict[str, dict[str, Any]] = {
    "reasoning, an image generation, the model's message": {"input": [
        u("draw a cat"), rs("rs_ig"), IMAGE_GEN, said("here it is", "msg_ig"),
        u("thanks")]},
    "mcp tools listed and called": {"input": [
        u("ask the wiki"), MCP_TOOLS, rs("rs_mcp"), MCP_CALL, said("it says so"),
        u("more")], "tools": [{"type": "mcp", "server_label": "deepwiki",
                                "server_url": "https://mcp.deepwiki.com/mcp",
                                "require_approval": "never"}]},
    "file search and code interpreter calls with a cited answer": {"input": [
        u("what is the refund policy?"), FILE_SEARCH, CODE, CITED, u("and exchanges?")]},
    "computer call answered by a screenshot, safety checks acknowledged": {"input": [
        u("click it"), computer("call_ok"), computer_out("call_ok"), u("now scroll")]},
    "reasoning before each of two parallel calls": {"input": [
        u("read both"), rs("rs_p1"), fcall("call_q1", "fc_q1"), rs("rs_p2"),
        fcall("call_q2", "fc_q2"), fout("call_q1"), fout("call_q2"), u("go on")],
        "tools": FN},
    "a function output made of text and an image": {"input": [
        u("screenshot"), fcall("call_img", "fc_img"),
        {"type": "function_call_output", "call_id": "call_img", "output": [
            {"type": "input_text", "text": "the screen:"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}",
             "detail": "low"}]}, u("describe it")], "tools": FN},
    "files and images by id in a user message": {"input": [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "compare"},
            {"type": "input_file", "file_id": "file-abc"},
            {"type": "input_image", "file_id": "file-img", "detail": "auto"}]}],
        "instructions": "be brief"},
    "reasoning with a summary, then the easy-form assistant message": {"input": [
        u("hi"), THOUGHT, {"role": "assistant", "content": "hello"}, u("again")]},
    "system and developer messages between user turns": {"input": [
        {"role": "system", "content": "be brief"}, u("hi"), said("hello"),
        {"role": "developer", "content": [{"type": "input_text", "text": "use metric"}]},
        u("how far?")]},
    "every field a current client sets, with custom and allowed tools": {
        "input": [{"type": "message", "id": "msg_u1", "role": "user",
                   "content": [{"type": "input_text", "text": "patch it"}]},
                  ccall("call_g", "ctc_g"), cout("call_g"), u("go on")],
        "tools": [*FN, {"type": "custom", "name": "apply_patch", "description": "patch",
                        "format": {"type": "grammar", "syntax": "lark",
                                   "definition": "start: /.+/"}},
                  {"type": "web_search", "filters": {"allowed_domains": ["example.com"]}}],
        "tool_choice": {"type": "allowed_tools", "mode": "auto",
                        "tools": [{"type": "function", "name": "read_file"}]},
        "text": {"format": {"type": "json_schema", "name": "answer", "strict": True,
                            "schema": {"type": "object", "properties": {},
                                       "additionalProperties": False}},
                 "verbosity": "low"},
        "reasoning": {"effort": "minimal", "summary": "auto"}, "max_tool_calls": 3,
        "parallel_tool_calls": False, "service_tier": "flex", "prompt_cache_key": "s-1",
        "safety_identifier": "user-1", "metadata": {"run": "7"}, "truncation": "auto",
        "max_output_tokens": 500, "top_logprobs": 2, "user": "u"},
    "encrypted reasoning under store=false with include": {
        "input": [u("read"), rs("rs_sf"), fcall("call_sf", "fc_sf"), fout("call_sf"),
                  rs("rs_sf2"), said("done", "msg_sf"), u("go on")],
        "tools": FN, "store": False, "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "low"}},
}


@pytest.mark.parametrize("name", list(RESPONSES_VALID))
async def test_valid_responses_input_arrives_as_sent(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses, name: str) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    await assert_arrives_as_sent(gw, f"{gw.base_url}/responses",
                                 {"model": GPT, **RESPONSES_VALID[name]}, OPENAI_AUTH,
                                 fake_responses)


# -- Responses: streams and chains -------------------------------------------------------


async def test_a_repaired_input_streams_with_its_repairs_reported(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    items = [u("list"), shell("call_ls"), u("then say hi")]
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        raw = await c.responses.with_raw_response.create(model=GPT, input=items,  # type: ignore[arg-type]
                                                         stream=True)
        events = [event async for event in raw.parse()]
    assert raw.headers["x-gateway-repairs"] == "tool_result_synthesized=1"
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text.endswith("then say hi")  # type: ignore[union-attr]
    sent = fake_responses.requests[-1].body
    assert sent["stream"] is True
    assert types(sent["input"])[2] == "local_shell_call_output"


async def test_a_refused_stream_is_resent_stateless(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # Encrypted reasoning another organisation made: the provider refuses before the first
    # event, the strict rung drops it, and the client's stream is the resent one.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    items = [u("read"), rs("rs_x", "enc-elsewhere"), fcall("call_1", "fc_1"), fout("call_1"),
             u("go on")]
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c, c.responses.stream(
            model=GPT, input=items, tools=FN) as stream:  # type: ignore[arg-type]
        text = "".join([e.delta async for e in stream if e.type == "response.output_text.delta"])
    assert text == "you said: go on"
    refused, resent = fake_responses.requests[-2].body, fake_responses.requests[-1].body
    assert refused["input"] == items
    assert "reasoning" not in types(resent["input"])
    assert all("id" not in i for i in resent["input"])  # its items tied to it, unlinked


async def _post(url: str, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient() as c:
        return await c.post(url, content=orjson.dumps(body),
                            headers={**OPENAI_AUTH, "content-type": "application/json"})


async def test_a_tool_chain_continued_by_id_goes_as_sent_at_every_turn(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    url = f"{gw.base_url}/responses"
    first = await _post(url, {"model": GPT, "input": "read TOOL a", "tools": FN})
    call = first.json()["output"][0]
    turns = [
        {"model": GPT, "previous_response_id": first.json()["id"], "tools": FN,
         "input": [{"type": "function_call_output", "call_id": call["call_id"],
                    "output": "alpha"}]},
        {"model": GPT, "tools": FN, "input": [u("and now TOOL b")]},
        {"model": GPT, "tools": FN, "input": [{"type": "function_call_output",
                                                "output": "beta"}]},
    ]
    previous = first.json()
    for n, turn in enumerate(turns):
        if n:
            turn["previous_response_id"] = previous["id"]
        if n == 2:
            turn["input"][0]["call_id"] = previous["output"][0]["call_id"]
        answer = await _post(url, turn)
        assert answer.status_code == 200, answer.text
        assert "x-gateway-repairs" not in answer.headers
        assert fake_responses.requests[-1].raw == orjson.dumps(turn)
        previous = answer.json()
    assert previous["output"][0]["content"][0]["text"] == "tool results: alpha; beta"


async def test_a_streamed_tool_call_is_continued_by_id_in_a_stream(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        async with c.responses.stream(model=GPT, input="read TOOL a", tools=FN) as stream:  # type: ignore[arg-type]
            first = await stream.get_final_response()
        call = first.output[0]
        assert call.type == "function_call"
        output = [{"type": "function_call_output", "call_id": call.call_id, "output": "42"}]
        async with c.responses.stream(model=GPT, input=output, tools=FN,  # type: ignore[arg-type]
                                      previous_response_id=first.id) as stream:
            second = await stream.get_final_response()
    assert second.output_text == "tool results: 42"
    sent = fake_responses.requests[-1].body
    assert sent["previous_response_id"] == first.id and sent["input"] == output


async def test_a_stateless_reasoning_chain_is_sent_back_whole_and_untouched(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # store=false with include=["reasoning.encrypted_content"] (zero data retention): the
    # client sends every output item back, reasoning with its encrypted content and ids.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    url = f"{gw.base_url}/responses"
    settings = {"model": GPT, "store": False, "reasoning": {"effort": "low"},
                "include": ["reasoning.encrypted_content"], "tools": FN}
    history: list[Any] = [u("read TOOL a")]
    first = (await _post(url, {**settings, "input": history})).json()
    assert types(first["output"]) == ["reasoning", "function_call"]
    history += first["output"] + [{"type": "function_call_output",
                                   "call_id": first["output"][1]["call_id"], "output": "x"}]
    second = await _post(url, {**settings, "input": history})
    assert "x-gateway-repairs" not in second.headers
    assert fake_responses.requests[-1].raw == orjson.dumps({**settings, "input": history})
    history += [*second.json()["output"], u("thanks")]
    third = await _post(url, {**settings, "input": history})
    assert third.status_code == 200 and "x-gateway-repairs" not in third.headers
    assert fake_responses.requests[-1].raw == orjson.dumps({**settings, "input": history})


# -- Messages ----------------------------------------------------------------------------

MCP_USE = {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "ask_question",
           "server_name": "deepwiki", "input": {"question": "what?"}}
MCP_RESULT = {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "is_error": False,
              "content": [text("an answer")]}
MCP_SERVERS = [{"type": "url", "url": "https://mcp.deepwiki.com/mcp", "name": "deepwiki"}]
DOCUMENT = {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                           "data": "The grass is green."},
            "title": "Facts", "citations": {"enabled": True}}
CITED_TEXT = text("The grass is green.", citations=[{
    "type": "char_location", "cited_text": "The grass is green.", "document_index": 0,
    "document_title": "Facts", "start_char_index": 0, "end_char_index": 19}])
SEARCH_RESULT = {"type": "search_result", "source": "https://example.com/kb/1",
                 "title": "Refunds", "content": [text("Refunds take 30 days.")],
                 "citations": {"enabled": True}}
FETCH_USE = {"type": "server_tool_use", "id": "srvtoolu_f", "name": "web_fetch",
             "input": {"url": "https://example.com"}}
FETCH_RESULT = {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_f", "content": {
    "type": "web_fetch_result", "url": "https://example.com", "retrieved_at": None,
    "content": {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                               "data": "Example"}, "title": "Example"}}}
FETCH_TOOLS = [{"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 2}]


def breakpoint_kept_on_the_next_block(body: dict[str, Any]) -> None:
    assert body["messages"][0]["content"] == [text("read", cache_control=CACHE)]


def four_breakpoints_no_hour_after_minutes(body: dict[str, Any]) -> None:
    blocks = [*body["system"], *(b for m in body["messages"] for b in m["content"])]
    ttls = [b["cache_control"].get("ttl", "5m") for b in blocks if "cache_control" in b]
    assert len(ttls) == 4 and ttls == sorted(ttls)  # ("1h" sorts before "5m")
    assert blocks[0]["cache_control"] == CACHE  # the stable head stays marked


def tool_uses_unique_and_answered_once(body: dict[str, Any]) -> None:
    turn, answers = body["messages"][1]["content"], body["messages"][2]["content"]
    assert [b["id"] for b in turn if b["type"] == "tool_use"] == ["t1"]
    assert [b.get("tool_use_id") for b in answers] == ["t1", None]


def result_moved_under_a_valid_id(body: dict[str, Any]) -> None:
    call = body["messages"][1]["content"][0]
    assert call["id"] != "call:read/0" and body["messages"][2]["content"][0] == {
        **result("call:read/0"), "tool_use_id": call["id"]}


def system_breakpoint_on_the_rules(body: dict[str, Any]) -> None:
    assert body["system"] == [text("rules", cache_control=CACHE_1H)]


def breakpoint_on_the_turn_before(body: dict[str, Any]) -> None:
    assert body["messages"][1]["content"] == [text("ok", cache_control=CACHE)]
    assert body["messages"][2:] == [um("go on")]


CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "a blank turn carrying the breakpoint between two others": breakpoint_on_the_turn_before,
    "an empty first system block carrying the breakpoint": system_breakpoint_on_the_rules,
    "cache_control on an empty text block that opens the turn":
        breakpoint_kept_on_the_next_block,
    "six breakpoints, one-hour ones after five-minute ones":
        four_breakpoints_no_hour_after_minutes,
    "one id for two parallel tool_uses in one turn": tool_uses_unique_and_answered_once,
    "another provider's tool id, its result two turns late": result_moved_under_a_valid_id,
}


MESSAGES: dict[str, Situation] = {
    "redacted thinking ending an assistant turn": Situation(
        {"messages": [um("hi"), am(text("hello"), redacted()), um("again")]},
        ("thinking_block_dropped",), "cannot be `thinking`",
        valid={"messages": [um("hi"), am(redacted(), text("hello")), um("again")]}),
    "whitespace text before a tool_use": Situation(
        {"messages": [um("read"), am(text(" \n"), uses("t1")), um(result("t1"))],
         "tools": TOOLS},
        ("empty_content_dropped",), "text content blocks must contain non-whitespace text",
        valid={"messages": [um("read"), am(text("reading"), uses("t1")), um(result("t1"))],
               "tools": TOOLS}),
    "one id for two parallel tool_uses in one turn": Situation(
        {"messages": [um("read both"), am(uses("t1"), uses("t1")),
                      um(result("t1"), text("go on"))], "tools": TOOLS},
        ("duplicate_tool_call_deduped",), "`tool_use` ids must be unique", strict=True),
    "six breakpoints, one-hour ones after five-minute ones": Situation(
        {"system": [text("rules", cache_control=CACHE), text("more", cache_control=CACHE_1H)],
         "messages": [um(text("a", cache_control=CACHE)), am(text("b", cache_control=CACHE_1H)),
                      um(text("c", cache_control=CACHE)), am(text("d")),
                      um(text("e", cache_control=CACHE_1H))]},
        ("cache_breakpoint_removed", "cache_ttl_adjusted"),
        "must not come after a ttl='5m' cache_control block",
        valid={"system": [text("rules", cache_control=CACHE_1H),
                          text("more", cache_control=CACHE_1H)],
               "messages": [um(text("a", cache_control=CACHE)), am(text("b")),
                            um(text("c", cache_control=CACHE)), am(text("d")),
                            um(text("e"))]}),
    "cache_control on an empty text block that opens the turn": Situation(
        {"messages": [um(text("", cache_control=CACHE), text("read"))]},
        ("cache_breakpoint_moved",), "cache_control cannot be set for empty text blocks"),
    "a blank turn carrying the breakpoint between two others": Situation(
        {"messages": [um("read"), am(text("ok")), um(text("", cache_control=CACHE)),
                      um("go on")]},
        ("cache_breakpoint_moved", "empty_content_dropped"),
        "cache_control cannot be set for empty text blocks"),
    "unsigned thinking opening the turn whose tool call is answered": Situation(
        {"messages": [um("read"), am(think("plan", signature=""), uses("t1")),
                      um(result("t1"))], "tools": TOOLS, "thinking": THINKING_ON},
        ("thinking_block_dropped", "thinking_disabled"), "signature: Field required"),
    "thinking on, a tool turn without it, its results and the user's words apart": Situation(
        {"messages": [um("read"), am(text("reading"), uses("t1")), um(result("t1")),
                      um("and summarize")], "tools": TOOLS, "thinking": THINKING_ON},
        ("thinking_disabled",), "must start with a thinking block",
        valid={"messages": [um("read"), am(think("plan"), text("reading"), uses("t1")),
                            um(result("t1")), um("and summarize")], "tools": TOOLS,
               "thinking": THINKING_ON}),
    "another provider's tool id, its result two turns late": Situation(
        {"messages": [um("read"), am(uses("call:read/0")), um("are you there?"),
                      am(text("yes")), um(result("call:read/0"), text("here"))],
         "tools": TOOLS},
        ("tool_id_rewritten", "tool_result_reordered"), "String should match pattern"),
    "system role messages as blocks beside a system list": Situation(
        {"system": [text("be brief", cache_control=CACHE)], "messages": [
            um("hi"), am(text("hello")),
            {"role": "system", "content": [text("use metric")]}, um("how far?")]},
        ("system_message_lifted",), 'Unexpected role "system"'),
    "tool_use input a JSON string that holds a list": Situation(
        {"messages": [um("read"), am({"type": "tool_use", "id": "t1", "name": "read_file",
                                      "input": "[1, 2]"}), um(result("t1"))],
         "tools": TOOLS},
        ("tool_input_parsed",), "tool_use.input: Input should be a valid dictionary"),
    "blank text beside an image in a tool result": Situation(
        {"messages": [um("shot"), am(uses("t1")), um(
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                text(""), {"type": "image", "source": {"type": "base64",
                                                      "media_type": "image/png",
                                                      "data": PNG}}]})], "tools": TOOLS},
        ("empty_content_dropped",), "text content blocks must be non-empty"),
    "an empty first system block carrying the breakpoint": Situation(
        {"system": [text("", cache_control=CACHE_1H), text("rules")],
         "messages": [um("hi")]},
        ("empty_content_dropped",), "system: text content blocks must be non-empty"),
    "mcp_tool_result without its mcp_tool_use": Situation(
        {"messages": [um("ask the wiki"), am(MCP_USE, MCP_RESULT, text("it says")),
                      um("again"), am(MCP_RESULT, text("still")), um("ok")]},
        ("orphan_tool_result_dropped",),
        "unexpected `tool_use_id` found in `mcp_tool_result` blocks",
        valid={"messages": [um("ask the wiki"), am(MCP_USE, MCP_RESULT, text("it says")),
                            um("again")], "mcp_servers": MCP_SERVERS}),
    "two tool_results with the user's text between them": Situation(
        {"messages": [um("read both"), am(uses("t1"), uses("t2")),
                      um(result("t1"), text("also"), result("t2"))], "tools": TOOLS},
        ("tool_result_reordered",), "Did not find 1 `tool_result` block(s) at the beginning",
        valid={"messages": [um("read both"), am(uses("t1"), uses("t2")),
                            um(result("t2"), result("t1"), text("also"))], "tools": TOOLS}),
    "a turn split over two assistant messages, its second call unanswered": Situation(
        {"messages": [um("read both"), am(text("reading"), uses("t1")), am(uses("t2")),
                      um(result("t1"), text("go on"))], "tools": TOOLS},
        ("tool_result_synthesized",), "ids were found without `tool_result` blocks",
        valid={"messages": [um("read both"), am(text("reading"), uses("t1")), am(uses("t2")),
                            um(result("t1"), result("t2"), text("go on"))], "tools": TOOLS}),
    "thinking signed for another conversation before a web search": Situation(
        {"system": "new prompt", "messages": [
            um("weather?"), am(think("old", "EqQBCkYIBxgCKkA-foreign"),
                               server_use("srvtoolu_1"), search_result("srvtoolu_1"),
                               text("sunny")), um("and tomorrow?")], "tools": WEB_TOOLS},
        ("thinking_block_dropped",), "cannot be modified", strict=True),
}


@pytest.mark.parametrize("name", list(MESSAGES))
async def test_messages_heldout(gateway_factory: GatewayFactory, name: str) -> None:
    await run_messages_case(gateway_factory, MESSAGES[name])


@pytest.mark.parametrize("name", list(CHECKS))
async def test_what_a_repaired_history_keeps(gateway_factory: GatewayFactory,
                                             name: str) -> None:
    # The repair keeps what the client meant: a breakpoint, the stable head, one call per id.
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            await c.messages.create(model=CLAUDE, max_tokens=64, **MESSAGES[name].broken)
        CHECKS[name](fake.requests[-1].body)


MESSAGES_VALID: dict[str, dict[str, Any]] = {
    "a cited document and the answer citing it": {"messages": [
        um(DOCUMENT, text("what colour is the grass?")), am(CITED_TEXT),
        um("and the sky?")]},
    "search results in a tool result": {"messages": [
        um("refunds?"), am(uses("t1")),
        um({"type": "tool_result", "tool_use_id": "t1", "content": [SEARCH_RESULT]})],
        "tools": TOOLS},
    "a web fetch answered in the same turn": {"messages": [
        um("fetch it"), am(FETCH_USE, FETCH_RESULT, text("it says Example")),
        um("thanks")], "tools": FETCH_TOOLS},
    "mcp tool use and its result": {"messages": [
        um("ask the wiki"), am(MCP_USE, MCP_RESULT, text("it says")), um("again")],
        "mcp_servers": MCP_SERVERS},
    "an error tool result with an image, and one without content": {"messages": [
        um("shoot both"), am(uses("t1"), uses("t2")),
        um({"type": "tool_result", "tool_use_id": "t1", "is_error": True,
            "content": [text("partial"), {"type": "image", "source": {
                "type": "base64", "media_type": "image/png", "data": PNG}}]},
           {"type": "tool_result", "tool_use_id": "t2"})], "tools": TOOLS},
    "redacted thinking, then thinking, then the tool call": {"messages": [
        um("read"), am(redacted(), think("plan"), uses("t1")), um(result("t1"))],
        "tools": TOOLS, "thinking": THINKING_ON},
    "breakpoints one-hour first, four in all": {
        "tools": [{**TOOLS[0], "cache_control": CACHE_1H}],
        "system": [text("rules", cache_control=CACHE_1H)],
        "messages": [um(text("a", cache_control=CACHE)), am(text("b")),
                     um(text("c", cache_control=CACHE))]},
    "a tool result turn, then the user's words as their own turn": {"messages": [
        um("read"), am(uses("t1")), um(result("t1")), um("and summarize")],
        "tools": TOOLS},
    "an empty final assistant message": {"messages": [
        um("say something"), {"role": "assistant", "content": []}]},
    "forced tool choice with an empty tool input": {"messages": [
        um("ping"), am({"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}),
        um(result("t1"))], "tools": TOOLS, "tool_choice": {"type": "any"}},
    "a paused turn sent back to be continued, ending in a server tool call": {
        "tools": WEB_TOOLS, "messages": [
            um("research the weather"),
            am(server_use("srvtoolu_1"), search_result("srvtoolu_1"), text("More to check."),
               {**server_use("srvtoolu_2"), "input": {"query": "forecast"}})]},
    "a signed thinking block whose text is empty": {"thinking": THINKING_ON, "messages": [
        um("hi"), am(think(""), text("hello")), um("again")]},
    "every field a current client sets, with a fine-grained tool": {
        "system": [text("be brief")], "metadata": {"user_id": "u-1"},
        "stop_sequences": ["\n\nHuman:"], "temperature": 0.2, "top_k": 5,
        "service_tier": "auto", "tool_choice": {"type": "auto",
                                                "disable_parallel_tool_use": True},
        "tools": [{**TOOLS[0], "type": "custom", "strict": True,
                   "input_examples": [{"path": "a.py"}]},
                  {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}],
        "messages": [um("read"), am(uses("t1")), um(result("t1"))]},
    "thinking on, an earlier tool turn made before it was switched on": {
        "thinking": THINKING_ON, "tools": TOOLS, "messages": [
            um("read a"), am(text("reading"), uses("t1")), um(result("t1")),
            am(text("done")), um("now b"), am(think("b next"), uses("t2")),
            um(result("t2"))]},
    "thinking on, a tool turn spanning two assistant messages": {
        "thinking": THINKING_ON, "tools": TOOLS, "messages": [
            um("read"), am(think("plan"), uses("t1")), am(text("reading it")),
            um(result("t1"))]},
    "automatic caching at the top level, with a container": {
        "cache_control": CACHE, "container": "container_1",
        "messages": [um("hi"), am(text("hello")), um("again")]},
}


@pytest.mark.parametrize("name", list(MESSAGES_VALID))
async def test_valid_messages_arrive_as_sent(gateway_factory: GatewayFactory,
                                             name: str) -> None:
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        await assert_arrives_as_sent(gw, f"{gw.root}/v1/messages",
                                     {"model": CLAUDE, "max_tokens": 64,
                                      **MESSAGES_VALID[name]}, ANTHROPIC_AUTH, fake)


async def test_a_valid_history_is_counted_as_sent(gateway_factory: GatewayFactory) -> None:
    body = {"model": CLAUDE, "thinking": THINKING_ON, "tools": TOOLS, "messages": [
        um("read"), am(redacted(), think("plan"), uses("t1")), um(result("t1"))]}
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with httpx.AsyncClient() as c:
            answer = await c.post(f"{gw.root}/v1/messages/count_tokens",
                                  content=orjson.dumps(body),
                                  headers={**ANTHROPIC_AUTH, "content-type": "application/json"})
        assert answer.status_code == 200 and answer.json()["input_tokens"] > 0
        assert "x-gateway-repairs" not in answer.headers
        assert fake.requests[-1].raw == orjson.dumps(body)


INTERLEAVED = "interleaved-thinking-2025-05-14"


async def test_interleaved_thinking_after_a_server_tool_goes_as_sent(
        gateway_factory: GatewayFactory) -> None:
    # With the interleaved-thinking beta a turn thinks again after a server tool's result;
    # without it, the same turn has its late thinking moved to the front.
    body = {"model": CLAUDE, "max_tokens": 64, "thinking": THINKING_ON, "tools": WEB_TOOLS,
            "messages": [um("weather?"), am(think("search first"), server_use("srvtoolu_1"),
                                            search_result("srvtoolu_1"), think("it is sunny"),
                                            text("sunny")), um("and tomorrow?")]}
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        await assert_arrives_as_sent(gw, f"{gw.root}/v1/messages", body,
                                     {**ANTHROPIC_AUTH, "anthropic-beta": INTERLEAVED}, fake)
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            raw = await c.messages.with_raw_response.create(**body)  # type: ignore[arg-type]
        assert raw.headers["x-gateway-repairs"] == "thinking_block_moved=1"
        turn = fake.requests[-1].body["messages"][1]["content"]
        assert [b["type"] for b in turn] == ["thinking", "thinking", "server_tool_use",
                                             "web_search_tool_result", "text"]


async def test_a_repaired_history_streams_with_its_repairs_reported(
        gateway_factory: GatewayFactory) -> None:
    messages = MESSAGES["whitespace text before a tool_use"].broken["messages"]
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            raw = await c.messages.with_raw_response.create(
                model=CLAUDE, max_tokens=64, messages=messages, tools=TOOLS,  # type: ignore[arg-type]
                stream=True)
            events = [event async for event in await raw.parse()]
        assert raw.headers["x-gateway-repairs"] == "empty_content_dropped=1"
        assert events[-1].type == "message_stop"
        said_text = "".join(e.delta.text for e in events if e.type == "content_block_delta"
                            and e.delta.type == "text_delta")
        assert said_text == "tool results: contents"
        assert fake.requests[-1].body["messages"][1]["content"] == [uses("t1")]


async def test_a_refused_signature_is_dropped_and_the_stream_is_the_resent_one(
        gateway_factory: GatewayFactory) -> None:
    case = MESSAGES["thinking signed for another conversation before a web search"]
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c, c.messages.stream(
                model=CLAUDE, max_tokens=64, **case.broken) as stream:
            said_text = "".join([t async for t in stream.text_stream])
        assert said_text == "you said: and tomorrow?"
        refused, resent = fake.requests[-2].body, fake.requests[-1].body
        assert refused["messages"] == case.broken["messages"]
        assert [b["type"] for b in resent["messages"][1]["content"]] == [
            "server_tool_use", "web_search_tool_result", "text"]


async def test_a_signed_turn_continues_with_thinking_on_through_two_tool_rounds(
        gateway_factory: GatewayFactory) -> None:
    # An agent loop as Claude Code runs it: each answer's signed thinking and tool_use go
    # back as they came, with the results; every request arrives byte for byte.
    turn1 = am(think("need a"), uses("toolu_a"))
    turn2 = am(redacted(), think("need b"), uses("toolu_b"))
    history = [um("read a then b"), turn1, um(result("toolu_a")), turn2,
               um(result("toolu_b"), text("now summarize"))]
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        for end in (3, 5):
            await assert_arrives_as_sent(
                gw, f"{gw.root}/v1/messages",
                {"model": CLAUDE, "max_tokens": 64, "thinking": THINKING_ON, "tools": TOOLS,
                 "messages": history[:end]}, ANTHROPIC_AUTH, fake)
    assert sign_thinking("need b") in fake.requests[-1].raw.decode()


async def _first_call(gw_url: str, fake: FakeResponses, via_gateway: bool) -> dict[str, Any]:
    """A first response ending in a function call, made through the gateway (which keeps
    it) or at the provider directly (the gateway never saw it)."""
    body = {"model": GPT, "input": "read TOOL a", "tools": FN}
    if via_gateway:
        answer = await _post(f"{gw_url}/responses", body)
    else:
        async with httpx.AsyncClient() as direct:
            answer = await direct.post(f"{fake.base_url}/v1/responses", json=body,
                                       headers={"authorization": "Bearer upstream-openai-key"})
    first: dict[str, Any] = answer.json()
    assert first["output"][0]["type"] == "function_call"
    return first


@pytest.mark.parametrize("via_gateway", [True, False], ids=["kept", "never-seen"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_call_of_the_continued_response_left_unanswered_gets_its_output(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses, stream: bool,
        via_gateway: bool) -> None:
    # The user moved on while the tool of the stored response never ran. A response the
    # gateway kept is paired up front; one it never saw, on the provider's refusal ("No
    # tool output found for function call ...").
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    first = await _first_call(gw.base_url, fake_responses, via_gateway)
    before = len(fake_responses.requests)
    new_input = [u("never mind, say hi")]
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        raw = await c.responses.with_raw_response.create(
            model=GPT, previous_response_id=first["id"], input=new_input, tools=FN,  # type: ignore[arg-type]
            stream=stream)
        if stream:
            events = [event async for event in raw.parse()]  # type: ignore[union-attr]
            assert events[-1].type == "response.completed"
            answer = events[-1].response  # type: ignore[union-attr]
        else:
            answer = raw.parse()
    assert answer.output_text.startswith("you said:")
    assert raw.headers["x-gateway-repairs"] == "tool_result_synthesized=1"
    sent = fake_responses.requests[before:]
    assert len(sent) == (1 if via_gateway else 2)
    if not via_gateway:
        assert raw.headers["x-gateway-recovery"] == "strict"
        assert sent[0].body["input"] == new_input
    resent = sent[-1].body
    assert resent["previous_response_id"] == first["id"]
    assert resent["input"][0]["call_id"] == first["output"][0]["call_id"]
    assert resent["input"][1:] == new_input


@pytest.mark.parametrize("via_gateway", [True, False], ids=["kept", "never-seen"])
async def test_an_output_no_call_of_the_continued_response_made_is_dropped(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses,
        via_gateway: bool) -> None:
    # An output left over from another conversation, beside the right one ("No tool call
    # found for function call output ..." from the provider when the gateway kept nothing).
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    first = await _first_call(gw.base_url, fake_responses, via_gateway)
    before = len(fake_responses.requests)
    new_input = [{"type": "function_call_output", "call_id": first["output"][0]["call_id"],
                  "output": "a!"},
                 {"type": "function_call_output", "call_id": "call_elsewhere",
                  "output": "old"}]
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        raw = await c.responses.with_raw_response.create(
            model=GPT, previous_response_id=first["id"], input=new_input, tools=FN)  # type: ignore[arg-type]
    assert raw.parse().output_text == "tool results: a!"
    assert raw.headers["x-gateway-repairs"] == "orphan_tool_result_dropped=1"
    assert len(fake_responses.requests[before:]) == (1 if via_gateway else 2)
    assert fake_responses.requests[-1].body["input"] == new_input[:1]


async def test_a_conversation_of_the_conversations_api_goes_as_sent(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # With ``conversation`` the history lives upstream, as with previous_response_id: an
    # output whose call the conversation holds is no orphan, and goes as sent.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    async with httpx.AsyncClient() as direct:
        made = await direct.post(f"{fake_responses.base_url}/v1/conversations", json={},
                                 headers={"authorization": "Bearer upstream-openai-key"})
    conversation = made.json()["id"]
    url = f"{gw.base_url}/responses"
    first = await _post(url, {"model": GPT, "conversation": conversation,
                              "input": "read TOOL a", "tools": FN})
    call = first.json()["output"][0]
    turn = {"model": GPT, "conversation": conversation, "tools": FN,
            "input": [{"type": "function_call_output", "call_id": call["call_id"],
                       "output": "alpha"}]}
    answer = await _post(url, turn)
    assert answer.status_code == 200, answer.text
    assert "x-gateway-repairs" not in answer.headers
    assert fake_responses.requests[-1].raw == orjson.dumps(turn)
    assert answer.json()["output"][0]["content"][0]["text"] == "tool results: alpha"
    # A call the conversation holds, left unanswered when the user moved on: the strict
    # rung answers it there too.
    again = await _post(url, {"model": GPT, "conversation": conversation, "tools": FN,
                              "input": "now TOOL b"})
    moved_on = await _post(url, {"model": GPT, "conversation": conversation, "tools": FN,
                                 "input": [u("never mind")]})
    assert moved_on.status_code == 200, moved_on.text
    assert moved_on.headers["x-gateway-repairs"] == "tool_result_synthesized=1"
    assert fake_responses.requests[-1].body["input"][0]["call_id"] == \
        again.json()["output"][0]["call_id"]


async def test_an_output_answering_a_referenced_call_goes_as_sent(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # item_reference stands for a stored item, here the model's function call: the output
    # after it answers that call, and the input is valid as sent.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    url = f"{gw.base_url}/responses"
    first = (await _post(url, {"model": GPT, "input": "read TOOL a", "tools": FN})).json()
    call = first["output"][0]
    turn = {"model": GPT, "tools": FN, "input": [
        u("read TOOL a"), {"type": "item_reference", "id": call["id"]},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "alpha"}]}
    answer = await _post(url, turn)
    assert answer.status_code == 200, answer.text
    assert "x-gateway-repairs" not in answer.headers
    assert fake_responses.requests[-1].raw == orjson.dumps(turn)


async def test_an_output_after_a_reference_that_no_longer_resolves_is_dropped_with_it(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    items = [u("read"), {"type": "item_reference", "id": "fc_expired"}, fout("call_exp"),
             u("go on")]
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        raw = await c.responses.with_raw_response.create(model=GPT, input=items, tools=FN)  # type: ignore[arg-type]
    assert raw.parse().output_text == "you said: read go on"
    assert raw.headers["x-gateway-recovery"] == "strict"
    repairs = raw.headers["x-gateway-repairs"]
    assert "item_reference_dropped=1" in repairs and "orphan_tool_result_dropped=1" in repairs
    refused, resent = fake_responses.requests[-2].body, fake_responses.requests[-1].body
    assert refused["input"] == items  # as sent first: the reference might have resolved
    assert resent["input"] == [u("read"), u("go on")]


async def test_stored_reasoning_sent_back_by_id_only_goes_as_sent(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # store=true: a reasoning item the provider keeps may come back as its id and summary
    # alone (no encrypted_content); it resolves upstream and is sent as written.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    url = f"{gw.base_url}/responses"
    settings = {"model": GPT, "reasoning": {"effort": "low"}, "tools": FN}
    first = (await _post(url, {**settings, "input": [u("read TOOL a")]})).json()
    thought, call = first["output"]
    history = [u("read TOOL a"), {"type": "reasoning", "id": thought["id"], "summary": []},
               call, {"type": "function_call_output", "call_id": call["call_id"],
                      "output": "x"}]
    answer = await _post(url, {**settings, "input": history})
    assert answer.status_code == 200, answer.text
    assert "x-gateway-repairs" not in answer.headers
    assert fake_responses.requests[-1].raw == orjson.dumps({**settings, "input": history})


async def test_valid_streamed_requests_arrive_as_sent_on_both_wires(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    responses_body = {"model": GPT, "stream": True, **RESPONSES_VALID[
        "reasoning before each of two parallel calls"]}
    messages_body = {"model": CLAUDE, "max_tokens": 64, "stream": True, **MESSAGES_VALID[
        "redacted thinking, then thinking, then the tool call"]}
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory(native_config(fake_responses.base_url, fake.base_url))
        for url, body, headers, upstream in (
                (f"{gw.base_url}/responses", responses_body, OPENAI_AUTH, fake_responses),
                (f"{gw.root}/v1/messages", messages_body, ANTHROPIC_AUTH, fake)):
            raw = orjson.dumps(body)
            async with httpx.AsyncClient() as c, c.stream(
                    "POST", url, content=raw,
                    headers={**headers, "content-type": "application/json"}) as answer:
                events = (await answer.aread()).decode()
            assert answer.status_code == 200
            assert "x-gateway-repairs" not in answer.headers
            assert upstream.requests[-1].raw == raw
            assert "response.completed" in events or "message_stop" in events


async def test_a_stored_response_ending_in_lone_reasoning_is_continued_from_the_kept_history(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # The upstream holds a response whose reasoning lost its following item (cut off):
    # continuing it by id is refused ("... of type 'reasoning' was provided without its
    # required following item") however the new input looks. The gateway kept that
    # response whole: it sends the conversation instead, repaired.
    gw = await gateway_factory(native_config(fake_responses.base_url, "http://127.0.0.1:9"))
    settings = {"model": GPT, "reasoning": {"effort": "low"}, "tools": FN}
    first = (await _post(f"{gw.base_url}/responses",
                         {**settings, "input": [u("read TOOL a")]})).json()
    assert types(first["output"]) == ["reasoning", "function_call"]
    stored = fake_responses.stored[first["id"]]
    fake_responses.stored[first["id"]] = stored[:-1]  # its call lost upstream
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        raw = await c.responses.with_raw_response.create(
            **settings, previous_response_id=first["id"], input=[u("never mind, hi")])  # type: ignore[arg-type]
    assert raw.parse().output_text.startswith("you said:")
    repairs = raw.headers["x-gateway-repairs"]
    assert "previous_response_expanded=1" in repairs and "tool_result_synthesized=1" in repairs
    resent = fake_responses.requests[-1].body
    assert "previous_response_id" not in resent
    assert types(resent["input"]) == ["message", "reasoning", "function_call",
                                      "function_call_output", "message"]
