"""The agent wires on a fleet: a native Messages or Responses request goes to the
deployments of its group (and of its fallback groups) that speak that wire, in the order,
cooldowns and fallbacks of the LiteLLM config, through the official SDKs. A deployment
that does not speak the wire is never sent the native body; a ``previous_response_id``
stays with the provider that holds the history."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.openai_fleet import FleetUpstream
from tests.fakes.responses_server import FakeResponses, responses_error

KEY = "sk-client-native-fleet"
OVERLOADED = anthropic_error(529, "Overloaded", "overloaded_error")


@pytest.fixture
async def claudes() -> AsyncIterator[tuple[FakeAnthropic, FakeAnthropic, FakeAnthropic]]:
    async with FakeAnthropic(api_key="k-a") as a, FakeAnthropic(api_key="k-b") as b, \
            FakeAnthropic(api_key="k-c") as c:
        yield a, b, c


def claude(name: str, server: FakeAnthropic, key: str, model: str, ident: str,
           order: int) -> dict[str, Any]:
    return {"model_name": name, "litellm_params": {
        "model": f"anthropic/{model}", "api_base": server.base_url, "api_key": key,
        "order": order}, "model_info": {"id": ident}}


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, claudes: tuple[FakeAnthropic, ...]
             ) -> AsyncIterator[RunningGateway]:
    a, b, c = claudes
    async with FleetUpstream("proxy") as chat_only:
        yield await gateway_factory({
            "model_list": [
                claude("claude", a, "k-a", "claude-sonnet-4-5", "claude-east", 1),
                claude("claude", b, "k-b", "claude-sonnet-4-5-west", "claude-west", 2),
                # Same group, chat only: never sent an Anthropic body.
                {**model_entry("claude", chat_only.v1, model="openai/claude-proxy"),
                 "model_info": {"id": "claude-chat-proxy"}},
                claude("claude-backup", c, "k-c", "claude-haiku-4-5", "claude-backup-1", 1),
            ],
            "router_settings": {"fallbacks": [{"claude": ["claude-backup"]}],
                                "allowed_fails": 0, "cooldown_time": 30,
                                "routing_strategy": "simple-shuffle"},
            "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
            "gateway": {"api_keys": [KEY]},
        })


def client(gw: RunningGateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEY, max_retries=0)


async def test_an_overloaded_deployment_hands_the_native_request_to_the_next(
    gw: RunningGateway, claudes: tuple[FakeAnthropic, FakeAnthropic, FakeAnthropic]
) -> None:
    a, b, c = claudes
    a.script(OVERLOADED)
    async with client(gw) as api:
        raw = await api.messages.with_raw_response.create(
            model="claude", max_tokens=32, messages=[{"role": "user", "content": "hello"}])
    assert raw.http_response.status_code == 200
    assert raw.headers["x-gateway-deployment"] == "claude-west"
    assert (await raw.parse()).content[0].text == "you said: hello"  # type: ignore[union-attr]
    # Each got the native body with its own model and key.
    assert a.requests[0].body["model"] == "claude-sonnet-4-5"
    assert b.requests[0].body["model"] == "claude-sonnet-4-5-west"
    assert b.requests[0].headers["x-api-key"] == "k-b"
    assert c.requests == []

    # allowed_fails: 0 -> the overloaded one is cooling down: the next turn goes west first.
    async with client(gw) as api:
        raw = await api.messages.with_raw_response.create(
            model="claude", max_tokens=32, messages=[{"role": "user", "content": "again"}])
    assert raw.headers["x-gateway-deployment"] == "claude-west"
    assert len(a.requests) == 1 and len(b.requests) == 2


async def test_a_group_that_cannot_answer_falls_back_natively(
    gw: RunningGateway, claudes: tuple[FakeAnthropic, FakeAnthropic, FakeAnthropic]
) -> None:
    a, b, c = claudes
    a.script(*[OVERLOADED] * 8)
    b.script(*[OVERLOADED] * 8)
    async with client(gw) as api:
        raw = await api.messages.with_raw_response.create(
            model="claude", max_tokens=32, messages=[{"role": "user", "content": "anyone?"}])
    assert raw.http_response.status_code == 200
    assert raw.headers["x-gateway-model-used"] == "claude-backup"
    assert "fallback" in raw.headers["x-gateway-recovery"].split(",")
    assert c.requests[-1].body["model"] == "claude-haiku-4-5"
    assert c.requests[-1].headers["x-api-key"] == "k-c"


async def test_responses_moves_between_openai_deployments_and_a_continuation_follows(
    gateway_factory: GatewayFactory,
) -> None:
    async with FakeResponses(api_key="k-1") as one, FakeResponses(api_key="k-2") as two:
        gw = await gateway_factory({
            "model_list": [
                {"model_name": "gpt", "litellm_params": {
                    "model": f"openai/gpt-5{suffix}", "api_base": f"{server.base_url}/v1",
                    "api_key": key, "order": n}, "model_info": {"id": f"gpt-{n}"}}
                for n, (server, key, suffix) in enumerate(
                    [(one, "k-1", ""), (two, "k-2", "-eu")], start=1)],
            "router_settings": {"allowed_fails": 0, "cooldown_time": 30},
            "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
            "gateway": {"api_keys": [KEY]}})
        one.script(responses_error(500, "The server had an error", param=None))
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY,
                                      max_retries=0) as api:
            raw = await api.responses.with_raw_response.create(model="gpt", input="hi")
            assert raw.headers["x-gateway-deployment"] == "gpt-2"
            assert two.requests[-1].body["model"] == "gpt-5-eu"
            first = raw.parse()
            # The answer's history lives at the provider that made it: a continuation by
            # previous_response_id is sent there, as written (not expanded elsewhere).
            before = len(one.requests)
            follow = await api.responses.with_raw_response.create(
                model="gpt", input="and then?", previous_response_id=first.id)
            assert follow.http_response.status_code == 200
            assert follow.headers["x-gateway-deployment"] == "gpt-2"
            assert "x-gateway-repairs" not in follow.headers
            assert len(one.requests) == before
            assert two.requests[-1].body["previous_response_id"] == first.id
