"""The agent wires' own field situations (tests/data/wire-errors.jsonl, and more of the same
kinds), end to end: the request as the official SDK sends it -> gateway -> a native fake
upstream that enforces the rule with the real wording.

For each situation three things hold:
- the fake, asked directly, refuses the broken request with the record's words (so the rule
  is really enforced upstream, not assumed);
- through the gateway the broken request is answered, and ``x-gateway-repairs`` names the
  repair (up front, or on the strict rung after the provider's refusal);
- a valid neighbour (a correctly signed thinking block first in its turn, four
  breakpoints, a reasoning item followed by its call, matching ids) arrives byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from gateway.cli import main
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.anthropic_rules import sign_thinking
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.responses_server import FakeResponses

RECORDS = [json.loads(line) for line in
           (Path(__file__).resolve().parents[1] / "data" / "wire-errors.jsonl").read_text()
           .splitlines() if line.strip()]
CLAUDE = "claude-sonnet-4-5"  # the same name on both sides: a valid body is not rewritten
GPT = "gpt-5"


def record_message(situation: str) -> str:
    """The provider's own message of a recorded refusal, without ids that vary."""
    body = next(r for r in RECORDS if r["situation"].startswith(situation))["body"]
    start = body.find("{")
    text = body
    if start >= 0:
        try:
            parsed = json.loads(body[start:])
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            text = str(parsed["error"]["message"])
    return text


# -- Responses --------------------------------------------------------------------------

FN = [{"type": "function", "name": "read_file", "description": "read a file",
       "parameters": {"type": "object", "properties": {}}}]


def u(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def said(text: str, item_id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "message", "role": "assistant",
                            "content": [{"type": "output_text", "text": text}]}
    if item_id is not None:
        item["id"] = item_id
    return item


def fcall(call_id: str, item_id: str | None = None) -> dict[str, Any]:
    item = {"type": "function_call", "call_id": call_id, "name": "read_file",
            "arguments": "{}"}
    if item_id is not None:
        item["id"] = item_id
    return item


def fout(call_id: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "contents"}


def rs(item_id: str, secret: str | None = "gAAAA-own") -> dict[str, Any]:
    item: dict[str, Any] = {"type": "reasoning", "id": item_id, "summary": []}
    if secret is not None:
        item["encrypted_content"] = secret
    return item


@dataclass
class Situation:
    """One field situation: the broken body, the repair named, a valid neighbour."""

    broken: dict[str, Any]
    repairs: tuple[str, ...]
    refusal: str  # what the provider says to the broken body (a part of its message)
    valid: dict[str, Any] | None = None
    strict: bool = False  # repaired on the provider's refusal, not up front
    links: dict[str, str] = field(default_factory=dict)  # fake Responses: msg id -> rs id
    refuse_prefill: bool = False
    reasoning: bool = True  # fake Responses: False for a model that takes no reasoning items


SHELL_CALL = {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_sh",
              "status": "completed", "action": {"type": "exec", "command": ["ls"], "env": {}}}

RESPONSES: dict[str, Situation] = {
    "reasoning item without its following item": Situation(
        {"input": [u("read a"), rs("rs_1"), u("go on")]},
        ("reasoning_item_dropped",), "of type 'reasoning' was provided without its required",
        valid={"input": [u("read a"), rs("rs_1"), fcall("call_1", "fc_1"), fout("call_1"),
                         u("go on")], "tools": FN}),
    "reasoning item missing for assistant message item": Situation(
        {"input": [u("hi"), said("hello", "msg_0563"), u("again")]},
        ("item_id_removed",), "without its required 'reasoning' item",
        valid={"input": [u("hi"), rs("rs_0563"), said("hello", "msg_0563"), u("again")]},
        strict=True, links={"msg_0563": "rs_0563"}),
    "function_call without output": Situation(
        {"input": [u("read"), fcall("call_U80U"), u("never mind")], "tools": FN},
        ("tool_result_synthesized",), "No tool output found for function call",
        valid={"input": [u("read"), fcall("call_U80U"), fout("call_U80U"), u("thanks")],
               "tools": FN}),
    "orphan function_call_output": Situation(
        {"input": [u("hi"), fout("call_Tnak"), u("go on")], "tools": FN},
        ("orphan_tool_result_dropped",), "No tool call found for function call output"),
    "item referenced by id but not persisted (store=false)": Situation(
        {"input": [u("read"), rs("rs_037d", secret=None), fcall("call_1", "fc_1"),
                   fout("call_1"), u("go on")], "tools": FN, "store": False},
        ("reasoning_item_dropped", "item_id_removed"), "Items are not persisted when `store`",
        valid={"input": [u("read"), rs("rs_037d"), fcall("call_1", "fc_1"), fout("call_1"),
                         u("go on")], "tools": FN, "store": False}),
    "item_reference under store=false": Situation(
        {"input": [u("read"), {"type": "item_reference", "id": "msg_old"}, u("go on")],
         "store": False},
        ("item_reference_dropped",), "Items are not persisted when `store`"),
    "item_reference the provider does not know": Situation(
        {"input": [u("read"), {"type": "item_reference", "id": "msg_gone"}, u("go on")]},
        ("item_reference_dropped",), "Item with id 'msg_gone' not found", strict=True),
    "duplicate item id (reasoning)": Situation(
        {"input": [u("read"), rs("rs_6895"), fcall("call_1", "fc_1"), fout("call_1"),
                   rs("rs_6895"), fcall("call_2", "fc_2"), fout("call_2"), u("go on")],
         "tools": FN},
        ("duplicate_item_dropped",), "Duplicate item found with id rs_6895"),
    "item id has wrong prefix for item type (message)": Situation(
        {"input": [u("hi"), said("hello", "item_3bc5a3fa"), u("again")]},
        ("item_id_removed",), "Expected an ID that begins with 'msg'",
        valid={"input": [u("hi"), said("hello", "msg_3bc5a3fa"), u("again")]}),
    "function call id from another backend": Situation(
        {"input": [u("read"), fcall("call_1", "toolu_01AbC"), fout("call_1"), u("go on")],
         "tools": FN},
        ("item_id_removed",), "Expected an ID that begins with 'fc'"),
    "empty call_id on call/output item": Situation(
        {"input": [u("read"), fcall(""), fout(""), u("go on")], "tools": FN},
        ("call_id_synthesized",), "Expected a string with minimum length 1"),
    "compaction item encrypted_content cannot be decrypted": Situation(
        {"input": [{"type": "compaction", "id": "cmp_34", "encrypted_content": "enc-other"},
                   u("go on")]},
        ("encrypted_item_dropped",), "could not be verified",
        valid={"input": [{"type": "compaction", "id": "cmp_34",
                          "encrypted_content": "gAAAA-own-summary"}, u("go on")]},
        strict=True),
    "encrypted reasoning from another deployment": Situation(
        {"input": [u("read"), rs("rs_9", "enc-other-org"), fcall("call_1", "fc_1"),
                   fout("call_1"), u("go on")], "tools": FN},
        ("encrypted_item_dropped",), "could not be verified", strict=True),
    "reasoning item without summary": Situation(
        {"input": [u("read"), {"type": "reasoning", "id": "rs_2",
                               "encrypted_content": "gAAAA-own"},
                   fcall("call_1", "fc_1"), fout("call_1"), u("go on")], "tools": FN},
        ("reasoning_summary_added",), "Missing required parameter"),
    "reasoning items sent to a model that takes none": Situation(
        {"input": [u("read"), rs("rs_5"), fcall("call_1", "fc_1"), fout("call_1"),
                   u("go on")], "tools": FN},
        ("reasoning_item_dropped",), "Reasoning input items are not supported", strict=True,
        reasoning=False),
    "assistant content typed as the user's": Situation(
        {"input": [u("hi"), {"role": "assistant",
                             "content": [{"type": "input_text", "text": "hello"}]},
                   u("again")]},
        ("assistant_content_retyped",), "Invalid value: 'input_text'"),
    # The SDK's local shell output names its call by ``id``; the API pairs by ``call_id``.
    "a local shell output naming its call by id": Situation(
        {"input": [u("ls"), SHELL_CALL,
                   {"type": "local_shell_call_output", "id": "call_sh", "output": "a.py"},
                   u("go on")]},
        ("call_id_relinked",), "Missing required parameter: 'input[2].call_id'",
        valid={"input": [u("ls"), SHELL_CALL,
                         {"type": "local_shell_call_output", "call_id": "call_sh",
                          "output": "a.py"}, u("go on")]}),
    # An agent numbering its calls from zero on every turn runs the same tool twice: the
    # second call is another call (its output differs), not a copy to dedupe.
    "the same call run again under its reused id": Situation(
        {"input": [u("status?"), rs("rs_g1"), fcall("call_0"),
                   {**fout("call_0"), "output": "clean"}, said("Clean."), u("and now?"),
                   rs("rs_g2"), fcall("call_0"),
                   {**fout("call_0"), "output": "modified: a.py"}, u("commit it")],
         "tools": FN},
        ("tool_call_id_rewritten",), "Duplicate function_call_output for call_id"),
    "a reasoning-only turn replayed with a message of nothing": Situation(
        {"input": [u("think"), rs("rs_n"), {"type": "message", "role": "assistant",
                                            "content": None}, u("and?")]},
        ("assistant_content_retyped",), "got null instead"),
    "one call id on a function call and a custom tool call": Situation(
        {"input": [u("q"), fcall("x1"), fout("x1"),
                   {"type": "custom_tool_call", "call_id": "x1", "name": "apply",
                    "input": "p"},
                   {"type": "custom_tool_call_output", "call_id": "x1", "output": "ok"},
                   u("n")], "tools": [*FN, {"type": "custom", "name": "apply"}]},
        ("tool_call_id_rewritten",), "x1"),
}


@pytest.fixture
async def fake_responses() -> AsyncIterator[FakeResponses]:
    async with FakeResponses(api_key="upstream-openai-key") as server:
        yield server


def native_config(responses_base: str, anthropic_base: str) -> dict[str, Any]:
    return {
        "model_list": [
            {"model_name": GPT, "litellm_params": {"model": f"openai/{GPT}",
                                                   "api_base": f"{responses_base}/v1",
                                                   "api_key": "upstream-openai-key"}},
            {"model_name": CLAUDE, "litellm_params": {"model": f"anthropic/{CLAUDE}",
                                                      "api_base": anthropic_base,
                                                      "api_key": "upstream-anthropic-key"}}],
        "gateway": {"api_keys": ["client-key"]},
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
    }


async def run_responses_case(gateway_factory: GatewayFactory, fake: FakeResponses,
                             case: Situation) -> None:
    """The broken input is refused by the native fake with the provider's words, answered
    through the gateway with its repairs reported; the valid neighbour arrives as sent."""
    fake.links.update(case.links)
    fake.reasoning = case.reasoning
    gw = await gateway_factory(native_config(fake.base_url, "http://127.0.0.1:9"))
    body = {"model": GPT, **case.broken}
    async with httpx.AsyncClient() as direct:
        refused = await direct.post(f"{fake.base_url}/v1/responses", json=body,
                                    headers={"authorization": "Bearer upstream-openai-key"})
    assert refused.status_code in (400, 404)
    assert case.refusal in refused.json()["error"]["message"]

    before = len(fake.requests)
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        raw = await c.responses.with_raw_response.create(**body)
    assert raw.parse().output_text
    repairs = raw.headers["x-gateway-repairs"]
    for kind in case.repairs:
        assert kind in repairs
    assert len(fake.requests[before:]) == (2 if case.strict else 1)
    if case.strict:
        assert raw.headers["x-gateway-recovery"] == "strict"

    if case.valid is not None:
        await assert_arrives_as_sent(
            gw, f"{gw.base_url}/responses", {"model": GPT, **case.valid},
            {"authorization": "Bearer client-key"}, fake)


async def test_reasoning_the_strict_rung_leaves_alone_goes_with_its_turn(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses) -> None:
    # A trimmed session opening mid-turn, then a copy the strict rung dedupes: the turn's
    # reasoning goes with the assistant message the strict rung drops from the front
    # (sent alone, it was refused again: "provided without its required following item").
    await run_responses_case(gateway_factory, fake_responses, Situation(
        {"input": [rs("rs_0"), said("hello"), u("q"), fcall("d1"), fout("d1"), fcall("d1"),
                   fout("d1"), u("m")], "tools": FN},
        ("leading_non_user_dropped", "reasoning_item_dropped"), "Duplicate", strict=True))
    assert [item.get("type") for item in fake_responses.requests[-1].body["input"]] == [
        None, "function_call", "function_call_output", None]


@pytest.mark.parametrize("name", list(RESPONSES))
async def test_responses_situation(gateway_factory: GatewayFactory,
                                   fake_responses: FakeResponses, name: str) -> None:
    await run_responses_case(gateway_factory, fake_responses, RESPONSES[name])


async def assert_arrives_as_sent(gw: RunningGateway, url: str, body: dict[str, Any],
                                 headers: dict[str, str],
                                 fake: FakeResponses | FakeAnthropic) -> None:
    """A valid body reaches the upstream byte for byte, and nothing is reported."""
    raw = orjson.dumps(body)
    async with httpx.AsyncClient() as c:
        answer = await c.post(url, content=raw, headers={
            **headers, "content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert "x-gateway-repairs" not in answer.headers
    assert fake.requests[-1].raw == raw


# -- Messages ---------------------------------------------------------------------------

TOOLS = [{"name": "read_file", "description": "read a file",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
THINKING_ON = {"type": "enabled", "budget_tokens": 1024}


def uses(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "read_file", "input": {"path": "a"}}


def result(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "contents"}


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


def think(value: str, signature: str | None = None) -> dict[str, Any]:
    block = {"type": "thinking", "thinking": value}
    if signature != "":
        block["signature"] = signature or sign_thinking(value)
    return block


def um(*content: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(content) if len(content) != 1
            or not isinstance(content[0], str) else content[0]}


def am(*content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(content)}


CACHE = {"type": "ephemeral"}
CACHE_1H = {"type": "ephemeral", "ttl": "1h"}

MESSAGES: dict[str, Situation] = {
    "thinking block modified": Situation(
        {"messages": [um("read a"), am(think("edited", sign_thinking("original")), uses("t1")),
                      um(result("t1"))], "tools": TOOLS, "thinking": THINKING_ON},
        ("thinking_block_dropped", "thinking_disabled"), "cannot be modified", strict=True,
        valid={"messages": [um("read a"), am(think("original"), uses("t1")), um(result("t1"))],
               "tools": TOOLS, "thinking": THINKING_ON}),
    "thinking enabled but final assistant message lacks thinking block": Situation(
        {"messages": [um("read a"), am(text("reading"), uses("t1")), um(result("t1"))],
         "tools": TOOLS, "thinking": THINKING_ON},
        ("thinking_disabled",), "must start with a thinking block",
        valid={"messages": [um("read a"), am(think("plan"), text("reading"), uses("t1")),
                            um(result("t1"))], "tools": TOOLS, "thinking": THINKING_ON}),
    "assistant message ends with thinking block": Situation(
        {"messages": [um("hi"), am(text("hello"), think("after")), um("again")]},
        ("thinking_block_dropped",), "cannot be `thinking`",
        valid={"messages": [um("hi"), am(think("before"), text("hello")), um("again")]}),
    "thinking signature missing": Situation(
        {"messages": [um("hi"), am(think("no sig", signature=""), text("hello")), um("x")]},
        ("thinking_block_dropped",), "signature: Field required"),
    "thinking signature invalid (system prompt changed since block was created)": Situation(
        {"system": "new prompt", "messages": [
            um("hi"), am(think("old", "EqQBCkYIBxgCKkA-foreign"), text("hello")),
            um("and?"), am(text("more")), um("again")]},
        ("thinking_block_dropped",), "bound to a different conversation", strict=True),
    "thinking after text in its turn": Situation(
        {"messages": [um("hi"), am(text("hello"), think("late"), uses("t1")),
                      um(result("t1"))], "tools": TOOLS},
        ("thinking_block_moved",), "must come before any other block"),
    "tool_use without tool_result": Situation(
        {"messages": [um("read"), am(uses("toolu_66")), um("never mind")], "tools": TOOLS},
        ("tool_result_synthesized",), "ids were found without `tool_result` blocks"),
    "tool_result without tool_use": Situation(
        {"messages": [um("hi"), am(text("hello")), um(result("toolu_gone"), text("go"))],
         "tools": TOOLS},
        ("orphan_tool_result_dropped",), "unexpected `tool_use_id`"),
    "duplicate tool_use id": Situation(
        {"messages": [um("read"), am(uses("t1")), um(result("t1")), am(uses("t1")),
                      um(result("t1"))], "tools": TOOLS},
        ("duplicate_tool_call_deduped",), "ids must be unique", strict=True),
    "empty text block": Situation(
        {"messages": [um("hi"), am(text("")), um("again")]},
        ("empty_content_dropped",), "text content blocks must be non-empty"),
    "message with empty content": Situation(
        {"messages": [um("hi"), {"role": "assistant", "content": []}, um("again")]},
        ("empty_content_dropped",), "all messages must have non-empty content"),
    "first message not user role": Situation(
        {"messages": [am(text("I was saying")), um("hi")]},
        ("leading_non_user_dropped",), 'first message must use the "user" role', strict=True),
    "tools param missing with tool_use in history": Situation(
        {"messages": [um("read"), am(uses("t1")), um(result("t1"), text("summarize"))]},
        ("tools_declared",), "must define tools",
        valid={"messages": [um("read"), am(uses("t1")), um(result("t1"), text("summarize"))],
               "tools": TOOLS}),
    # Names from an MCP or Gemini session: the API takes no dot in a declared tool's name.
    "tools param missing, a tool_use named outside the API's pattern": Situation(
        {"messages": [um("weather?"), am({**uses("t1"), "name": "weather.get_current"}),
                      um(result("t1"), text("title this chat"))]},
        ("tools_declared",), "must define tools"),
    "cache_control on empty text block": Situation(
        {"messages": [um(text("read the file"), text("", cache_control=CACHE))]},
        ("cache_breakpoint_moved",), "cache_control cannot be set for empty text blocks",
        valid={"messages": [um(text("read the file", cache_control=CACHE))]}),
    "final assistant message ends with whitespace": Situation(
        {"messages": [um("write a haiku"), am(text("Autumn moon \n"))]},
        ("trailing_whitespace_trimmed",), "cannot end with trailing whitespace",
        valid={"messages": [um("write a haiku"), am(text("Autumn moon"))]}),
    "system role message": Situation(
        {"system": "be brief", "messages": [{"role": "system", "content": "use metric"},
                                            um("how far?")]},
        ("system_message_lifted",), 'Unexpected role "system"'),
    "more than four cache breakpoints": Situation(
        {"system": [text("rules", cache_control=CACHE)], "tools": [
            {**TOOLS[0], "cache_control": CACHE}], "messages": [
            um(text("a", cache_control=CACHE)), am(text("b", cache_control=CACHE)),
            um(text("c", cache_control=CACHE))]},
        ("cache_breakpoint_removed",), "A maximum of 4 blocks with cache_control",
        valid={"system": [text("rules", cache_control=CACHE)], "tools": [
            {**TOOLS[0], "cache_control": CACHE}], "messages": [
            um(text("a")), am(text("b", cache_control=CACHE)),
            um(text("c", cache_control=CACHE))]}),
    "one-hour breakpoint after a five-minute one": Situation(
        {"system": [text("rules", cache_control=CACHE)],
         "messages": [um(text("a", cache_control=CACHE_1H))]},
        ("cache_ttl_adjusted",), "must not come after a ttl='5m'",
        valid={"system": [text("rules", cache_control=CACHE_1H)],
               "messages": [um(text("a", cache_control=CACHE))]}),
    "tool ids another provider minted": Situation(
        {"messages": [um("read"), am(uses("functions.read_file:0")),
                      um(result("functions.read_file:0"), text("go on"))], "tools": TOOLS},
        ("tool_id_rewritten",), "String should match pattern",
        valid={"messages": [um("read"), am(uses("toolu_01A-b_c")),
                            um(result("toolu_01A-b_c"), text("go on"))], "tools": TOOLS}),
    "blank text inside a tool result": Situation(
        {"messages": [um("read"), am(uses("t1")),
                      um({"type": "tool_result", "tool_use_id": "t1",
                          "content": [text("contents"), text(" ")]}, text("go on"))],
         "tools": TOOLS},
        ("empty_content_dropped",), "text content blocks must contain non-whitespace text"),
    "cache_control on a thinking block": Situation(
        {"messages": [um("read"), am({**think("plan"), "cache_control": CACHE}, uses("t1")),
                      um(result("t1"))], "tools": TOOLS},
        ("cache_breakpoint_moved",), "cache_control: Extra inputs are not permitted"),
    "trailing assistant turn on a model without prefill": Situation(
        {"messages": [um("name a colour"), am(text("The colour is"))]},
        ("prefill_dropped",), "does not support assistant message prefill", strict=True,
        refuse_prefill=True),
    # The same call run again under an id numbered from zero on every turn: its result
    # differs, so it is another call (renamed up front), not a copy to dedupe.
    "the same tool call run again under its reused id": Situation(
        {"messages": [um("read"), am(uses("call_0")), um(result("call_0")), am(text("Read.")),
                      um("and again?"), am(uses("call_0")),
                      um({**result("call_0"), "content": "changed"}, text("go on"))],
         "tools": TOOLS},
        ("tool_id_rewritten",), "`tool_use` ids must be unique"),
}


async def run_messages_case(gateway_factory: GatewayFactory, case: Situation) -> None:
    """The broken history is refused by the native fake with the provider's words,
    answered through the gateway with its repairs reported (an image: the media rung); the
    valid neighbour arrives as sent."""
    async with FakeAnthropic(api_key="upstream-anthropic-key",
                             refuse_prefill=case.refuse_prefill) as fake:
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        body = {"model": CLAUDE, "max_tokens": 64, **case.broken}
        async with httpx.AsyncClient() as direct:
            refused = await direct.post(f"{fake.base_url}/v1/messages", json=body, headers={
                "x-api-key": "upstream-anthropic-key", "anthropic-version": "2023-06-01"})
        assert refused.status_code == 400
        assert case.refusal in refused.json()["error"]["message"]

        before = len(fake.requests)
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            raw = await c.messages.with_raw_response.create(**body)
        answer = await raw.parse()
        assert answer.content and answer.content[0].type in ("text", "tool_use")
        if case.repairs:
            repairs = raw.headers["x-gateway-repairs"]
            for kind in case.repairs:
                assert kind in repairs
        else:  # an image: the provider's refusal takes the media rung, which relabels it
            assert raw.headers["x-gateway-recovery"] == "media=degraded"
            assert "x-gateway-compaction" not in raw.headers  # an image is not its bytes
            assert '"type":"image"' in fake.requests[-1].raw.decode()
        assert len(fake.requests[before:]) == (2 if case.strict else 1)

        if case.valid is not None:
            await assert_arrives_as_sent(
                gw, f"{gw.root}/v1/messages", {"model": CLAUDE, "max_tokens": 64, **case.valid},
                {"x-api-key": "client-key", "anthropic-version": "2023-06-01"}, fake)


@pytest.mark.parametrize("name", list(MESSAGES))
async def test_messages_situation(gateway_factory: GatewayFactory, name: str) -> None:
    await run_messages_case(gateway_factory, MESSAGES[name])


def test_every_recorded_situation_is_covered() -> None:
    covered = set(RESPONSES) | set(MESSAGES)
    # previous_response_id situations: tests/wires/test_response_state.py
    missing = [r["situation"] for r in RECORDS if r["situation"] not in covered
               and "previous_response_id" not in r["situation"]
               and not any(r["situation"].startswith(c) for c in covered)]
    assert missing == []


def test_each_refusal_the_fakes_give_is_the_recorded_one() -> None:
    for name, case in {**RESPONSES, **MESSAGES}.items():
        recorded = [r for r in RECORDS if r["situation"] == name]
        if recorded:
            assert case.refusal in record_message(name), name


async def test_wire_repairs_reach_metrics_the_inspector_and_check(
        gateway_factory: GatewayFactory, fake_responses: FakeResponses, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        config = native_config(fake_responses.base_url, fake.base_url)
        config["gateway"]["ui"] = True
        gw = await gateway_factory(config)
        messages = MESSAGES["thinking signature invalid (system prompt changed since block "
                            "was created)"].broken
        responses = RESPONSES["item id has wrong prefix for item type (message)"].broken
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            await c.messages.create(model=CLAUDE, max_tokens=64, **messages)
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                      max_retries=0) as o:
            await o.responses.create(model=GPT, **responses)
        auth = {"authorization": "Bearer client-key"}
        async with httpx.AsyncClient(base_url=gw.root, headers=auth) as h:
            metrics = (await h.get("/metrics")).text
            listed = (await h.get("/ui/api/requests?kind=thinking_block_dropped")).json()
            ids = (await h.get("/ui/api/requests?kind=item_id_removed")).json()
    repaired = [line for line in metrics.splitlines()
                if line.startswith("gateway_repairs_total{")]
    assert any('kind="thinking_block_dropped"' in line and CLAUDE in line for line in repaired)
    assert any('kind="item_id_removed"' in line and GPT in line for line in repaired)
    assert len(listed["requests"]) == 1 and len(ids["requests"]) == 1
    saved = tmp_path / "turn.json"
    saved.write_text(json.dumps({"model": CLAUDE, "max_tokens": 64, **MESSAGES[
        "tool ids another provider minted"].broken}))
    assert main(["check", str(saved), "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["counts"]["tool_id_rewritten"] == 2


async def test_with_repairs_off_a_wire_body_goes_as_sent(
        gateway_factory: GatewayFactory) -> None:
    # repair.enabled: false switches the wires' own rules off too: the provider's refusal
    # comes back, and the body it refused is the client's.
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        config = native_config("http://127.0.0.1:9", fake.base_url)
        config["repair"] = {"enabled": False}
        gw = await gateway_factory(config)
        body = {"model": CLAUDE, "max_tokens": 64,
                **MESSAGES["final assistant message ends with whitespace"].broken}
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            with pytest.raises(anthropic.BadRequestError) as refused:
                await c.messages.create(**body)
    assert "trailing whitespace" in refused.value.message
    assert fake.requests[-1].body["messages"] == body["messages"]
