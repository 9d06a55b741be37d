"""A chat stream's opening chunks (only ``"role": "assistant"``, Azure's filter chunk with no
choices) are held until the first output: a failure right after them is retried and the
client sees one stream, the attempt that answered. A model slow to start is not failed for
it: just before the first byte's deadline the held chunks go out and the stream goes on.
Real sockets, the real ``openai`` SDK, a fault-scripted upstream; LiteLLM's own streams
(an OpenAI-compatible upstream through ``litellm.acompletion``) hold the same way."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from gateway.providers.base import UpstreamCall, UpstreamError
from gateway.providers.litellm_adapter import LiteLLMProvider
from gateway.providers.sse import is_chat_opening
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import user
from tests.fakes.faulty_upstream import FaultyUpstream, chunk_event, head, ok_stream, stream


def role_event(**delta: Any) -> bytes:
    data = {"id": "c0", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": "", **delta},
                         "finish_reason": None}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


AZURE_FILTER = (b'data: {"id":"","object":"","created":0,"model":"","choices":[],'
                b'"prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}\n\n')
OVERLOADED = b'data: {"error": {"message": "Overloaded", "type": "overloaded_error"}}\n\n'

# What follows the opening chunks on the first attempt: each is retried.
AFTER_OPENING = {
    "error_event": (role_event(), OVERLOADED),
    "hang_up": (role_event(),),
    "done_without_answer": (role_event(), b"data: [DONE]\n\n"),
    "azure_filter_then_error": (AZURE_FILTER, role_event(), OVERLOADED),
    "keep_alive_comment_then_error": (role_event(), b": keep-alive\n\n", OVERLOADED),
}


@pytest.fixture
async def up() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


async def gateway(factory: GatewayFactory, up: FaultyUpstream, *, retries: int = 1,
                  deadline: float = 20.0) -> RunningGateway:
    return await factory({
        "model_list": [model_entry("m", up.base_url)],
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.02,
                     "max_transient_retries": retries, "deadline": deadline},
    })


def sdk(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0, timeout=30)


@pytest.mark.parametrize("case", sorted(AFTER_OPENING))
async def test_a_failure_right_after_the_role_chunk_is_retried(
        gateway_factory: GatewayFactory, up: FaultyUpstream, case: str) -> None:
    up.then(stream(*AFTER_OPENING[case]), ok_stream("a", "b"))
    gw = await gateway(gateway_factory, up)
    async with sdk(gw) as client:
        got = await client.chat.completions.create(model="m", messages=[user("hi")],
                                                   stream=True)
        chunks = [chunk async for chunk in got]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "ab"
    assert len(up.received) == 2
    assert got.response.headers["x-gateway-recovery"] == "retry"


async def test_the_held_role_chunk_reaches_the_client_with_the_answer(
        gateway_factory: GatewayFactory, up: FaultyUpstream) -> None:
    up.then(stream(role_event(), chunk_event("hello"), b"data: [DONE]\n\n"))
    gw = await gateway(gateway_factory, up, retries=0)
    async with sdk(gw) as client:
        got = await client.chat.completions.create(model="m", messages=[user("hi")],
                                                   stream=True)
        chunks = [chunk async for chunk in got]
    assert [c.choices[0].delta.role for c in chunks] == ["assistant", None]
    assert [c.choices[0].delta.content for c in chunks] == ["", "hello"]
    assert len(up.received) == 1


async def test_a_failure_after_the_first_text_is_not_retried(
        gateway_factory: GatewayFactory, up: FaultyUpstream) -> None:
    up.then(stream(role_event(), chunk_event("half"), OVERLOADED), ok_stream("again"))
    gw = await gateway(gateway_factory, up)
    seen: list[str] = []
    async with sdk(gw) as client:
        got = await client.chat.completions.create(model="m", messages=[user("hi")],
                                                   stream=True)
        with pytest.raises(openai.APIError) as info:
            async for chunk in got:
                seen.append(chunk.choices[0].delta.content or "")
    assert seen == ["", "half"]
    assert "Overloaded" in info.value.message
    assert len(up.received) == 1


async def test_a_model_slow_to_start_is_relayed_when_the_first_byte_deadline_nears(
        gateway_factory: GatewayFactory, up: FaultyUpstream) -> None:
    # The upstream sends its role chunk at once, then nothing until the client has it: the
    # gateway must let the held chunk go before the 2 s deadline rather than fail the request.
    release = asyncio.Event()
    up.then(stream(role_event(), hold=release))
    gw = await gateway(gateway_factory, up, retries=0, deadline=2.0)
    async with sdk(gw) as client:
        got = await client.chat.completions.create(model="m", messages=[user("hi")],
                                                   stream=True)
        chunks = got.__aiter__()
        first = await anext(chunks)
        assert first.choices[0].delta.role == "assistant"
        # The upstream's answer follows on the same connection once the client has the role.
        writer = next(iter(up.writers))
        writer.write(chunk_event("thought it over") + b"data: [DONE]\n\n")
        await writer.drain()
        rest = [chunk async for chunk in chunks]
    release.set()
    assert [c.choices[0].delta.content for c in rest] == ["thought it over"]
    assert len(up.received) == 1


@pytest.mark.parametrize(("chunk", "opening"), [
    ({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}, True),
    ({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "",
                                         "tool_calls": [], "refusal": None}}]}, True),
    ({"choices": [], "prompt_filter_results": []}, True),
    ({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]}, False),
    ({"choices": [{"index": 0, "delta": {"reasoning_content": "hm"}}]}, False),
    ({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c"}]}}]}, False),
    ({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}, False),
    ({"choices": [], "usage": {"prompt_tokens": 3}}, False),
    ({"type": "message_start", "choices": []}, False),
    ({"error": {"message": "x"}, "choices": []}, False),
    ({"choices": [{"index": 0, "delta": "role"}]}, False),
    ([1, 2], False),
])
def test_which_chat_chunks_only_open_the_answer(chunk: Any, opening: bool) -> None:
    assert is_chat_opening(chunk) is opening


async def test_litellm_streams_hold_the_role_chunk_too(up: FaultyUpstream) -> None:
    provider = LiteLLMProvider("m", {"model": "openai/m", "api_base": up.base_url,
                                     "api_key": "sk-upstream"})
    up.then(stream(role_event(), OVERLOADED))
    call = UpstreamCall(body={"model": "m", "messages": [user("hi")]}, stream=True,
                        deadline=time.monotonic() + 20)
    with pytest.raises(UpstreamError) as info:
        await provider.send(call)
    assert info.value.failure.status >= 500
    finish = (b'data: {"id": "c1", "object": "chat.completion.chunk", "created": 0, '
              b'"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}'
              b'\n\n')
    up.then(stream(role_event(), chunk_event("fine"), finish, b"data: [DONE]\n\n"))
    answer = await provider.send(UpstreamCall(body={"model": "m", "messages": [user("hi")]},
                                              stream=True, deadline=time.monotonic() + 20))
    events = [event async for event in answer.chunks()]
    await answer.aclose()
    texts = [json.loads(e[6:])["choices"][0]["delta"].get("content")
             for e in events if e.startswith(b"data: {")]
    assert texts[:2] == ["", "fine"] and events[-1] == b"data: [DONE]\n\n"


@pytest.mark.parametrize("first", [False, True], ids=["last_chunk", "first_chunk"])
async def test_a_chunk_with_null_choices_is_read_as_no_choices(
        gateway_factory: GatewayFactory, up: FaultyUpstream, first: bool) -> None:
    # MiniMax and some proxies send the usage chunk (or an opening one) with choices null.
    null = (b'data: {"id": "c9", "object": "chat.completion.chunk", "created": 0, '
            b'"model": "m", "choices": null, "usage": {"prompt_tokens": 3, '
            b'"completion_tokens": 1, "total_tokens": 4}}\n\n')
    stop = (b'data: {"id": "c1", "object": "chat.completion.chunk", "created": 0, '
            b'"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}'
            b'\n\n')
    parts = [role_event(), chunk_event("Hi"), stop, null, b"data: [DONE]\n\n"]
    if first:
        parts.insert(0, null.replace(b'"usage": {"prompt_tokens": 3, "completion_tokens": 1, '
                                     b'"total_tokens": 4}', b'"usage": null'))
    up.then(stream(*parts))
    gw = await gateway(gateway_factory, up, retries=0)
    async with sdk(gw) as client:
        got = await client.chat.completions.create(model="m", messages=[user("hi")],
                                                   stream=True)
        chunks = [chunk async for chunk in got]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hi"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 4


async def test_a_slow_head_does_not_push_the_held_chunks_past_the_deadline(
        gateway_factory: GatewayFactory, up: FaultyUpstream) -> None:
    # The first byte's deadline runs from the request: an upstream slow to answer at all
    # (its head comes after a second) and then silent after its role chunk still gets the
    # role chunk relayed before the 3 s deadline, not a 504.
    release = asyncio.Event()

    async def slow_head(_: Any, w: asyncio.StreamWriter) -> None:
        await asyncio.sleep(1.0)  # (a slow upstream, not a wait for the test)
        w.write(head(200, {"Content-Type": "text/event-stream"}) + role_event())
        await w.drain()
        await release.wait()

    up.then(slow_head)
    gw = await gateway(gateway_factory, up, retries=0, deadline=3.0)
    try:
        async with sdk(gw) as client:
            got = await client.chat.completions.create(model="m", messages=[user("hi")],
                                                       stream=True)
            first = await anext(got.__aiter__())
            assert first.choices[0].delta.role == "assistant"
    finally:
        release.set()
