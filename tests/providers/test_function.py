"""FunctionProvider: an in-process upstream that answers like a provider does."""

from __future__ import annotations

import asyncio
import time

import orjson
import pytest

from gateway.providers.base import UpstreamCall, UpstreamError
from gateway.providers.function import Answer, FunctionProvider, completion, refusal


async def read(provider: FunctionProvider, call: UpstreamCall) -> bytes:
    response = await provider.send(call)
    try:
        return b"".join([chunk async for chunk in response.chunks()])
    finally:
        await response.aclose()


async def test_sync_and_async_handlers_answer_and_every_call_is_kept() -> None:
    async def slow(call: UpstreamCall) -> Answer:
        await asyncio.sleep(0)
        return completion("async")

    for handler, text in ((lambda call: completion("sync"), "sync"), (slow, "async")):
        provider = FunctionProvider(handler)
        call = UpstreamCall(body={"model": "m", "messages": []}, stream=False)
        body = orjson.loads(await read(provider, call))
        assert body["choices"][0]["message"]["content"] == text
        assert provider.calls == [call]


async def test_a_refusal_is_raised_as_the_providers_failure() -> None:
    provider = FunctionProvider(lambda call: refusal(429, "slow down", type="rate_limit_error",
                                                     retry_after=2.0))
    with pytest.raises(UpstreamError) as info:
        await provider.send(UpstreamCall(body={}, stream=False))
    failure = info.value.failure
    assert (failure.status, failure.retry_after, failure.type) == (429, 2.0, "rate_limit_error")
    assert orjson.loads(failure.body)["error"]["message"] == "slow down"


async def test_a_stream_is_one_chunk_then_done() -> None:
    provider = FunctionProvider(lambda call: completion("hi"))
    raw = await read(provider, UpstreamCall(body={}, stream=True))
    first, done = raw.split(b"\n\n")[:2]
    assert orjson.loads(first.removeprefix(b"data: "))["choices"][0]["delta"]["content"] == "hi"
    assert done == b"data: [DONE]"


async def test_a_handler_past_the_deadline_is_a_504_naming_the_model() -> None:
    never = asyncio.Event()

    async def stuck(call: UpstreamCall) -> Answer:
        await never.wait()
        return completion("late")

    provider = FunctionProvider(stuck, name="m")
    with pytest.raises(UpstreamError) as info:
        await provider.send(UpstreamCall(body={}, stream=False, deadline=time.monotonic()))
    assert info.value.failure.status == 504 and "'m'" in info.value.failure.message
