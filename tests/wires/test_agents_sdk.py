"""The OpenAI Agents SDK, with its default Responses model, runs a tool loop through the
gateway: natively to a Responses upstream and translated to a chat-only one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, gateway_state
from tests.fakes.responses_server import FakeResponses

calls: list[str] = []


@function_tool
def read_file(query: str = "") -> str:
    """Read the file the user means."""
    calls.append(query)
    return "the file says 42"


@pytest.fixture(autouse=True)
def no_tracing() -> None:
    set_tracing_disabled(True)  # the SDK would export traces to OpenAI otherwise
    calls.clear()


@pytest.fixture
async def fake() -> AsyncIterator[FakeResponses]:
    async with FakeResponses() as server:
        yield server


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict") as ref:
        yield ref


def client(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key", max_retries=0)


def agent(model: str, client: openai.AsyncOpenAI) -> Agent[Any]:
    return Agent(name="helper", instructions="Use tools when asked.", tools=[read_file],
                 model=OpenAIResponsesModel(model=model, openai_client=client))


async def test_two_turn_tool_loop_native(gateway_factory: GatewayFactory,
                                         fake: FakeResponses) -> None:
    gw = await gateway_factory({"model_list": [{"model_name": "gpt", "litellm_params": {
        "model": "openai/gpt-5", "api_base": f"{fake.base_url}/v1", "api_key": "k"}}]})
    async with client(gw) as c:
        helper = agent("gpt", c)
        first = await Runner.run(helper, "read it with the TOOL")
        assert calls == ["read it with the TOOL"]
        assert first.final_output == "tool results: the file says 42"
        second = await Runner.run(helper, [*first.to_input_list(),
                                           {"role": "user", "content": "thanks, bye"}])
    assert second.final_output == "you said: thanks, bye"
    kinds = [i.get("type", "message") for i in fake.requests[-1].body["input"]]
    assert kinds.count("function_call") == 1 and kinds.count("function_call_output") == 1
    # The SDK's histories are valid: nothing was repaired on any call.
    metrics = gateway_state(gw).driver.metrics.render().decode()
    assert "gateway_repairs_total{" not in metrics
    assert len(fake.requests) == 3  # call, answer after the tool, second turn


async def test_two_turn_tool_loop_translated(gateway_factory: GatewayFactory,
                                             referee: Referee) -> None:
    gw = await gateway_factory({"model_list": [{"model_name": "local", "litellm_params": {
        "model": "hosted_vllm/referee", "api_base": referee.base_url, "api_key": "k"}}]})
    async with client(gw) as c:
        helper = agent("local", c)
        first = await Runner.run(helper, "read it with the TOOL")
        assert len(calls) == 1
        assert str(first.final_output).startswith("referee: accepted")
        second = await Runner.run(helper, [*first.to_input_list(),
                                           {"role": "user", "content": "thanks"}])
    assert str(second.final_output).startswith("referee: accepted")
