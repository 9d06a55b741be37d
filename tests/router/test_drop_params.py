"""LiteLLM's ``drop_params`` on a deployment the gateway sends to itself: when the upstream
refuses a top-level field as unsupported (OpenAI's 400 with ``code``
``unsupported_value`` / ``unsupported_parameter`` naming it in ``param``, as o-series and
gpt-5 models answer ``temperature``), the request is resent once without it, reported in
``x-gateway-recovery`` and the metrics. Without ``drop_params`` the 400 reaches the client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from aiohttp import web

from tests.conftest import GatewayFactory, RunningGateway, serve_app

KEY = "sk-client-drop-params"


def refusal(param: str, code: str) -> dict[str, Any]:
    """OpenAI's own bodies (o-series / gpt-5 models), word for word."""
    if code == "unsupported_value":
        message = (f"Unsupported value: '{param}' does not support 0 with this model. Only "
                   "the default (1) value is supported.")
    else:
        message = f"Unsupported parameter: '{param}' is not supported with this model."
    return {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": code}}


REFUSED = {"temperature": "unsupported_value", "top_p": "unsupported_parameter"}


class Reasoner:
    """An o-series-like upstream: refuses ``temperature`` (unsupported_value) and
    ``top_p`` (unsupported_parameter); answers anything else, whole or streamed."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.v1 = ""
        self._runner: web.AppRunner | None = None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        for name, code in REFUSED.items():
            if name in body:
                return web.json_response(refusal(name, code), status=400)
        if body.get("stream"):
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for delta in ({"role": "assistant", "content": "thought "}, {"content": "hard"}):
                chunk = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1,
                         "model": body["model"], "choices": [
                             {"index": 0, "delta": delta, "finish_reason": None}]}
                await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        return web.json_response({
            "id": "chatcmpl-r", "object": "chat.completion", "created": 1,
            "model": body["model"], "choices": [{"index": 0, "finish_reason": "stop",
                                                 "message": {"role": "assistant",
                                                             "content": "thought hard"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})

    async def __aenter__(self) -> Reasoner:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner, root = await serve_app(app)
        self.v1 = f"{root}/v1"
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@pytest.fixture
async def reasoner() -> AsyncIterator[Reasoner]:
    async with Reasoner() as up:
        yield up


async def start(factory: GatewayFactory, up: Reasoner, *, everywhere: bool,
                own: bool | None = None) -> RunningGateway:
    params: dict[str, Any] = {"model": "openai/o3-mini", "api_base": up.v1, "api_key": "k-o3"}
    if own is not None:
        params["drop_params"] = own
    return await factory({
        "model_list": [{"model_name": "o3", "litellm_params": params}],
        "litellm_settings": {"drop_params": everywhere},
        "gateway": {"api_keys": [KEY]},
    })


def client(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0)


async def test_an_unsupported_temperature_is_dropped_and_the_request_resent(
        gateway_factory: GatewayFactory, reasoner: Reasoner) -> None:
    gw = await start(gateway_factory, reasoner, everywhere=True)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="o3", temperature=0, max_completion_tokens=64,
            messages=[{"role": "user", "content": "think"}])
    assert raw.parse().choices[0].message.content == "thought hard"
    assert raw.headers["x-gateway-recovery"] == "drop_param"
    assert raw.headers["x-gateway-attempts"] == "2"
    first, second = reasoner.bodies
    assert first["temperature"] == 0
    assert "temperature" not in second
    assert second["max_completion_tokens"] == 64 and second["messages"] == first["messages"]
    async with aiohttp.ClientSession() as http, http.get(
            gw.root + "/metrics", headers={"Authorization": f"Bearer {KEY}"}) as resp:
        metrics = await resp.text()
    assert 'step="drop_param"' in metrics


async def test_each_unsupported_field_is_dropped_once_on_a_stream_too(
        gateway_factory: GatewayFactory, reasoner: Reasoner) -> None:
    gw = await start(gateway_factory, reasoner, everywhere=True)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="o3", temperature=0.2, top_p=0.9, stream=True,
            messages=[{"role": "user", "content": "think"}])
        text = "".join([chunk.choices[0].delta.content or "" async for chunk in raw.parse()
                        if chunk.choices])
    assert text == "thought hard"
    assert raw.headers["x-gateway-recovery"] == "drop_param,drop_param"
    assert [sorted(k for k in b if k in ("temperature", "top_p")) for b in reasoner.bodies] \
        == [["temperature", "top_p"], ["top_p"], []]
    assert all(b["stream"] is True for b in reasoner.bodies)  # never dropped


async def test_without_drop_params_the_refusal_reaches_the_client(
        gateway_factory: GatewayFactory, reasoner: Reasoner) -> None:
    gw = await start(gateway_factory, reasoner, everywhere=False)
    async with client(gw) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="o3", temperature=0,
                                            messages=[{"role": "user", "content": "think"}])
    assert info.value.code == "unsupported_value" and info.value.param == "temperature"
    assert len(reasoner.bodies) == 1


@pytest.mark.parametrize(("everywhere", "own", "dropped"),
                         [(False, True, True), (True, False, False)])
async def test_the_deployments_own_drop_params_wins(
        gateway_factory: GatewayFactory, reasoner: Reasoner, everywhere: bool, own: bool,
        dropped: bool) -> None:
    gw = await start(gateway_factory, reasoner, everywhere=everywhere, own=own)
    async with client(gw) as c:
        if dropped:
            answer = await c.chat.completions.create(
                model="o3", temperature=0, messages=[{"role": "user", "content": "think"}])
            assert answer.choices[0].message.content == "thought hard"
        else:
            with pytest.raises(openai.BadRequestError):
                await c.chat.completions.create(
                    model="o3", temperature=0, messages=[{"role": "user", "content": "think"}])
    assert len(reasoner.bodies) == (2 if dropped else 1)
