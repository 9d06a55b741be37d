"""Hardening, fourth round: what changed lately. ``/v1/responses`` to an ``openai/`` model
whose server has no ``/responses`` (re-sent translated to chat), chat streams whose opening
role chunks are held, documents and files sent to chat-only models, and per-team features
(session ids, prompt cache keys) with odd values.

Every case goes through real sockets (the real ``openai`` / ``anthropic`` SDKs or raw HTTP)
to a real gateway, and checks what a user would see: a clear 4xx or a clean 5xx in the
client's wire format, a stream that ends within the deadline, a gateway that still serves,
and no key in the answers, logs, spans or inspector.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from gateway.server.app import STATE
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.faulty_upstream import (
    FaultyUpstream,
    Received,
    Writer,
    answer,
    head,
    ok_json,
    ok_stream,
)
from tests.server.test_hardening_heldout_2 import (
    CLIENT_KEY,
    MASTER_KEY,
    UPSTREAM_KEY,
    leaked,
)

DEADLINE = 3.0
AUTH = {"Authorization": f"Bearer {CLIENT_KEY}"}
HANG = 60.0


@pytest.fixture
async def up() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


async def coder(gateway_factory: GatewayFactory, up: FaultyUpstream, **extra: Any,
                ) -> RunningGateway:
    """A keyed gateway with ``coder``: an ``openai/`` model not declared to speak Responses."""
    return await gateway_factory({
        "model_list": [model_entry("coder", up.base_url, model="openai/qwen3-coder",
                                   api_key=UPSTREAM_KEY)],
        "general_settings": {"master_key": MASTER_KEY},
        "gateway": {"api_keys": [CLIENT_KEY], "ui": True, "capture_bodies": True,
                    "timeouts": {"read": 0.5}},
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002, "max_transient_retries": 0,
                     "deadline": DEADLINE},
        **extra,
    })


def oai(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=CLIENT_KEY, max_retries=0,
                              timeout=HANG)


async def post_raw(gw: RunningGateway, path: str, body: Any,
                   headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {**AUTH, "Content-Type": "application/json", **(headers or {})}
    async with (aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=HANG)) as s,
                s.post(gw.root + path, data=data, headers=sent) as r):
        return r.status, await r.read(), dict(r.headers)


# --- /v1/responses to a server without /responses: odd 404s, streams, state, races ---

ODD_404S = {
    "empty": (b"", "application/json"),
    "nginx_html": (b"<html><head><title>404 Not Found</title></head><body><center><h1>404 "
                   b"Not Found</h1></center><hr><center>nginx</center></body></html>",
                   "text/html"),
    "json_null": (b"null", "application/json"),
    "json_list": (b'[{"detail": "Not Found"}]', "application/json"),
    "error_string": (b'{"error": "Not Found"}', "application/json"),
    "error_odd_types": (b'{"error": {"message": 5, "code": [], "param": {}, "type": 1}}',
                        "application/json"),
    "not_utf8": (b"\xff\xfe\x00N\x00o\x00t", "text/plain"),
    "megabyte": (b"Not Found " * 100_000, "text/plain"),
    "quotes_the_key": (b'{"detail": "Not Found for key ' + UPSTREAM_KEY.encode() + b'"}',
                       "application/json"),
}


@pytest.mark.parametrize("missing", ODD_404S.values(), ids=ODD_404S.keys())
async def test_an_odd_404_at_responses_is_translated_or_a_clean_error(
    gateway_factory: GatewayFactory, up: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    missing: tuple[bytes, str],
) -> None:
    caplog.set_level(logging.DEBUG)
    body, kind = missing
    up.then(answer(404, body, {"Content-Type": kind}), ok_json())
    gw = await coder(gateway_factory, up)
    status, raw, headers = await post_raw(gw, "/v1/responses", {"model": "coder", "input": "hi"})
    if status == 200:
        assert json.loads(raw)["output"][0]["content"][0]["text"] == "fine"
    else:
        assert 400 <= status < 600 and status != 500, raw[:300]
        assert isinstance(json.loads(raw)["error"]["message"], str)
    seen = raw.decode("utf-8", "replace") + json.dumps(headers) + caplog.text
    assert not leaked(seen)
    assert "Traceback" not in caplog.text


async def test_a_streamed_first_request_to_a_server_without_responses_is_streamed_translated(
    gateway_factory: GatewayFactory, up: FaultyUpstream,
) -> None:
    up.then(answer(404, b'{"detail":"Not Found"}', {"Content-Type": "application/json"}),
            ok_stream("fi", "ne"))
    gw = await coder(gateway_factory, up)
    async with oai(gw) as api:
        events = [e async for e in await api.responses.create(
            model="coder", input="hi", stream=True)]
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "fine"
    assert [r.path for r in up.received] == ["/v1/responses", "/v1/chat/completions"]


async def test_a_continuation_after_a_restart_on_a_server_without_responses_is_served(
    gateway_factory: GatewayFactory, up: FaultyUpstream,
) -> None:
    """The gateway learns that a model's server has no /responses anew after a restart (the
    answers it kept stay): Codex's next turn, continuing a kept answer, is still served."""
    not_found = answer(404, b'{"detail":"Not Found"}', {"Content-Type": "application/json"})
    up.then(not_found, ok_json(), not_found, ok_json())
    gw = await coder(gateway_factory, up)
    async with oai(gw) as api:
        first = await api.responses.create(model="coder", input="hi")
        gw.app[STATE].no_responses_endpoint.clear()  # what a restart forgets
        second = await api.responses.create(model="coder", input="and then?",
                                            previous_response_id=first.id)
    assert second.output_text == "fine"
    sent = up.received[-1].json()["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]


async def test_conversation_to_a_server_without_responses_is_its_404_not_a_translation(
    gateway_factory: GatewayFactory, up: FaultyUpstream,
) -> None:
    not_found = answer(404, b'{"detail":"Not Found"}', {"Content-Type": "application/json"})
    up.then(not_found, not_found, ok_json())
    gw = await coder(gateway_factory, up)
    async with oai(gw) as api:
        with pytest.raises(openai.NotFoundError) as caught:
            await api.responses.create(model="coder", input="hi", conversation="conv_1")
        assert isinstance(caught.value.body, dict) and caught.value.body.get("message")
        # (a history held upstream cannot be translated: the model is not marked chat-only)
        assert (await api.responses.create(model="coder", input="hi")).output_text == "fine"
    assert [r.path for r in up.received] == ["/v1/responses", "/v1/responses",
                                             "/v1/chat/completions"]


async def test_concurrent_first_requests_to_a_server_without_responses_all_succeed(
    gateway_factory: GatewayFactory, up: FaultyUpstream, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gateway.server")
    gate = asyncio.Event()
    arrived = 0

    async def held_404(_: Received, w: Writer) -> None:
        nonlocal arrived
        arrived += 1
        if arrived == 6:
            gate.set()
        await gate.wait()  # every first request is at the upstream before any 404 comes
        body = b'{"detail":"Not Found"}'
        w.write(head(404, {"Content-Type": "application/json"}, length=len(body)) + body)
        await w.drain()

    up.then(*[held_404] * 6)
    gw = await coder(gateway_factory, up)
    async with oai(gw) as api:
        got = await asyncio.gather(*[api.responses.create(model="coder", input=f"q{i}")
                                     for i in range(6)])
    assert [g.output_text for g in got] == ["fine"] * 6
    warned = [r for r in caplog.records if "/responses endpoint" in r.getMessage()]
    assert len(warned) == 1
