"""The edge (gateway/server/edge.py): the one middleware every request passes. Whatever ends a
request (an answer, a refusal of the HTTP layer, a crash inside a route, a CORS preflight),
the client gets the wire's envelope with a request id, and the access log, the metrics and the
in-flight gauge record that same request."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.referee import Referee
from gateway.server import routes
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import user
from tests.telemetry.promtext import scrape


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai") as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await gateway_factory({
        "model_list": [model_entry("m", referee.base_url)],
        "gateway": {"max_body_bytes": 64 * 1024, "cors_origins": ["https://app.example"]},
    })


async def _access_line(caplog: pytest.LogCaptureFixture, request_id: str) -> str:
    for _ in range(500):  # (written right after the answer is on its way)
        lines = [r.getMessage() for r in caplog.records
                 if r.name == "gateway.access" and request_id in r.getMessage()]
        if lines:
            [line] = lines
            return line
        await asyncio.sleep(0.01)
    raise AssertionError(f"no access line for {request_id}")


CHAT = {"model": "m", "messages": [user("hi")]}
ENDINGS = [
    # method, path, body, status, envelope ("openai" | "anthropic"), words in the message
    ("POST", "/v1/chat/completions", CHAT, 200, None, ""),
    ("GET", "/v1/no-such-thing", None, 404, "openai", "no route for GET /v1/no-such-thing"),
    ("GET", "/v1/chat/completions", None, 405, "openai", "method GET is not allowed"),
    ("POST", "/v1/chat/completions", {"model": "m", "messages": [user("x" * 70_000)]}, 413,
     "openai", "larger than the gateway's limit"),
    ("POST", "/v1/messages", {"model": "m"}, 400, "anthropic", "messages"),
    ("GET", "/v1/messages", None, 405, "anthropic", "method GET is not allowed"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "envelope", "words"), ENDINGS,
                         ids=[f"{e[0]} {e[1]} {e[3]}" for e in ENDINGS])
async def test_every_ending_has_one_request_id_in_the_envelope_the_log_and_the_metrics(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture, method: str, path: str,
    body: Any, status: int, envelope: str | None, words: str,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    async with aiohttp.ClientSession() as s, s.request(method, gw.root + path,
                                                       json=body) as r:
        answered = await r.json(content_type=None)
        assert r.status == status, answered
        request_id = r.headers["x-request-id"]
    assert request_id.startswith("req_")
    if envelope == "openai":
        assert set(answered["error"]) == {"message", "type", "param", "code"}
        assert words in answered["error"]["message"]
    elif envelope == "anthropic":
        assert answered["type"] == "error" and words in answered["error"]["message"]
        assert r.headers["request-id"] == request_id  # what Anthropic's SDK reads
    line = await _access_line(caplog, request_id)
    assert f"status={status}" in line and path in line
    m = await scrape(gw.root)
    assert m.total("gateway_in_flight_requests") == 1  # the scrape itself, nothing left over


async def test_a_crash_inside_a_route_is_a_500_in_the_envelope_and_the_gateway_stays_up(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")

    def crash(*_: Any, **__: Any) -> None:
        raise RuntimeError("a bug in the read")

    monkeypatch.setattr(routes, "read_clean_chat", crash)
    async with aiohttp.ClientSession() as s:
        async with s.post(gw.root + "/v1/chat/completions", json=CHAT) as r:
            answered = await r.json()
            assert r.status == 500
            request_id = r.headers["x-request-id"]
        assert answered["error"]["message"] == f"internal gateway error (request {request_id})"
        assert "a bug in the read" not in str(answered)  # no traceback, no internals
        line = await _access_line(caplog, request_id)
        assert "status=500" in line
        monkeypatch.undo()
        async with s.post(gw.root + "/v1/chat/completions", json=CHAT) as r:
            assert r.status == 200
    logged = [rec for rec in caplog.records if rec.exc_info and request_id in rec.getMessage()]
    assert logged, "the crash is logged with its traceback (on the server, not the client)"


async def test_a_preflight_is_answered_before_auth_and_every_answer_gets_cors_headers(
    gateway_factory: GatewayFactory, referee: Referee,
) -> None:
    gw = await gateway_factory({
        "model_list": [model_entry("m", referee.base_url)],
        "gateway": {"api_keys": ["sk-edge-test-key"], "cors_origins": ["https://app.example"]},
    })
    allowed = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    async with aiohttp.ClientSession() as s:
        async with s.options(gw.root + "/v1/chat/completions", headers=allowed) as r:
            assert r.status == 204  # no key: browsers send preflights without one
            assert r.headers["Access-Control-Allow-Origin"] == "https://app.example"
            assert r.headers["x-request-id"].startswith("req_")
        other = {**allowed, "Origin": "https://evil.example"}
        async with s.options(gw.root + "/v1/chat/completions", headers=other) as r:
            assert r.status == 403
            assert (await r.json())["error"]["code"] == "cors_origin_not_allowed"
        async with s.post(gw.root + "/v1/chat/completions", json=CHAT,
                          headers={"Origin": "https://app.example"}) as r:
            assert r.status == 401  # the key is still needed for the call itself
            assert r.headers["Access-Control-Allow-Origin"] == "https://app.example"
            assert "x-request-id" in r.headers["Access-Control-Expose-Headers"]
        async with s.post(gw.root + "/v1/chat/completions", json=CHAT,
                          headers={"Origin": "https://app.example",
                                   "Authorization": "Bearer sk-edge-test-key"}) as r:
            assert r.status == 200
            assert r.headers["Access-Control-Allow-Origin"] == "https://app.example"
        async with s.post(gw.root + "/v1/chat/completions", json=CHAT,
                          headers={"Authorization": "Bearer sk-edge-test-key"}) as r:
            assert r.status == 200
            assert "Access-Control-Allow-Origin" not in r.headers  # no origin, no CORS
