"""Variants of the recorded Responses and Messages history errors (tests/data/wire-errors.jsonl):
for each recorded refusal, two histories agents really send that break the same rule in
another place, with another item or block type, streamed instead of whole, or in the shape
another client (Codex CLI, Claude Code, Cline, opencode, the Agents SDK, LangChain, the
Vercel AI SDK) gives it.

Each broken body is first refused by the native fake with the recorded wording; then it is
sent through the gateway with the official ``openai`` / ``anthropic`` SDK (whole or
streamed): the answer is a 200 whose ``x-gateway-repairs`` names the repair (and
``x-gateway-recovery: strict`` when the repair was made on the provider's refusal), and the
last body the upstream got is accepted when it is sent to the fake again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.conftest import GatewayFactory
from tests.fakes.anthropic_rules import sign_thinking
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.native_base import Canned
from tests.fakes.responses_server import FakeResponses
from tests.wires.test_response_state import settled
from tests.wires.test_wire_heldout import CUSTOM, ccall, cout
from tests.wires.test_wire_situations import (
    CACHE,
    CLAUDE,
    FN,
    GPT,
    THINKING_ON,
    TOOLS,
    am,
    fcall,
    fout,
    native_config,
    result,
    rs,
    said,
    text,
    think,
    u,
    um,
    uses,
)

OPENAI_HEADERS = {"authorization": "Bearer upstream-openai-key"}
ANTHROPIC_HEADERS = {"x-api-key": "upstream-anthropic-key", "anthropic-version": "2023-06-01"}


@dataclass
class Variant:
    """A broken body, the recorded refusal it earns, and what the gateway must report."""

    broken: dict[str, Any]
    refusal: str  # a part of the provider's message for the broken body
    repairs: tuple[str, ...]
    strict: bool = False  # repaired on the provider's refusal, not up front
    stream: bool = False
    links: dict[str, str] = field(default_factory=dict)  # fake Responses: item id -> rs id
    prepare: Callable[[FakeResponses], None] | None = None
    check: Callable[[dict[str, Any]], None] | None = None  # on the body the upstream accepted


def types(items: list[Any]) -> list[str]:
    return [i.get("type", "message") for i in items]


def no_reasoning(body: dict[str, Any]) -> None:
    assert "reasoning" not in types(body["input"])


def both_calls_answered(body: dict[str, Any]) -> None:
    outputs = [i["call_id"] for i in body["input"] if i.get("type") == "function_call_output"]
    assert sorted(outputs) == ["call_a", "call_b"]


def no_thinking(body: dict[str, Any]) -> None:
    assert all(b.get("type") != "thinking" for m in body["messages"]
               if isinstance(m["content"], list) for b in m["content"])


def result_follows_call(body: dict[str, Any]) -> None:
    messages = body["messages"]
    at = next(n for n, m in enumerate(messages) if m["role"] == "assistant"
              and any(b.get("id") == "toolu_late" for b in m["content"]))
    assert messages[at + 1]["content"][0]["tool_use_id"] == "toolu_late"


def one_call(body: dict[str, Any]) -> None:
    assert [b["type"] for b in body["messages"][1]["content"]] == ["tool_use"]


RESPONSES: dict[str, Variant] = {
    # 0: reasoning item without its following item
    "reasoning left last by an interrupted Codex CLI turn": Variant(
        {"input": [u("read a"), said("ok"), u("go on"), rs("rs_last")]},
        "of type 'reasoning' was provided without its required", ("reasoning_item_dropped",)),
    "reasoning before a user turn after a tool round, streamed": Variant(
        {"input": [u("read"), rs("rs_1"), fcall("call_1", "fc_1"), fout("call_1"), rs("rs_2"),
                   u("go on")], "tools": FN},
        "of type 'reasoning' was provided without its required", ("reasoning_item_dropped",),
        stream=True),
    # 1: reasoning item missing for an output item
    "function_call whose reasoning opencode dropped": Variant(
        {"input": [u("read"), fcall("call_1", "fc_7a1"), fout("call_1"), u("go on")],
         "tools": FN},
        "without its required 'reasoning' item", ("item_id_removed",), strict=True,
        links={"fc_7a1": "rs_7a1"}),
    "message whose reasoning was dropped, streamed": Variant(
        {"input": [u("hi"), said("hello", "msg_9b2"), u("again")]},
        "without its required 'reasoning' item", ("item_id_removed",), strict=True,
        stream=True, links={"msg_9b2": "rs_9b2"}),
    # 2: function_call without output
    "two parallel calls, one answered (Agents SDK)": Variant(
        {"input": [u("read both"), fcall("call_a"), fcall("call_b"), fout("call_a"),
                   u("go on")], "tools": FN},
        "No tool output found for function call call_b", ("tool_result_synthesized",),
        check=both_calls_answered),
    "custom tool call (apply_patch) without output, streamed": Variant(
        {"input": [u("patch"), ccall("call_p"), u("never mind")], "tools": CUSTOM},
        "No tool output found for custom tool call", ("tool_result_synthesized",),
        stream=True),
    # 3: orphan output
    "orphan custom_tool_call_output": Variant(
        {"input": [u("hi"), said("hello"), cout("call_gone"), u("go on")], "tools": CUSTOM},
        "No tool call found for custom tool call output", ("orphan_tool_result_dropped",)),
    "orphan output last after a Cline retry, streamed": Variant(
        {"input": [u("hi"), said("hello"), u("read"), fout("call_late")], "tools": FN},
        "No tool call found for function call output", ("orphan_tool_result_dropped",),
        stream=True),
    # 4: not persisted under store=false
    "stateless reasoning before a message, streamed": Variant(
        {"input": [u("hi"), rs("rs_a1", secret=None), said("hello"), u("again")],
         "store": False},
        "Items are not persisted when `store`", ("reasoning_item_dropped",), stream=True),
    "two stateless reasoning items (Vercel AI SDK)": Variant(
        {"input": [u("read"), rs("rs_b1", secret=None), fcall("call_1"), fout("call_1"),
                   rs("rs_b2", secret=None), fcall("call_2"), fout("call_2"), u("go on")],
         "tools": FN, "store": False},
        "Items are not persisted when `store`", ("reasoning_item_dropped",),
        check=no_reasoning),
    # 5: duplicate item id
    "an assistant message sent twice (LangChain)": Variant(
        {"input": [u("hi"), said("hello", "msg_dup"), said("hello", "msg_dup"), u("again")]},
        "Duplicate item found with id msg_dup", ("duplicate_item_dropped",)),
    "the same reasoning item back to back, streamed": Variant(
        {"input": [u("read"), rs("rs_twice"), rs("rs_twice"), fcall("call_1", "fc_1"),
                   fout("call_1"), u("go on")], "tools": FN},
        "Duplicate item found with id rs_twice", ("duplicate_item_dropped",), stream=True),
    # 6: wrong id prefix
    "reasoning id minted by a translator": Variant(
        {"input": [u("read"), rs("reasoning_0"), fcall("call_1", "fc_1"), fout("call_1"),
                   u("go on")], "tools": FN},
        "Expected an ID that begins with 'rs'", ("item_id_removed",)),
    "call id copied into the item id after chat translation, streamed": Variant(
        {"input": [u("read"), fcall("call_x1", "call_x1"), fout("call_x1"), u("go on")],
         "tools": FN},
        "Expected an ID that begins with 'fc'", ("item_id_removed",), stream=True),
    # 7: empty call_id
    "custom tool call with empty call_id": Variant(
        {"input": [u("patch"), ccall(""), cout(""), u("go on")], "tools": CUSTOM},
        "Expected a string with minimum length 1", ("call_id_synthesized",)),
    "two empty call ids in one round, streamed": Variant(
        {"input": [u("read"), fcall(""), fout(""), said("once more"), fcall(""), fout(""),
                   u("go on")], "tools": FN},
        "Expected a string with minimum length 1", ("call_id_synthesized",), stream=True),
    # 8: encrypted content that does not decrypt
    "foreign compaction mid-history, streamed": Variant(
        {"input": [u("earlier"), {"type": "compaction", "id": "cmp_9",
                                  "encrypted_content": "enc-other"}, u("go on")]},
        "could not be verified", ("encrypted_item_dropped",), strict=True, stream=True),
    "foreign reasoning before a message": Variant(
        {"input": [u("hi"), rs("rs_f1", "enc-other-org"), said("hello"), u("again")]},
        "could not be verified", ("encrypted_item_dropped",), strict=True),
}


async def _refused_directly(url: str, body: dict[str, Any], headers: dict[str, str],
                            refusal: str) -> None:
    async with httpx.AsyncClient() as direct:
        refused = await direct.post(url, json=body, headers=headers)
    assert refused.status_code in (400, 404), refused.text
    assert refusal in refused.json()["error"]["message"]


async def _accepted_again(url: str, raw: bytes, headers: dict[str, str]) -> None:
    async with httpx.AsyncClient() as direct:
        again = await direct.post(url, content=raw,
                                  headers={**headers, "content-type": "application/json"})
    assert again.status_code == 200, again.text


def _assert_reported(headers: httpx.Headers, case: Variant, sent: int) -> None:
    repairs = headers.get("x-gateway-repairs", "")
    for kind in case.repairs:
        assert kind in repairs, repairs
    assert sent == (2 if case.strict else 1)
    if case.strict:
        assert headers["x-gateway-recovery"] == "strict"


@pytest.mark.parametrize("name", list(RESPONSES))
async def test_responses_variant(gateway_factory: GatewayFactory, name: str) -> None:
    case = RESPONSES[name]
    async with FakeResponses(api_key="upstream-openai-key") as fake:
        fake.links.update(case.links)
        if case.prepare is not None:
            case.prepare(fake)
        url = f"{fake.base_url}/v1/responses"
        body = {"model": GPT, **case.broken}
        await _refused_directly(url, body, OPENAI_HEADERS, case.refusal)
        gw = await gateway_factory(native_config(fake.base_url, "http://127.0.0.1:9"))
        before = len(fake.requests)
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                      max_retries=0) as c:
            if case.stream:
                async with c.responses.with_streaming_response.create(
                        stream=True, **body) as streamed:
                    headers = streamed.headers
                    events = [e.type async for e in await streamed.parse()]
                assert events[-1] == "response.completed"
            else:
                raw = await c.responses.with_raw_response.create(**body)
                headers = raw.headers
                assert raw.parse().output_text
        _assert_reported(headers, case, len(fake.requests) - before)
        last = fake.requests[-1]
        if case.check is not None:
            case.check(last.body)
        await _accepted_again(url, last.raw, OPENAI_HEADERS)


MESSAGES: dict[str, Variant] = {
    # 11: thinking modified in the latest assistant message
    "thinking trimmed by Cline, streamed": Variant(
        {"messages": [um("read a"), am(think("plan it\n", sign_thinking("plan it\n\n")),
                                       uses("t1")), um(result("t1"))],
         "tools": TOOLS, "thinking": THINKING_ON},
        "cannot be modified", ("thinking_block_dropped",), strict=True, stream=True),
    "second of two thinking blocks edited": Variant(
        {"messages": [um("read a"), am(think("first"), think("edited", sign_thinking("orig")),
                                       uses("t1")), um(result("t1"))],
         "tools": TOOLS, "thinking": THINKING_ON},
        "cannot be modified", ("thinking_block_dropped",), strict=True),
    # 12: final assistant message does not start with thinking
    "tool_use first, reasoning dropped by the Vercel AI SDK": Variant(
        {"messages": [um("read a"), am(uses("t1")), um(result("t1"))],
         "tools": TOOLS, "thinking": THINKING_ON},
        "must start with a thinking block", ("thinking_disabled",)),
    "tool_use first, thinking cleared by a context edit (Claude Code)": Variant(
        {"messages": [um("read a"), am(uses("t1")), um(result("t1"))],
         "tools": TOOLS, "thinking": THINKING_ON, "extra_body": {"context_management": {
             "edits": [{"type": "clear_thinking_20251015",
                        "keep": {"type": "thinking_turns", "value": 1}},
                       {"type": "clear_tool_uses_20250919"}]}}},
        "must start with a thinking block", ("thinking_disabled",),
        check=lambda body: body["context_management"] == {"edits": [
            {"type": "clear_tool_uses_20250919"}]}),
    "text then tool_use from a chat translation, streamed": Variant(
        {"messages": [um("read a"), am(text("Let me read it."), uses("t1")),
                      um(result("t1"))],
         "tools": TOOLS, "thinking": {"type": "enabled", "budget_tokens": 2048}},
        "must start with a thinking block", ("thinking_disabled",), stream=True),
    # 13: assistant message ends with thinking
    "thinking alone in an interrupted Claude Code turn": Variant(
        {"messages": [um("hi"), am(think("I should greet")), um("hello?")]},
        "cannot be `thinking`", ("thinking_block_dropped",)),
    "thinking after tool_use, streamed": Variant(
        {"messages": [um("read"), am(uses("t1"), think("waiting")), um(result("t1"))],
         "tools": TOOLS},
        "cannot be `thinking`", ("thinking_block_dropped",), stream=True),
    # 14: signature missing
    "signature null before a tool_use": Variant(
        {"messages": [um("read"), am({"type": "thinking", "thinking": "plan",
                                      "signature": None}, uses("t1")),
                      um(result("t1"), text("go on"))], "tools": TOOLS},
        "thinking.signature: Input should be a valid string", ("thinking_block_dropped",)),
    "signature missing in an earlier turn, streamed": Variant(
        {"messages": [um("hi"), am(think("no sig", signature=""), text("hello")),
                      um("more"), am(text("sure")), um("again")]},
        "signature: Field required", ("thinking_block_dropped",), stream=True),
    # 15: signature bound to another conversation
    "foreign signature before a tool_use in an earlier turn": Variant(
        {"system": "new prompt", "messages": [
            um("read"), am(think("old", "EqQBCkYIBxgCKkA-foreign"), uses("t1")),
            um(result("t1")), am(text("done")), um("thanks")], "tools": TOOLS},
        "bound to a different conversation", ("thinking_block_dropped",), strict=True),
    "foreign signature, streamed": Variant(
        {"messages": [um("hi"), am(think("old", "EqQBCkYIBxgCKkA-other"), text("hello")),
                      um("again"), am(think("new"), text("sure")), um("more")]},
        "bound to a different conversation", ("thinking_block_dropped",), strict=True,
        stream=True),
    # 16: tool_use without tool_result
    "two tool_uses, one answered": Variant(
        {"messages": [um("read both"), am(uses("toolu_a"), uses("toolu_b")),
                      um(result("toolu_a"), text("go on"))], "tools": TOOLS},
        "toolu_b", ("tool_result_synthesized",)),
    "tool_result a turn late, streamed": Variant(
        {"messages": [um("read"), am(uses("toolu_late")), um("hurry"), am(text("ok")),
                      um(result("toolu_late"), text("go on"))], "tools": TOOLS},
        "without `tool_result` blocks", ("tool_result_reordered",), stream=True,
        check=result_follows_call),
    # 17: tool_result without tool_use
    "tool_result in the first user message": Variant(
        {"messages": [um(result("toolu_before"), text("hi"))], "tools": TOOLS},
        "unexpected `tool_use_id`", ("orphan_tool_result_dropped",)),
    "compacted call with its result kept, streamed": Variant(
        {"messages": [um("read"), am(uses("t1")), um(result("t1"), result("toolu_compacted"))],
         "tools": TOOLS},
        "unexpected `tool_use_id`", ("orphan_tool_result_dropped",), stream=True),
    # 18: duplicate tool_use id
    "the same id twice in one turn": Variant(
        {"messages": [um("read"), am(uses("t1"), uses("t1")), um(result("t1"))],
         "tools": TOOLS},
        "ids must be unique", ("duplicate_tool_call_deduped",), strict=True, check=one_call),
    "an id reused across turns, streamed": Variant(
        {"messages": [um("read"), am(uses("t9")), um(result("t9")), am(uses("t9")),
                      um(result("t9"))], "tools": TOOLS},
        "ids must be unique", ("duplicate_tool_call_deduped",), strict=True, stream=True),
    # 19: empty text block
    "empty text in a user message": Variant(
        {"messages": [um(text("hi"), text("")), am(text("hello")), um("again")]},
        "text content blocks must be non-empty", ("empty_content_dropped",)),
    "empty text beside a tool_use, streamed": Variant(
        {"messages": [um("read"), am(text(""), uses("t1")), um(result("t1"))],
         "tools": TOOLS},
        "text content blocks must be non-empty", ("empty_content_dropped",), stream=True),
    # 20: message with empty content
    "user content an empty string (LangChain)": Variant(
        {"messages": [um("hi"), am(text("hello")), {"role": "user", "content": ""},
                      am(text("?")), um("again")]},
        "all messages must have non-empty content", ("empty_content_dropped",)),
    "assistant content an empty list mid-history, streamed": Variant(
        {"messages": [um("hi"), {"role": "assistant", "content": []}, um("again")]},
        "all messages must have non-empty content", ("empty_content_dropped",),
        stream=True),
    # 21: first message not from the user
    "history cut after a tool_use (opencode compaction)": Variant(
        {"messages": [am(uses("t1")), um(result("t1"), text("go on"))], "tools": TOOLS},
        "first message must use the", ("leading_non_user_dropped",), strict=True),
    "assistant greeting first, streamed": Variant(
        {"messages": [am(text("How can I help?")), um("hi")]},
        "first message must use the", ("leading_non_user_dropped",), strict=True,
        stream=True),
    # 22: tool blocks without tools
    "tools an empty list (Claude Code subagent)": Variant(
        {"messages": [um("read"), am(uses("t1")), um(result("t1"), text("sum up"))],
         "tools": []},
        "must define tools", ("tools_declared",)),
    "tool blocks without tools, streamed": Variant(
        {"messages": [um("read"), am(text("reading"), uses("t1")), um(result("t1"))]},
        "must define tools", ("tools_declared",), stream=True),
    # 23: cache_control on an empty text block
    "cache_control on an empty assistant text": Variant(
        {"messages": [um("hi"), am(text("hello"), text("", cache_control=CACHE)),
                      um("again")]},
        "cache_control cannot be set for empty text blocks", ("cache_breakpoint_moved",)),
    "cache_control on an empty user text after a tool_result, streamed": Variant(
        {"messages": [um("read"), am(uses("t1")),
                      um(result("t1"), text("", cache_control=CACHE))], "tools": TOOLS},
        "cache_control cannot be set for empty text blocks", ("cache_breakpoint_moved",),
        stream=True),
    # 24: final assistant content ends with whitespace
    "prefill ending in a tab across two blocks": Variant(
        {"messages": [um("write a list"), am(text("Items:"), text("1.\t"))]},
        "cannot end with trailing whitespace", ("trailing_whitespace_trimmed",)),
    "prefill ending in a newline, streamed": Variant(
        {"messages": [um("write JSON"), am(text("```json\n"))]},
        "cannot end with trailing whitespace", ("trailing_whitespace_trimmed",),
        stream=True),
}


@pytest.mark.parametrize("name", list(MESSAGES))
async def test_messages_variant(gateway_factory: GatewayFactory, name: str) -> None:
    case = MESSAGES[name]
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        url = f"{fake.base_url}/v1/messages"
        body = {"model": CLAUDE, "max_tokens": 64, **case.broken}
        # (a field the SDK does not type yet goes in extra_body; on the wire it is the body's)
        direct = {**{k: v for k, v in body.items() if k != "extra_body"},
                  **body.get("extra_body", {})}
        await _refused_directly(url, direct, ANTHROPIC_HEADERS, case.refusal)
        gw = await gateway_factory(native_config("http://127.0.0.1:9", fake.base_url))
        before = len(fake.requests)
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            if case.stream:
                async with c.messages.with_streaming_response.create(
                        stream=True, **body) as streamed:
                    headers = streamed.headers
                    events = [e.type async for e in await streamed.parse()]
                assert events[-1] == "message_stop"
            else:
                raw = await c.messages.with_raw_response.create(**body)
                headers = raw.headers
                assert (await raw.parse()).content
        _assert_reported(headers, case, len(fake.requests) - before)
        last = fake.requests[-1]
        if case.check is not None:
            case.check(last.body)
        await _accepted_again(url, last.raw, ANTHROPIC_HEADERS)


# -- previous_response_id the upstream no longer knows (records 9 and 10) ------------------

CODEX_REFUSAL = (400, b'{"error":{"message":"Invalid `previous_response_id`.",'
                      b'"type":"invalid_request_error","code":"invalid_request_error"}}')


async def _tool_turn(c: openai.AsyncOpenAI) -> tuple[str, str]:
    first = await c.responses.create(model=GPT, input="read TOOL a", tools=FN)  # type: ignore[arg-type]
    call = first.output[0]
    assert call.type == "function_call"
    return first.id, call.call_id


@pytest.mark.parametrize("codex", [False, True])
async def test_a_tool_output_continuing_a_forgotten_response_streams(
        gateway_factory: GatewayFactory, codex: bool) -> None:
    # The Agents SDK's tool loop: only the call's output, continuing the response that made
    # the call; the upstream forgot it (expired, or the Codex backend's "Invalid
    # `previous_response_id`."). The continuation is streamed.
    async with FakeResponses(api_key="upstream-openai-key") as fake:
        gw = await gateway_factory(native_config(fake.base_url, "http://127.0.0.1:9"))
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                      max_retries=0) as c:
            first_id, call_id = await _tool_turn(c)
            await settled(gw)
            fake.stored.clear()
            if codex:
                fake.script(Canned(*CODEX_REFUSAL))
            before = len(fake.requests)
            async with c.responses.with_streaming_response.create(
                    model=GPT, stream=True, previous_response_id=first_id, tools=FN,  # type: ignore[arg-type]
                    input=[{"type": "function_call_output", "call_id": call_id,
                            "output": "contents of a"}]) as streamed:
                headers = streamed.headers
                events = [e.type async for e in await streamed.parse()]
        assert events[-1] == "response.completed"
        assert headers["x-gateway-repairs"] == "previous_response_expanded=1"
        refused, resent = fake.requests[before:]
        assert refused.body["previous_response_id"] == first_id
        assert types(resent.body["input"]) == ["message", "function_call",
                                               "function_call_output"]
        await _accepted_again(f"{fake.base_url}/v1/responses", resent.raw, OPENAI_HEADERS)


@pytest.mark.parametrize("codex", [False, True])
async def test_a_chain_of_continuations_the_upstream_forgot_is_expanded_whole(
        gateway_factory: GatewayFactory, codex: bool) -> None:
    # Codex CLI / opencode continue turn after turn by id; the upstream lost all of them:
    # the whole chain the gateway kept goes in ``input``, in order.
    async with FakeResponses(api_key="upstream-openai-key") as fake:
        gw = await gateway_factory(native_config(fake.base_url, "http://127.0.0.1:9"))
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                      max_retries=0) as c:
            one = await c.responses.create(model=GPT, input="one")
            two = await c.responses.create(model=GPT, input="two", previous_response_id=one.id)
            await settled(gw)
            fake.stored.clear()
            if codex:
                fake.script(Canned(*CODEX_REFUSAL))
            raw = await c.responses.with_raw_response.create(
                model=GPT, input="three", previous_response_id=two.id)
        assert raw.parse().output_text == "you said: three"
        assert raw.headers["x-gateway-repairs"] == "previous_response_expanded=1"
        resent = fake.requests[-1]
        assert [i.get("content") for i in resent.body["input"] if i.get("role") == "user"] \
            == ["one", "two", "three"]
        await _accepted_again(f"{fake.base_url}/v1/responses", resent.raw, OPENAI_HEADERS)
