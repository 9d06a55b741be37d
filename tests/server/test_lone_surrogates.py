"""Half an emoji: a client that cuts a string by UTF-16 units (JavaScript's ``slice``,
a truncating trimmer) sends ``"\\ud83d"`` without its other half. No JSON reader takes it
and every provider refuses it; the gateway writes each such half as U+FFFD, reports
``lone_surrogate_replaced`` and answers, on all three wires."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from gateway.wires.chat_validation import replace_lone_surrogates
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_fleet import FleetUpstream

CUT = rb"the build passed \ud83d"  # an emoji's high half, its low half sliced off


@pytest.mark.parametrize(("raw", "fixed"), [
    (rb'"a \ud83d b"', rb'"a \ufffd b"'),
    (rb'"\udc00"', rb'"\ufffd"'),  # a low half alone
    (rb'"\ud83d\ud83d"', rb'"\ufffd\ufffd"'),  # two high halves
    (rb'"\ud83d\ude00\ude00"', rb'"\ud83d\ude00\ufffd"'),  # a pair, then a stray low half
    (rb'"ok \ud83d\ude00"', rb'"ok \ud83d\ude00"'),  # a whole emoji stays
    (rb'"\\ud83d"', rb'"\\ud83d"'),  # an escaped backslash, then plain text
    (rb'"\\\ud83d"', rb'"\\\ufffd"'),  # a backslash, then a half
])
def test_only_halves_are_replaced(raw: bytes, fixed: bytes) -> None:
    assert replace_lone_surrogates(raw) == fixed
    json.loads(fixed)


async def post(gw: RunningGateway, path: str, body: bytes
               ) -> tuple[int, Any, dict[str, str]]:
    async with aiohttp.ClientSession() as http, http.post(
            f"{gw.base_url}{path}", data=body,
            headers={"Content-Type": "application/json"}) as resp:
        return resp.status, await resp.json(), dict(resp.headers)


async def test_chat_with_half_an_emoji_is_answered(gateway_factory: GatewayFactory) -> None:
    async with FleetUpstream("up") as up:
        gw = await gateway_factory({"model_list": [model_entry("m", up.v1)]})
        # (JavaScript's JSON.stringify writes the half as an escape; Python's SDKs cannot
        # send it at all, so the bytes go as such a client sends them)
        status, answer, headers = await post(gw, "/chat/completions", (
            b'{"model": "m", "messages": [{"role": "user", "content": "' + CUT + b'"}]}'))
        assert status == 200 and answer["choices"][0]["message"]["content"]
        assert headers["x-gateway-repairs"] == "lone_surrogate_replaced=1"
        assert up.requests[-1].body["messages"][0]["content"] == "the build passed \ufffd"


async def test_messages_with_half_an_emoji_is_answered(gateway_factory: GatewayFactory) -> None:
    async with FakeAnthropic() as claude:
        gw = await gateway_factory({"model_list": [{"model_name": "claude", "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5", "api_base": claude.base_url,
            "api_key": "sk-ant-x"}}]})
        status, answer, headers = await post(gw, "/messages", (
            b'{"model": "claude", "max_tokens": 32, "messages": [{"role": "user", '
            b'"content": "' + CUT + b'"}]}'))
        assert status == 200 and answer["type"] == "message"
        assert "lone_surrogate_replaced" in headers["x-gateway-repairs"]
        assert claude.requests[-1].body["messages"][0]["content"] == "the build passed \ufffd"


async def test_responses_with_half_an_emoji_is_answered(gateway_factory: GatewayFactory) -> None:
    async with FleetUpstream("up") as up:
        gw = await gateway_factory({"model_list": [
            model_entry("m", up.v1, model="openai/qwen3", responses_api=False)]})
        status, answer, _ = await post(gw, "/responses",
                                    rb'{"model": "m", "input": "cut \ud83d here"}')
        assert status == 200 and answer["status"] == "completed"
        assert up.requests[-1].body["messages"][-1]["content"] == "cut \ufffd here"


async def test_bytes_that_are_not_utf8_stay_a_clear_400(gateway_factory: GatewayFactory) -> None:
    async with FleetUpstream("up") as up:
        gw = await gateway_factory({"model_list": [model_entry("m", up.v1)]})
        # (a surrogate written as raw UTF-8 bytes: not UTF-8 at all)
        status, answer, _ = await post(gw, "/chat/completions",
                                    b'{"model": "m", "messages": [{"role": "user", '
                                    b'"content": "\xed\xa0\xbd"}]}')
        assert status == 400 and "UTF-8" in answer["error"]["message"]
        assert up.requests == []
