"""The Anthropic Messages routes name the gateway's request id in ``request-id`` too (the
header Anthropic sends and its SDK reads), on answers, streams and refusals; the other wires
keep ``x-request-id`` alone."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.anthropic_server import FakeAnthropic

KEY = "client-key-request-id"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
HELLO = {"model": "claude", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, claude: FakeAnthropic) -> RunningGateway:
    return await gateway_factory({
        "model_list": [{"model_name": "claude", "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5", "api_base": claude.base_url,
            "api_key": "upstream-key-request-id"}}],
        "gateway": {"api_keys": [{"key": KEY, "owner": "team"}],
                    "cors_origins": ["https://app.example"]}})


@pytest.mark.parametrize(("body", "headers", "status"), [
    (HELLO, HEADERS, 200),
    ({**HELLO, "stream": True}, HEADERS, 200),
    ({**HELLO, "messages": [{"role": "robot", "content": "hi"}]}, HEADERS, 400),
    (HELLO, {"anthropic-version": "2023-06-01"}, 401),
], ids=["answer", "stream", "refused", "unauthenticated"])
async def test_messages_answers_carry_request_id(
    gw: RunningGateway, body: dict[str, object], headers: dict[str, str], status: int
) -> None:
    async with aiohttp.ClientSession() as http, \
            http.post(f"{gw.base_url}/messages", json=body, headers=headers) as answer:
        await answer.read()
    assert answer.status == status
    assert answer.headers["request-id"] == answer.headers["x-request-id"]


async def test_count_tokens_carries_request_id_and_chat_does_not(gw: RunningGateway) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{gw.base_url}/messages/count_tokens", headers=HEADERS,
                             json={"model": "claude", "messages": HELLO["messages"]}) as counted:
            await counted.read()
        async with http.post(f"{gw.base_url}/chat/completions", json=HELLO,
                             headers={"Authorization": f"Bearer {KEY}"}) as chat:
            await chat.read()
    assert counted.status == 200
    assert counted.headers["request-id"] == counted.headers["x-request-id"]
    assert chat.status == 200 and "request-id" not in chat.headers


async def test_a_browser_may_read_request_id_and_should_retry(gw: RunningGateway) -> None:
    async with aiohttp.ClientSession() as http, http.post(
            f"{gw.base_url}/messages", json=HELLO,
            headers={**HEADERS, "Origin": "https://app.example"}) as answer:
        await answer.read()
    exposed = answer.headers["Access-Control-Expose-Headers"].split(", ")
    assert "request-id" in exposed and "x-should-retry" in exposed
