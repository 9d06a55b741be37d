"""A request's objects are freed when it ends, by reference counting alone.

A reference cycle through a request (the aiohttp request holds its Flow, the Flow its wire
codec, the codec a closure over the request) leaves the whole request, its parsed history
and views included, to Python's cyclic collector: on 600-message Messages turns that
collector took ~14% of the gateway's CPU, scanning every history kept for the next turn.
Requests of every wire go through the real SDKs (valid, repaired, streamed, translated to
another wire, continued from a stored response, refused by the gateway, refused upstream
and retried on the strict rung, captured by the inspector); then nothing of the gateway
may be left for the collector to find.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web

from gateway.referee import Referee
from tests.compaction.conftest import Session, compaction_header, demo_config
from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import calls, tool, user
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.responses_server import FakeResponses
from tests.server.three_upstreams import models

KEY = "client-key-cycles-0123"
REPORTING = "client-key-cycles-report"  # its histories go as sent: refused, then strict
TOOL: Any = {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}
A_TOOL: Any = {"name": "read", "input_schema": {"type": "object"}}
R_TOOL: Any = {"type": "function", "name": "read", "parameters": {"type": "object"}}
BOGUS: Any = [{"type": "bogus"}]


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
             gpt: FakeResponses) -> RunningGateway:
    return await gateway_factory({
        "model_list": models(referee, claude, gpt),
        "gateway": {"api_keys": [{"key": KEY, "owner": "team"},
                                 {"key": REPORTING, "owner": "reporting"}], "ui": True},
        "repair": {"owners": {"reporting": {"policy": "report"}}},
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
    })


def _ours(obj: object) -> bool:
    """One of the gateway's objects, or an aiohttp request (not the fake chat upstream's:
    ``gateway.referee`` is a test server here)."""
    kind = type(obj)
    module = kind.__dict__.get("__module__")
    return kind is web.Request or (isinstance(module, str) and module.startswith("gateway.")
                                   and not module.startswith("gateway.referee"))


@pytest.fixture
def left_for_the_collector() -> Iterator[Callable[[], Counter[str]]]:
    """The cyclic collector off while the requests run, so that what only it would free is
    still there to be found afterwards: the call returns what it finds of the gateway's.
    What existed before (the earlier tests' gateways, freed whenever their last reference
    goes) is held until the end and not counted."""
    gc.collect()
    before = [obj for obj in gc.get_objects() if _ours(obj)]
    held = {id(obj) for obj in before}
    gc.disable()

    def left() -> Counter[str]:
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return Counter(f"{type(obj).__module__}.{type(obj).__qualname__}"
                       for obj in gc.garbage if _ours(obj) and id(obj) not in held)

    try:
        yield left
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        del before


async def _chat_requests(gw: RunningGateway) -> None:
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0) as c:
        await c.chat.completions.create(model="chat", messages=[
            {"role": "user", "content": "hi"}])
        broken: list[Any] = [
            {"role": "user", "content": "read a"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "read", "arguments": "{}"}}]},
            {"role": "user", "content": "never mind"},  # the call was cancelled
        ]
        await c.chat.completions.create(model="chat", messages=broken, tools=[TOOL])
        stream = await c.chat.completions.create(model="chat", stream=True, messages=[
            {"role": "user", "content": "stream"}])
        async for _chunk in stream:
            pass
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=REPORTING,
                                  max_retries=0) as c:
        orphan: list[Any] = [{"role": "user", "content": "hi"},
                             {"role": "tool", "tool_call_id": "call_gone", "content": "x"},
                             {"role": "user", "content": "go on"}]
        raw = await c.chat.completions.with_raw_response.create(model="chat", messages=orphan)
        assert raw.headers["x-gateway-recovery"] == "strict"
        with pytest.raises(openai.NotFoundError):
            await c.chat.completions.create(model="nowhere", messages=[
                {"role": "user", "content": "hi"}])
        with pytest.raises(openai.BadRequestError):
            await c.chat.completions.create(model="chat", messages=[])


async def _messages_requests(gw: RunningGateway) -> None:
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEY, max_retries=0) as c:
        history: list[Any] = [{"role": "user", "content": "read a"}]
        for model in ("claude", "chat"):  # native, and translated to chat
            await c.messages.create(model=model, max_tokens=16, messages=history)
        turn: list[Any] = [
            *history,
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a"}]},
        ]
        await c.messages.create(model="claude", max_tokens=16, messages=turn, tools=[A_TOOL])
        # The next turn, read over this one; then one that lost its result (repaired).
        await c.messages.create(model="claude", max_tokens=16, tools=[A_TOOL], messages=[
            *turn, {"role": "assistant", "content": "done"},
            {"role": "user", "content": "and b?"}])
        await c.messages.create(model="claude", max_tokens=16, tools=[A_TOOL],
                                messages=[*turn[:2], {"role": "user", "content": "go on"}])
        for model in ("claude", "chat"):  # a native stream, and one translated from chat
            async with c.messages.stream(model=model, max_tokens=16,
                                         messages=history) as stream:
                await stream.get_final_message()
        for model in ("claude", "chat"):  # counted upstream, and estimated
            await c.messages.count_tokens(model=model, messages=history)
        with pytest.raises(anthropic.BadRequestError):
            await c.messages.create(model="claude", max_tokens=16, messages=[])
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=REPORTING,
                                        max_retries=0) as c:
        orphan: list[Any] = [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_gone", "content": "x"},
                {"type": "text", "text": "go"}]}]
        raw = await c.messages.with_raw_response.create(model="claude", max_tokens=16,
                                                        messages=orphan)
        assert raw.headers["x-gateway-recovery"] == "strict"


async def _responses_requests(gw: RunningGateway) -> None:
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0) as c:
        first = await c.responses.create(model="gpt", input="hi")
        await c.responses.create(model="gpt", input="and then?",
                                 previous_response_id=first.id)
        await c.responses.create(model="chat", input="translated")
        items: list[Any] = [
            {"role": "user", "content": "read a"},
            {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a"},
        ]
        await c.responses.create(model="gpt", input=items, tools=[R_TOOL])
        await c.responses.create(model="gpt", input=[
            *items[:2], {"role": "user", "content": "go on"}])  # an unanswered call: repaired
        for model in ("gpt", "chat"):  # a native stream, and one translated from chat
            stream = await c.responses.create(model=model, input="stream", stream=True)
            async for _event in stream:
                pass
        with pytest.raises(openai.BadRequestError):
            await c.responses.create(model="gpt", input=BOGUS)
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=REPORTING,
                                  max_retries=0) as c:
        orphan: list[Any] = [
            {"role": "user", "content": "hi"},
            {"type": "function_call_output", "call_id": "call_gone", "output": "x"},
            {"role": "user", "content": "go on"}]
        raw = await c.responses.with_raw_response.create(model="gpt", input=orphan)
        assert raw.headers["x-gateway-recovery"] == "strict"


@pytest.mark.parametrize("requests", [_chat_requests, _messages_requests,
                                      _responses_requests])
async def test_requests_are_freed_without_the_cyclic_collector(
    gw: RunningGateway, left_for_the_collector: Callable[[], Counter[str]], requests: Any
) -> None:
    await requests(gw)
    assert left_for_the_collector() == Counter()


async def test_compacted_requests_are_freed_without_the_cyclic_collector(
    gateway_factory: GatewayFactory, left_for_the_collector: Callable[[], Counter[str]]
) -> None:
    # Past the upstream's window: an old log folded to a card, then a log the current turn
    # answers summarized (a summary call, then the request retried).
    huge = "\n".join(f"line {i}: " + "data " * 12 for i in range(900))
    async with Referee(rules="openai", context_window=9000) as ref:
        gw = await gateway_factory(demo_config(ref, window=200_000))
        folded = Session(gw)
        raw = await folded.send([user("read the log"), calls("call_log"),
                                 tool("call_log", huge), user("what went wrong?")])
        assert (compaction_header(raw) or ("",))[0] == "reduced"
        summarized = Session(gw, session_id="sess-2")
        raw = await summarized.send([user("read the log"), calls("call_log"),
                                     tool("call_log", huge)])
        assert (compaction_header(raw) or ("",))[0] == "summarized"
        assert left_for_the_collector() == Counter()
