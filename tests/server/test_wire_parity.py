"""One relay for every wire: the same exchange on Chat Completions, Responses and Anthropic
Messages (translated to a chat upstream, or relayed from a native one), whole and streamed,
leaves the same telemetry: the request span joined to the client's ``traceparent``, the
same token counts in ``/metrics``, the same open-stream gauge and disconnect records."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.three_wires import INPUT_TOKENS, OUTPUT_TOKENS, ThreeWires, wire_models
from tests.telemetry.promtext import scrape

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
# (client wire, model): chat upstream for all three wires, native upstreams for two.
CASES = [("chat", "chat"), ("responses", "chat"), ("responses", "resp"),
         ("anthropic", "chat"), ("anthropic", "claude")]


@pytest.fixture
async def upstream() -> AsyncIterator[ThreeWires]:
    async with ThreeWires() as up:
        yield up


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, upstream: ThreeWires) -> RunningGateway:
    return await gateway_factory({"model_list": wire_models(upstream.base_url)})


async def span_of(gw: RunningGateway, n: int) -> Any:
    """The request span whose parent is the client's span ``n``: waited for (bounded), as
    the gateway ends it right after the client saw the answer's end."""
    for _ in range(500):
        found = request_span(gw, n)
        if found is not None:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"no request span for the client's span {n}")


def traceparent(n: int) -> dict[str, str]:
    return {"traceparent": f"00-{CLIENT_TRACE}-{n:016x}-01"}


async def ask(gw: RunningGateway, wire: str, model: str, stream: bool, n: int) -> str:
    """The exchange through the wire's official SDK; the text it got."""
    headers = traceparent(n)
    if wire == "anthropic":
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="k",
                                            max_retries=0) as a:
            if not stream:
                message = await a.messages.create(
                    model=model, max_tokens=50, extra_headers=headers,
                    messages=[{"role": "user", "content": "hi"}])
                return "".join(b.text for b in message.content if b.type == "text")
            events = await a.messages.create(
                model=model, max_tokens=50, stream=True, extra_headers=headers,
                messages=[{"role": "user", "content": "hi"}])
            return "".join([e.delta.text async for e in events
                            if e.type == "content_block_delta" and e.delta.type == "text_delta"])
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
        if wire == "chat":
            if not stream:
                done = await c.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": "hi"}],
                    extra_headers=headers)
                return done.choices[0].message.content or ""
            chunks = await c.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], stream=True,
                extra_headers=headers)
            return "".join([ch.choices[0].delta.content or "" async for ch in chunks
                            if ch.choices])
        if not stream:
            response = await c.responses.create(model=model, input="hi", extra_headers=headers)
            return response.output_text
        events = await c.responses.create(model=model, input="hi", stream=True,
                                          extra_headers=headers)
        return "".join([e.delta async for e in events
                        if e.type == "response.output_text.delta"])


def request_span(gw: RunningGateway, n: int) -> Any:
    """The gateway's request span whose parent is the client's span ``n``."""
    found = [s for s in gw.spans.get_finished_spans() if s.name == "gateway.chat"
             and s.parent is not None and s.parent.span_id == n]
    return found[0] if found else None


async def test_every_wire_leaves_the_same_spans_and_token_counts(gw: RunningGateway) -> None:
    n = 0
    for wire, model in CASES:
        for stream in (False, True):
            n += 1
            before = await scrape(gw.root)
            assert await ask(gw, wire, model, stream, n) == "hello there", (wire, model, stream)
            span = await span_of(gw, n)
            # Joined to the client's trace, with the answer's usage and model.
            assert format(span.context.trace_id, "032x") == CLIENT_TRACE
            attrs = dict(span.attributes)
            assert attrs["gateway.wire"] == wire
            assert attrs["gen_ai.request.model"] == model
            assert attrs["gen_ai.response.model"] == "up-model", (wire, model, stream)
            assert attrs["gen_ai.usage.input_tokens"] == INPUT_TOKENS, (wire, model, stream)
            assert attrs["gen_ai.usage.output_tokens"] == OUTPUT_TOKENS, (wire, model, stream)
            assert attrs["http.response.status_code"] == 200
            attempt = next(s for s in gw.spans.get_finished_spans()
                           if s.name == "gateway.attempt" and s.parent is not None
                           and s.parent.span_id == span.context.span_id)
            assert attempt.context.trace_id == span.context.trace_id
            after = await scrape(gw.root)
            for direction, tokens in (("input", INPUT_TOKENS), ("output", OUTPUT_TOKENS)):
                grew = (after.total("gateway_tokens_total", model=model, direction=direction)
                        - before.total("gateway_tokens_total", model=model,
                                       direction=direction))
                assert grew == tokens, (wire, model, stream, direction)
            assert (after.total("gateway_requests_total", model=model, wire=wire)
                    - before.total("gateway_requests_total", model=model, wire=wire)) == 1


async def _open_stream(gw: RunningGateway, wire: str, model: str, n: int) -> Any:
    """Start a stream through the wire's SDK and read up to its first text; the SDK stream."""
    headers = traceparent(n)
    if wire == "anthropic":
        a = anthropic.AsyncAnthropic(base_url=gw.root, api_key="k", max_retries=0)
        messages = await a.messages.create(model=model, max_tokens=50, stream=True,
                                         extra_headers=headers,
                                         messages=[{"role": "user", "content": "hi"}])
        async for m in messages:
            if m.type == "content_block_delta":
                return messages
    c = openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0)
    if wire == "chat":
        chunks = await c.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], stream=True,
            extra_headers=headers)
        async for ch in chunks:
            if ch.choices and ch.choices[0].delta.content:
                return chunks
    events = await c.responses.create(model=model, input="hi", stream=True,
                                      extra_headers=headers)
    async for e in events:
        if e.type == "response.output_text.delta":
            return events
    raise AssertionError("the stream ended before its first text")


async def test_every_wire_counts_open_streams_and_notes_a_client_that_left(
    gw: RunningGateway, upstream: ThreeWires,
) -> None:
    n = 100
    for wire, model in CASES:
        n += 1
        upstream.hold, upstream.holding, upstream.hung_up = (asyncio.Event(), asyncio.Event(),
                                                              asyncio.Event())
        stream = await _open_stream(gw, wire, model, n)
        assert (await scrape(gw.root)).total("gateway_open_streams", model=model) == 1, wire
        await stream.close()  # the client hangs up mid-stream
        await asyncio.wait_for(upstream.hung_up.wait(), 10)  # ... and the upstream call ends
        attrs = dict((await span_of(gw, n)).attributes)
        assert attrs["gateway.client_disconnected"] is True, (wire, model)
        assert attrs["http.response.status_code"] == 499, (wire, model)
        assert attrs["gateway.wire"] == wire
        assert (await scrape(gw.root)).total("gateway_open_streams", model=model) == 0, wire
