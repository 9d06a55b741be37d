"""What a structural refusal's words ask of the strict resend, end to end: a relay or
DeepSeek refusing the ``developer`` role gets it as ``system``; Mistral, refusing a user
turn right after tool results, gets an assistant turn in between. Real gateway, the real
``openai`` SDK, an upstream answering with each provider's own error body."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.conftest import GatewayFactory, model_entry
from tests.fakes import picky_chat
from tests.fakes.picky_chat import PickyChat

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
DEVELOPER_HISTORY: list[dict[str, Any]] = [
    {"role": "developer", "content": "Answer in one sentence."},
    {"role": "user", "content": "what does a.py do?"},
]
AFTER_TOOLS_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "what does a.py do?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')"},
    {"role": "user", "content": "and keep it short"},
]


async def ask(factory: GatewayFactory, upstream: PickyChat,
              messages: list[dict[str, Any]]) -> Any:
    gw = await factory({"model_list": [model_entry("m", upstream.base_url)],
                        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002}})
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as api:
        return await api.chat.completions.with_raw_response.create(
            model="m", messages=messages)  # type: ignore[arg-type]


@pytest.mark.parametrize("quirk", [picky_chat.no_developer_role_new_api,
                                   picky_chat.no_developer_role_deepseek])
async def test_a_refused_developer_role_goes_as_system(
    gateway_factory: GatewayFactory, quirk: picky_chat.Quirk,
) -> None:
    async with PickyChat([quirk]) as upstream:
        raw = await ask(gateway_factory, upstream, DEVELOPER_HISTORY)
    assert raw.http_response.status_code == 200
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert "developer_role_converted" in raw.headers["x-gateway-repairs"]
    assert upstream.statuses == [400, 200]
    assert upstream.bodies[-1]["messages"][0] == {"role": "system",
                                                  "content": "Answer in one sentence."}


async def test_mistral_gets_an_assistant_turn_after_tool_results(
    gateway_factory: GatewayFactory,
) -> None:
    async with PickyChat([picky_chat.mistral_message_order]) as upstream:
        raw = await ask(gateway_factory, upstream, AFTER_TOOLS_HISTORY)
    assert raw.http_response.status_code == 200
    assert "assistant_turn_inserted" in raw.headers["x-gateway-repairs"]
    assert upstream.statuses == [400, 200]
    roles = [m["role"] for m in upstream.bodies[-1]["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]


async def test_a_developer_role_the_upstream_takes_goes_as_sent(
    gateway_factory: GatewayFactory,
) -> None:
    async with PickyChat([]) as upstream:
        raw = await ask(gateway_factory, upstream, DEVELOPER_HISTORY)
    assert "x-gateway-repairs" not in raw.headers
    assert upstream.bodies == [{"model": "m-upstream", "messages": DEVELOPER_HISTORY}]


CUT_OFF = '{"path": "src/app.py", "line'  # a small model's arguments, cut off mid-key
BROKEN_ARGUMENTS_HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "fix the bug in app.py"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "read_file", "arguments": CUT_OFF}},
        {"id": "call_2", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "src/util.py"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "error: arguments are not JSON"},
    {"role": "tool", "tool_call_id": "call_2", "content": "def helper(): ..."},
    {"role": "user", "content": "try again"},
]


async def test_a_history_with_cut_off_arguments_passes_vllm(
    gateway_factory: GatewayFactory,
) -> None:
    # vLLM parses every call of the history: the one cut-off call refused every later turn.
    async with PickyChat([picky_chat.vllm_json_arguments]) as upstream:
        raw = await ask(gateway_factory, upstream, BROKEN_ARGUMENTS_HISTORY)
    assert raw.http_response.status_code == 200
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert "tool_arguments_wrapped=1" in raw.headers["x-gateway-repairs"]
    assert upstream.statuses == [400, 200]
    calls = upstream.bodies[-1]["messages"][1]["tool_calls"]
    assert [call["function"]["arguments"] for call in calls] == [
        json.dumps({"unparsed_arguments": CUT_OFF}), '{"path": "src/util.py"}']
    assert [call["id"] for call in calls] == ["call_1", "call_2"]


async def test_arguments_an_upstream_takes_go_as_sent(gateway_factory: GatewayFactory) -> None:
    async with PickyChat([]) as upstream:  # OpenAI takes any string there
        raw = await ask(gateway_factory, upstream, BROKEN_ARGUMENTS_HISTORY)
    assert "x-gateway-repairs" not in raw.headers
    assert upstream.bodies[-1]["messages"] == BROKEN_ARGUMENTS_HISTORY
