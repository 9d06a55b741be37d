"""/v1/responses natively to a Responses upstream, through the openai SDK.

The upstream is the fake Responses API (tests/fakes/responses_server.py), which refuses
broken input histories with the real error texts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import orjson
import pytest

from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import user
from tests.fakes.responses_server import FakeResponses, responses_error

TOOLS: list[Any] = [{"type": "function", "name": "read_file", "description": "read a file",
                     "parameters": {"type": "object", "properties": {}}}]



def call(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "read_file",
            "arguments": "{}"}


def output(call_id: str, text: str = "contents") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


REASONING = {"type": "reasoning", "id": "rs_1", "summary": [],
             "encrypted_content": "gAAAA-opaque"}

BROKEN: dict[str, tuple[list[dict[str, Any]], str]] = {
    "cancelled call": ([user("read a"), REASONING, call("call_1"), user("never mind")],
                       "tool_result_synthesized"),
    "orphan output": ([user("hi"), output("call_gone"), user("go on")],
                      "orphan_tool_result_dropped"),
    # (Outputs later than their calls pair by call_id: they go as sent, test_wire_heldout.py.)
    "empty message": ([user("hi"), {"type": "message", "role": "assistant",
                                    "content": [{"type": "output_text", "text": " "}]},
                       user("again")], "empty_content_dropped"),
    "duplicate output": ([user("read"), call("call_1"), output("call_1", "a"),
                          output("call_1", "b"), user("ok")], "duplicate_tool_result_dropped"),
    # A client that replays its reasoning item twice (vercel/ai#7883).
    "duplicate id": ([user("read a"), REASONING, call("call_1"), output("call_1"), REASONING,
                      user("go on")], "duplicate_item_dropped"),
}


@pytest.fixture
async def fake() -> AsyncIterator[FakeResponses]:
    async with FakeResponses(api_key="upstream-openai-key") as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, fake: FakeResponses) -> RunningGateway:
    return await gateway_factory({
        "model_list": [{"model_name": "gpt", "litellm_params": {
            "model": "openai/gpt-5", "api_base": f"{fake.base_url}/v1",
            "api_key": "upstream-openai-key"}}],
        "gateway": {"api_keys": ["client-key"]},
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
    })


def client(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key", max_retries=0)


@pytest.mark.parametrize("case", list(BROKEN))
async def test_broken_input_is_accepted_and_reported(
    gw: RunningGateway, fake: FakeResponses, case: str
) -> None:
    items, kind = BROKEN[case]
    async with client(gw) as c:
        raw = await c.responses.with_raw_response.create(model="gpt", input=items,  # type: ignore[arg-type]
                                                         tools=TOOLS)
    response = raw.parse()
    assert response.output_text
    assert kind in raw.headers["x-gateway-repairs"]
    sent = fake.requests[-1]
    assert sent.headers["authorization"] == "Bearer upstream-openai-key"
    assert sent.body["model"] == "gpt-5"


async def test_reasoning_and_unknown_items_stay_in_place(
    gw: RunningGateway, fake: FakeResponses
) -> None:
    items, _ = BROKEN["cancelled call"]
    unknown = {"type": "web_search_call", "id": "ws_1", "status": "completed",
               "action": {"type": "search", "query": "x"}}
    async with client(gw) as c:
        await c.responses.create(model="gpt", input=[unknown, *items], tools=TOOLS)  # type: ignore[list-item]
    sent = fake.requests[-1].body["input"]
    assert sent[0] == unknown
    assert sent[2] == REASONING
    assert orjson.dumps(REASONING) in fake.requests[-1].raw
    assert [i.get("type") for i in sent[3:5]] == ["function_call", "function_call_output"]


async def test_valid_input_arrives_unchanged(gw: RunningGateway, fake: FakeResponses) -> None:
    items = [user("read"), REASONING, call("call_1"), output("call_1"),
             {"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "done"}]}, user("thanks")]
    async with client(gw) as c:
        raw = await c.responses.with_raw_response.create(model="gpt", input=items,  # type: ignore[arg-type]
                                                         tools=TOOLS, instructions="be brief")
    assert "x-gateway-repairs" not in raw.headers
    sent = fake.requests[-1].body
    assert sent["input"] == items
    assert sent["instructions"] == "be brief"


async def test_stream_through_the_sdk(gw: RunningGateway, fake: FakeResponses) -> None:
    items, _ = BROKEN["orphan output"]
    async with client(gw) as c, c.responses.stream(model="gpt", input=items) as stream:  # type: ignore[arg-type]
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(deltas) == "you said: hi go on"
    assert final.output_text == "you said: hi go on"
    assert fake.requests[-1].body["stream"] is True


async def test_previous_response_id_is_forwarded(gw: RunningGateway, fake: FakeResponses) -> None:
    async with client(gw) as c:
        first = await c.responses.create(model="gpt", input="please TOOL", tools=TOOLS)
        fc = first.output[0]
        assert fc.type == "function_call"
        second = await c.responses.create(
            model="gpt", previous_response_id=first.id, tools=TOOLS,
            input=[{"type": "function_call_output", "call_id": fc.call_id, "output": "42"}])
    assert second.output_text == "tool results: 42"
    assert fake.requests[-1].body["previous_response_id"] == first.id


async def test_upstream_refusal_in_responses_shape(gw: RunningGateway, fake: FakeResponses) -> None:
    fake.script(responses_error(400, "Invalid value for 'temperature'.", "temperature",
                                "invalid_value"))
    async with client(gw) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model="gpt", input="hi")
    assert refused.value.code == "invalid_value"
    assert refused.value.param == "temperature"


async def test_structural_refusal_climbs_to_strict(gw: RunningGateway, fake: FakeResponses) -> None:
    from tests.fakes.responses_server import NO_OUTPUT

    fake.script(responses_error(400, NO_OUTPUT.format(id="call_1")))
    items: list[Any] = [{"type": "message", "role": "assistant",
                         "content": [{"type": "output_text", "text": "left over"}]},
                        user("hi")]
    async with client(gw) as c:
        raw = await c.responses.with_raw_response.create(model="gpt", input=items)  # type: ignore[arg-type]
    assert raw.parse().output_text == "you said: hi"
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert raw.headers["x-gateway-repairs"] == "leading_non_user_dropped=1"
    assert fake.requests[-1].body["input"] == [user("hi")]


async def test_litellm_only_fields_never_reach_the_provider(
    gw: RunningGateway, fake: FakeResponses
) -> None:
    # A client written for the LiteLLM proxy sends its controls in the body; the provider
    # would refuse them (or act on a mock answer): they are consumed at the gateway.
    async with client(gw) as c:
        await c.responses.create(model="gpt", input=[user("hi")], extra_body={
            "mock_response": "not from the model", "tags": ["team-a"], "caching": True,
            "num_retries": 1})
    sent = fake.requests[-1].body
    assert not {"mock_response", "tags", "caching", "num_retries"} & set(sent)
    assert sent["input"] == [user("hi")]
