"""Cache accounting (issue 26): the providers' prompt-cache usage (OpenAI ``cached_tokens``,
Anthropic ``cache_read_input_tokens`` / ``cache_creation_input_tokens``), whole and streamed,
as ``/metrics`` counters a hit ratio per model is read from, span attributes, the access log
and the inspector's per-request hit ratio."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import anthropic
import openai

from gateway.telemetry.usage import StreamUsage, usage_of
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.native_base import Canned
from tests.fakes.responses_server import FakeResponses
from tests.fakes.three_wires import anthropic_events, anthropic_whole, responses_whole
from tests.telemetry.promtext import scrape

KEY = "cache-client-key-0123"
SSE = {"content-type": "text/event-stream"}


def test_usage_reads_every_providers_cache_fields() -> None:
    chat = usage_of({"prompt_tokens": 1000, "completion_tokens": 5,
                     "prompt_tokens_details": {"cached_tokens": 896}})
    assert chat is not None and (chat.prompt_tokens, chat.cache_read) == (1000, 896)
    responses = usage_of({"input_tokens": 1000, "output_tokens": 5,
                          "input_tokens_details": {"cached_tokens": 512}})
    assert responses is not None and (responses.prompt_tokens, responses.cache_read) == (1000, 512)
    claude = usage_of({"input_tokens": 100, "output_tokens": 5, "cache_read_input_tokens": 800,
                       "cache_creation_input_tokens": 100})
    assert claude is not None  # Anthropic counts cached tokens apart from input_tokens
    assert (claude.prompt_tokens, claude.cache_read, claude.cache_write) == (1000, 800, 100)


def test_a_chat_stream_reports_cached_tokens_in_its_last_chunk() -> None:
    scan = StreamUsage()
    usage = {"prompt_tokens": 2048, "completion_tokens": 3, "total_tokens": 2051,
             "prompt_tokens_details": {"cached_tokens": 1920}}
    scan.feed(b'data: {"choices":[{"delta":{"content":"hi"}}],"usage":null}\n\n')
    scan.feed(b'data: {"choices":[],"usage":' + json.dumps(usage).encode() + b"}\n\n")
    assert (scan.usage.prompt_tokens, scan.usage.cache_read) == (2048, 1920)


def _anthropic(read: int, write: int) -> dict[str, Any]:
    return {**anthropic_whole("claude-sonnet-4-5"),
            "usage": {"input_tokens": 100, "output_tokens": 3, "cache_read_input_tokens": read,
                      "cache_creation_input_tokens": write}}


def _anthropic_stream(read: int, write: int) -> bytes:
    events = anthropic_events("claude-sonnet-4-5")
    start = json.loads(events[0].split(b"data: ", 1)[1])
    start["message"]["usage"] = {"input_tokens": 100, "output_tokens": 1,
                                 "cache_read_input_tokens": read,
                                 "cache_creation_input_tokens": write}
    return b"event: message_start\ndata: " + json.dumps(start).encode() + b"\n\n" + b"".join(
        events[1:])


async def _span(gw: RunningGateway, n: int) -> dict[str, Any]:
    for _ in range(500):
        spans = [s for s in gw.spans.get_finished_spans() if s.name == "gateway.chat"]
        if len(spans) >= n:
            return dict(spans[n - 1].attributes or {})
        await asyncio.sleep(0.01)
    raise AssertionError("no request span")


async def test_anthropic_cache_reads_and_writes_whole_and_streamed(
    gateway_factory: GatewayFactory,
) -> None:
    async with FakeAnthropic() as fake:
        fake.script(Canned(200, _anthropic(0, 900)),  # the first turn writes the cache
                    Canned(200, _anthropic_stream(900, 0), SSE))  # the next one reads it
        gw = await gateway_factory({
            "model_list": [{"model_name": "claude", "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5", "api_base": fake.base_url,
                "api_key": "k"}}],
            "gateway": {"ui": True, "api_keys": [KEY]}})
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEY,
                                            max_retries=0) as a:
            ask = [{"role": "user", "content": "hi"}]
            await a.messages.create(model="claude", max_tokens=20, messages=ask,  # type: ignore[arg-type]
                                    extra_headers={"x-session-id": "cached"})
            events = await a.messages.create(model="claude", max_tokens=20, stream=True,
                                             messages=ask,  # type: ignore[arg-type]
                                             extra_headers={"x-session-id": "cached"})
            async for _ in events:
                pass
        metrics = await scrape(gw.root)
        tokens = {kind: metrics.total("gateway_prompt_cache_tokens_total", model="claude",
                                      kind=kind) for kind in ("prompt", "read", "write")}
        assert tokens == {"prompt": 2000, "read": 900, "write": 900}  # hit ratio 45%
        first, second = await _span(gw, 1), await _span(gw, 2)
        assert first["gen_ai.usage.cache_creation.input_tokens"] == 900
        assert second["gen_ai.usage.cache_read.input_tokens"] == 900
        async with aiohttp.ClientSession() as s, s.get(
                f"{gw.root}/ui/api/requests?session=cached",
                headers={"Authorization": f"Bearer {KEY}"}) as r:
            rows = (await r.json())["requests"]
        assert [row["cache_hit_ratio"] for row in rows] == [0.9, 0.0]  # newest first


async def test_responses_cached_tokens(gateway_factory: GatewayFactory) -> None:
    answer = responses_whole("gpt-5")
    answer["usage"] = {**answer["usage"], "input_tokens": 4000,
                       "input_tokens_details": {"cached_tokens": 3072}}
    async with FakeResponses() as fake:
        fake.script(Canned(200, answer))
        gw = await gateway_factory({"model_list": [{"model_name": "resp", "litellm_params": {
            "model": "openai/gpt-5", "api_base": f"{fake.base_url}/v1", "api_key": "k"},
            "model_info": {"responses_api": True}}]})
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
            await c.responses.create(model="resp", input="hi")
        metrics = await scrape(gw.root)
    assert metrics.total("gateway_prompt_cache_tokens_total", model="resp", kind="read") == 3072
    assert metrics.total("gateway_prompt_cache_tokens_total", model="resp",
                         kind="prompt") == 4000
