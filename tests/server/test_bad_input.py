"""Bad input gets a clear 4xx in the OpenAI envelope; the gateway stays up."""

from __future__ import annotations

from typing import Any

import aiohttp
import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway, free_port, model_entry
from tests.http import post_json


@pytest.fixture
async def gw(gateway_factory: GatewayFactory) -> RunningGateway:
    # The upstream is never reached by these requests: a closed port proves it.
    dead = f"http://127.0.0.1:{free_port()}/v1"
    return await gateway_factory({
        "model_list": [model_entry("m", dead)],
        "gateway": {"max_body_bytes": 64 * 1024},
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
    })


def assert_envelope(body: Any, *, contains: str) -> None:
    assert set(body) >= {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert contains.lower() in err["message"].lower(), err["message"]


CASES = [
    (b"{not json", 400, "not valid json"),
    (b"", 400, "empty"),
    (b"[1, 2]", 400, "must be a json object"),
    (b'"text"', 400, "must be a json object"),
    (b'{"messages": []}', 400, "model"),
    (b'{"model": 5, "messages": []}', 400, "model"),
    (b'{"model": "m", "messages": {"role": "user"}}', 400, "'messages' must be an array"),
    (b'{"model": "m"}', 400, "messages"),
    (b'{"model": "m", "messages": ["hi"]}', 400, "messages[0] must be an object"),
    (b'{"model": "m", "messages": [{"role": "wizard", "content": "x"}]}', 400, "wizard"),
    (b'{"model": "m", "messages": [{"content": "x"}]}', 400, "role"),
    (b'{"model": "m", "messages": [{"role": "user", "content": 42}]}', 400,
     "messages[0].content must be"),
    # (a part without its type but with a payload naming it is typed: test_chat_values)
    (b'{"model": "m", "messages": [{"role": "user", "content": [{"words": "x"}]}]}', 400,
     "content[0]"),
    (b'{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]}',
     400, "text must be a string"),
    (b'{"model": "m", "messages": [{"role": "assistant", "tool_calls": {}}]}', 400,
     "tool_calls must be an array"),
    (b'{"model": "m", "stream": "yes", "messages": []}', 400, "stream"),
    (b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe"}]}', 400, "utf-8"),
]


@pytest.mark.parametrize(("data", "status", "contains"), CASES,
                         ids=[c[2][:30] for c in CASES])
async def test_bad_body_gets_4xx_envelope(gw: RunningGateway, data: bytes, status: int,
                                          contains: str) -> None:
    got, headers, body = await post_json(gw.root + "/v1/chat/completions", data=data)
    assert got == status
    assert_envelope(body, contains=contains)
    assert headers["x-request-id"].startswith("req_")


async def test_unknown_model_is_404_model_not_found_through_sdk(gw: RunningGateway) -> None:
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as client:
        with pytest.raises(openai.NotFoundError) as info:
            await client.chat.completions.create(
                model="nope", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 404
    assert info.value.code == "model_not_found"
    assert "nope" in info.value.message


async def test_body_over_limit_is_413(gw: RunningGateway) -> None:
    big = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"a" * 70_000 + b'"}]}'
    status, _, body = await post_json(gw.root + "/v1/chat/completions", data=big)
    assert status == 413
    assert_envelope(body, contains="limit")


async def test_unknown_route_and_method_are_enveloped(gw: RunningGateway) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.get(gw.root + "/v1/nothing") as r:
            assert r.status == 404
            assert_envelope(await r.json(), contains="no route")
        async with s.get(gw.root + "/v1/chat/completions") as r:
            assert r.status == 405
            assert_envelope(await r.json(), contains="not allowed")


async def test_gateway_stays_up_after_bad_input(gw: RunningGateway) -> None:
    for data, _, _ in CASES:
        await post_json(gw.root + "/v1/chat/completions", data=data)
    async with aiohttp.ClientSession() as s, s.get(gw.root + "/healthz") as r:
        assert r.status == 200


async def test_unreachable_upstream_is_502_envelope_not_500(gw: RunningGateway) -> None:
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as client:
        with pytest.raises(openai.APIStatusError) as info:
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 502
    body = info.value.body
    assert isinstance(body, dict)
    assert "gateway" in str(info.value.response.json())


async def test_overlong_session_id_is_400(gw: RunningGateway) -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    status, _, got = await post_json(gw.root + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json",
                                              "x-session-id": "s" * 300})
    assert status == 400
    assert_envelope(got, contains="session id")
