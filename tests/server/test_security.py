"""Client auth, and secrets that must never cross the gateway."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import user

CLIENT_KEY = "client-key-alpha-123456"
OTHER_KEY = "client-key-beta-654321"
UPSTREAM_KEY = "sk-upstream-very-secret-0a1b2c3d"


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", require_auth=UPSTREAM_KEY) as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await gateway_factory({
        "model_list": [model_entry("demo", referee.base_url, api_key=UPSTREAM_KEY)],
        "gateway": {"api_keys": [CLIENT_KEY, OTHER_KEY], "log_level": "debug"},
        "recovery": {"max_transient_retries": 0},
    })


async def test_requests_without_a_valid_key_get_401(gw: RunningGateway) -> None:
    for key in ("wrong-key", CLIENT_KEY[:-1], ""):
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=key or "x",
                                      max_retries=0) as c:
            with pytest.raises(openai.AuthenticationError) as info:
                await c.chat.completions.create(model="demo", messages=[user("hi")])
        assert info.value.status_code == 401
        assert info.value.code == "invalid_api_key"
    async with aiohttp.ClientSession() as s:
        async with s.get(gw.base_url + "/models") as r:  # no Authorization header at all
            assert r.status == 401
            assert (await r.json())["error"]["type"] == "authentication_error"
        async with s.get(gw.root + "/healthz") as r:  # health needs no key
            assert r.status == 200


async def test_both_configured_keys_work(gw: RunningGateway) -> None:
    for key in (CLIENT_KEY, OTHER_KEY):
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0) as c:
            out = await c.chat.completions.create(model="demo", messages=[user("hi")])
        assert out.choices[0].message.content


async def test_client_key_never_reaches_upstream_and_upstream_key_is_used(
    gw: RunningGateway, referee: Referee
) -> None:
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=CLIENT_KEY,
                                  max_retries=0) as c:
        await c.chat.completions.create(model="demo", messages=[user("hi")],
                                        extra_headers={"X-Custom": CLIENT_KEY})
    recorded = referee.requests[-1]
    assert recorded.status == 200  # the referee demanded the upstream key and got it
    everything = repr(recorded.headers) + recorded.body.decode()
    assert CLIENT_KEY not in everything


async def test_upstream_key_never_in_logs_responses_or_spans(
    gw: RunningGateway, referee: Referee, caplog: pytest.LogCaptureFixture
) -> None:
    # A provider that echoes the key it was given in its error body.
    referee.script(401, {"error": {"message": f"Incorrect API key provided: {UPSTREAM_KEY}",
                                   "type": "invalid_request_error", "param": None,
                                   "code": "invalid_api_key"}})
    caplog.set_level(logging.DEBUG)
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=CLIENT_KEY,
                                  max_retries=0) as c:
        with pytest.raises(openai.AuthenticationError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
        ok = await c.chat.completions.with_raw_response.create(
            model="demo", messages=[user("hi")])
    err_text = info.value.response.text + repr(dict(info.value.response.headers))
    assert "Incorrect API key provided" in err_text
    assert UPSTREAM_KEY not in err_text
    assert UPSTREAM_KEY not in ok.text + repr(dict(ok.headers))
    for record in caplog.records:
        assert UPSTREAM_KEY not in record.getMessage()
        assert CLIENT_KEY not in record.getMessage()
    for span in gw.spans.get_finished_spans():
        assert UPSTREAM_KEY not in repr(dict(span.attributes or {}))
        for event in span.events:
            assert UPSTREAM_KEY not in repr(dict(event.attributes or {}))


async def test_auth_covers_every_route_but_health_and_metrics(gw: RunningGateway) -> None:
    body = {"model": "demo", "messages": [user("hi")]}
    async with aiohttp.ClientSession() as s:
        for path in ("/chat/completions", "/models", "/v1/gateway/project",
                     "/v1/gateway/sessions/x/archive"):
            method = s.get if path.endswith(("models", "archive")) else s.post
            async with method(gw.root + path, json=body) as r:
                assert r.status == 401, path
        async with s.get(gw.root + "/metrics") as r:
            assert r.status == 200


async def test_alternative_key_headers_and_paths_without_v1(gw: RunningGateway) -> None:
    body = {"model": "demo", "messages": [user("hi")]}
    async with aiohttp.ClientSession() as s:
        for headers in ({"x-api-key": CLIENT_KEY}, {"api-key": OTHER_KEY}):
            async with s.post(gw.root + "/chat/completions", json=body, headers=headers) as r:
                assert r.status == 200, await r.text()
    async with openai.AsyncOpenAI(base_url=gw.root, api_key=CLIENT_KEY, max_retries=0) as c:
        out = await c.chat.completions.create(model="demo", messages=[user("hi")])
    assert out.choices[0].message.content
