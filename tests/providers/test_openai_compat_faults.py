"""Upstreams that misbehave at the HTTP level: every fault is a clean 5xx in the OpenAI
envelope (retried as transient within the deadline), or an SSE ``error`` event once the
stream has started. Nothing is followed, buffered without bound, or waited on forever."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway, free_port, model_entry
from tests.factories import user
from tests.fakes.faulty_upstream import (
    FaultyUpstream,
    answer,
    chunk_event,
    flood,
    gzip_bomb,
    head,
    ok_json,
    ok_stream,
    stream,
    trickle,
)
from tests.http import post_json

FAST = {"backoff_base": 0.01, "backoff_cap": 0.02, "deadline": 20.0}
JSON = {"Content-Type": "application/json"}
SSE = {"Content-Type": "text/event-stream"}
COMPLETION_BYTES = json.dumps({"id": "x", "object": "chat.completion", "created": 0,
                               "model": "m", "choices": []}).encode()


@pytest.fixture
async def up() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


async def gateway(factory: GatewayFactory, up: FaultyUpstream, *, retries: int = 1,
                  deadline: float = 20.0, read: float = 60.0,
                  limits: dict[str, int] | None = None) -> RunningGateway:
    config: dict[str, Any] = {
        "model_list": [model_entry("m", up.base_url)],
        "recovery": {**FAST, "max_transient_retries": retries, "deadline": deadline},
        "gateway": {"timeouts": {"connect": 5, "read": read}},
    }
    if limits:
        config["gateway"]["upstream_limits"] = limits
    return await factory(config)


def sdk(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0, timeout=30)


async def ask(gw: RunningGateway, *, stream: bool = False) -> tuple[int, Any, Any]:
    """Send one chat turn to the gateway; (status, headers, JSON body or None)."""
    payload = {"model": "m", "messages": [user("hi")], "stream": stream}
    return await post_json(gw.base_url + "/chat/completions", payload, timeout=30)


def assert_bad_gateway(status: int, body: Any, *, up: FaultyUpstream) -> None:
    assert status == 502, body
    err = body["error"]
    assert set(err) >= {"message", "type", "param", "code"}
    assert "'m'" in err["message"], err["message"]
    text = json.dumps(body)
    assert f":{up.port}" not in text and "127.0.0.1" not in text


BAD_ANSWERS = {
    "truncated_json": answer(200, b'{"id": "x", "object": "chat.compl', JSON),
    "truncated_body": answer(200, COMPLETION_BYTES[:20], JSON, length=len(COMPLETION_BYTES)),
    "html": answer(200, b"<html><body>502 Bad Gateway (nginx)</body></html>",
                   {"Content-Type": "text/html"}),
    "error_body": answer(200, b'{"error": {"message": "internal error", "type": "server_error"}}',
                         JSON),
    "no_content_204": answer(204),
    "not_modified_304": answer(304),
    "moved_without_location": answer(301, b"", JSON),
    "status_999": answer(999, COMPLETION_BYTES, JSON),
    "sse_to_non_stream": ok_stream("hello"),
    "not_an_object": answer(200, b"[1, 2, 3]", JSON),
}


@pytest.mark.parametrize("fault", sorted(BAD_ANSWERS))
async def test_bad_answer_is_retried_as_transient(
    gateway_factory: GatewayFactory, up: FaultyUpstream, fault: str
) -> None:
    up.then(BAD_ANSWERS[fault], ok_json())
    gw = await gateway(gateway_factory, up, retries=1)
    async with sdk(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="m",
                                                               messages=[user("hi")])
    assert raw.parse().choices[0].message.content == "fine"
    assert raw.headers["x-gateway-attempts"] == "2"
    assert len(up.received) == 2


@pytest.mark.parametrize("fault", sorted(BAD_ANSWERS))
async def test_bad_answer_gives_502_envelope_naming_the_model(
    gateway_factory: GatewayFactory, up: FaultyUpstream, fault: str
) -> None:
    up.then(BAD_ANSWERS[fault])
    gw = await gateway(gateway_factory, up, retries=0)
    status, _, body = await ask(gw)
    assert_bad_gateway(status, body, up=up)


STREAM_BAD_STARTS = {
    "html": answer(200, b"<html>oops</html>", {"Content-Type": "text/html"}),
    "ends_mid_first_event": stream(b'data: {"id": "c1", "object": "chat.compl'),
    "status_999": answer(999, chunk_event("x"), SSE),
    "no_content_204": answer(204),
    "truncated_json": answer(200, b'{"id": "x", "obj', JSON),
}


@pytest.mark.parametrize("fault", sorted(STREAM_BAD_STARTS))
async def test_stream_that_fails_before_its_first_event_is_retried(
    gateway_factory: GatewayFactory, up: FaultyUpstream, fault: str
) -> None:
    up.then(STREAM_BAD_STARTS[fault], ok_stream("a", "b"))
    gw = await gateway(gateway_factory, up, retries=1)
    async with sdk(gw) as c:
        got = await c.chat.completions.create(model="m", messages=[user("hi")], stream=True)
        text = "".join([ch.choices[0].delta.content or "" async for ch in got])
    assert text == "ab"
    assert len(up.received) == 2


@pytest.mark.parametrize("tail", [b'data: {"id": "c1", "obj', b""], ids=["mid_event", "no_done"])
async def test_stream_that_ends_early_ends_with_an_error_event(
    gateway_factory: GatewayFactory, up: FaultyUpstream, tail: bytes
) -> None:
    up.then(stream(chunk_event("a"), chunk_event("b"), tail))
    gw = await gateway(gateway_factory, up, retries=0)
    seen: list[str] = []
    async with sdk(gw) as c:
        got = await c.chat.completions.create(model="m", messages=[user("hi")], stream=True)
        with pytest.raises(openai.APIError) as info:
            async for ch in got:
                seen.append(ch.choices[0].delta.content or "")
    assert seen == ["a", "b"]
    assert "ended" in info.value.message and "'m'" in info.value.message


# --- trickling upstreams: the deadline bounds everything before the first byte ------------

TRICKLES = {
    "body_byte_by_byte": (head(200, JSON, length=10_000), b" ", False),
    "header_line_by_line": (b"HTTP/1.1 200 OK\r\n", b"X-Slow: 1\r\n", False),
    "sse_comments_only": (head(200, SSE), b": keep-alive\n\n", True),
    "first_event_never_ends": (head(200, SSE) + b'data: {"id": "c1"', b" ", True),
}


@pytest.mark.parametrize("case", sorted(TRICKLES))
async def test_trickling_upstream_times_out_at_the_deadline(
    gateway_factory: GatewayFactory, up: FaultyUpstream, case: str
) -> None:
    prefix, drip, is_stream = TRICKLES[case]
    done = asyncio.Event()
    up.then(trickle(prefix, drip, done), trickle(prefix, drip, done))
    gw = await gateway(gateway_factory, up, retries=3, deadline=1.0)
    try:
        status, _, body = await ask(gw, stream=is_stream)
    finally:
        done.set()
    assert status == 504, body
    assert "'m'" in body["error"]["message"] and "timed out" in body["error"]["message"]
    assert set(body["error"]) == {"message", "type", "param", "code"}


async def test_idle_stream_after_the_first_event_ends_with_an_error_event(
    gateway_factory: GatewayFactory, up: FaultyUpstream
) -> None:
    done = asyncio.Event()
    up.then(trickle(head(200, SSE) + chunk_event("a"), b": still here\n\n", done))
    gw = await gateway(gateway_factory, up, retries=0, deadline=30.0, read=0.5)
    seen: list[str] = []
    try:
        # (The bound only keeps a gateway that never ends the stream from hanging the suite.)
        async with asyncio.timeout(20), sdk(gw) as c:
            got = await c.chat.completions.create(model="m", messages=[user("hi")],
                                                  stream=True)
            with pytest.raises(openai.APIError) as info:
                async for ch in got:
                    seen.append(ch.choices[0].delta.content or "")
    finally:
        done.set()
    assert seen == ["a"]
    assert "no event" in info.value.message


async def test_comment_flood_keeps_the_gateway_responsive(
    gateway_factory: GatewayFactory, up: FaultyUpstream
) -> None:
    done = asyncio.Event()
    up.then(flood(head(200, SSE), b": " + b"x" * 1000 + b"\n\n", done))
    gw = await gateway(gateway_factory, up, retries=0, deadline=30.0)
    chat = asyncio.create_task(ask(gw, stream=True))
    try:
        while not up.received:  # the flood has started once the upstream got the request
            await asyncio.sleep(0.01)
        async with aiohttp.ClientSession() as s:
            for _ in range(5):
                async with s.get(gw.root + "/healthz",
                                 timeout=aiohttp.ClientTimeout(total=10)) as r:
                    assert r.status == 200
        assert not chat.done()  # healthz was answered while the flood went on
    finally:
        done.set()
    status, _, _ = await chat
    assert status in (502, 504)


async def test_unterminated_event_is_capped(
    gateway_factory: GatewayFactory, up: FaultyUpstream
) -> None:
    done = asyncio.Event()
    up.then(flood(head(200, SSE), b": " + b"x" * 1000 + b"\n", done))
    gw = await gateway(gateway_factory, up, retries=0, limits={"max_event_bytes": 64 * 1024})
    try:
        status, _, body = await ask(gw, stream=True)
    finally:
        done.set()
    assert_bad_gateway(status, body, up=up)
    assert "exceeds" in body["error"]["message"]


# --- size caps ----------------------------------------------------------------------------

async def test_decompression_bomb_is_capped(
    gateway_factory: GatewayFactory, up: FaultyUpstream
) -> None:
    up.then(gzip_bomb(64 * 1024 * 1024))
    gw = await gateway(gateway_factory, up, retries=0,
                       limits={"max_body_bytes": 1024 * 1024})
    status, _, body = await ask(gw)
    assert_bad_gateway(status, body, up=up)
    assert "exceeds" in body["error"]["message"]


async def test_huge_error_page_is_not_read_to_the_end(
    gateway_factory: GatewayFactory, up: FaultyUpstream
) -> None:
    page = b"<html>" + b"x" * (64 * 1024 * 1024) + b"</html>"
    up.then(answer(500, page, {"Content-Type": "text/html"}))
    gw = await gateway(gateway_factory, up, retries=0, limits={"max_error_bytes": 64 * 1024})
    status, _, body = await ask(gw)
    assert status == 500
    assert set(body["error"]) >= {"message", "type", "param", "code"}
    # The gateway hung up after its cap instead of reading 64 MiB.
    await asyncio.wait_for(up.disconnected.wait(), 10)


async def test_huge_answer_with_content_length_is_refused_before_reading(
    gateway_factory: GatewayFactory, up: FaultyUpstream
) -> None:
    up.then(answer(200, b"{" + b" " * (8 * 1024 * 1024) + b"}", JSON))
    gw = await gateway(gateway_factory, up, retries=0,
                       limits={"max_body_bytes": 1024 * 1024})
    status, _, body = await ask(gw)
    assert_bad_gateway(status, body, up=up)
    assert "exceeds" in body["error"]["message"]


# --- redirects and internal addresses ----------------------------------------------------

@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_redirects_are_not_followed(
    gateway_factory: GatewayFactory, up: FaultyUpstream, status: int
) -> None:
    async with FaultyUpstream() as elsewhere:
        up.then(answer(status, b"", {"Location": elsewhere.base_url + "/chat/completions"}))
        gw = await gateway(gateway_factory, up, retries=0)
        code, _, body = await ask(gw)
        assert elsewhere.received == []  # the conversation never went to another host
    assert len(up.received) == 1 and up.received[0].method == "POST"
    assert_bad_gateway(code, body, up=up)
    assert "redirect" in body["error"]["message"]


async def test_unreachable_upstream_error_names_the_model_not_the_address(
    gateway_factory: GatewayFactory,
) -> None:
    port = free_port()
    gw = await gateway_factory({
        "model_list": [model_entry("m", f"http://127.0.0.1:{port}/v1")],
        "recovery": {**FAST, "max_transient_retries": 0},
    })
    status, _, body = await ask(gw)
    assert status == 502
    message = body["error"]["message"]
    assert "'m'" in message
    assert str(port) not in json.dumps(body) and "127.0.0.1" not in json.dumps(body)
    spans = [s for s in gw.spans.get_finished_spans() if s.name == "gateway.attempt"]
    assert spans and all(str(port) not in (s.status.description or "") for s in spans)


async def test_a_late_retry_does_not_outlive_the_request_deadline(
    gateway_factory: GatewayFactory, up: FaultyUpstream
) -> None:
    # A slow refusal uses most of the deadline; the retry that follows may only use what is
    # left of it, not a whole deadline of its own.
    done = asyncio.Event()
    refusal = answer(503, b'{"error": {"message": "overloaded", "type": "server_error"}}', JSON)

    async def slow_refusal(received: Any, w: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.6)
        await refusal(received, w)

    up.then(slow_refusal, trickle(b"HTTP/1.1 200 OK\r\n", b"X-Slow: 1\r\n", done))
    gw = await gateway(gateway_factory, up, retries=3, deadline=1.0)
    try:
        status, _, body = await ask(gw)  # answered while the retry's upstream still trickles
    finally:
        done.set()
    assert status == 504, body
    assert len(up.received) == 2  # the retry was sent, and cut off at the deadline
    granted = re.search(r"no answer within ([0-9.]+)s", body["error"]["message"])
    assert granted is not None, body
    assert float(granted.group(1)) < 1.0  # what was left of the deadline, not a new one
