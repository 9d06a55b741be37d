"""A bounded burst of mixed traffic: valid, broken, malformed, abandoned. No 500, no hang, and
the gateway keeps serving afterwards."""

from __future__ import annotations

import asyncio
import json
import random

import aiohttp

from gateway.referee import Referee
from tests.conftest import GatewayFactory, model_entry
from tests.factories import assistant, calls, tool, user

KINDS = ("valid", "broken", "strict_only", "malformed", "unknown_model", "stream", "abandon")


def payload(kind: str, i: int) -> bytes:
    if kind == "malformed":
        return b'{"model": "demo", "messages": [' + str(i).encode()
    messages = {
        "valid": [user(f"q{i}")],
        "broken": [user(f"q{i}"), calls(f"call_{i}"), user("next"), tool("ghost")],
        "strict_only": [assistant("hello"), user(f"q{i}")],
    }.get(kind, [user(f"q{i}")])
    body = {"model": "nope" if kind == "unknown_model" else "demo", "messages": messages,
            "stream": kind in ("stream", "abandon")}
    return json.dumps(body).encode()


async def test_mixed_burst_keeps_the_gateway_healthy(gateway_factory: GatewayFactory) -> None:
    rng = random.Random(1)
    async with Referee(rules="strict") as ref:
        gw = await gateway_factory({"model_list": [model_entry("demo", ref.base_url)]})
        url = gw.base_url + "/chat/completions"
        seen: dict[str, list[int]] = {k: [] for k in KINDS}
        connector = aiohttp.TCPConnector(limit=40)
        async with aiohttp.ClientSession(connector=connector) as s:

            async def one(i: int) -> None:
                kind = rng.choice(KINDS)
                async with s.post(url, data=payload(kind, i),
                                  headers={"Content-Type": "application/json"}) as r:
                    if kind == "abandon":
                        await r.content.readany()
                        r.close()  # the client walks away mid-stream
                    else:
                        body = await r.read()
                        if r.status >= 400:
                            assert "error" in json.loads(body)
                    seen[kind].append(r.status)

            await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(300))), 120)
            async with s.get(gw.root + "/healthz") as r:
                assert r.status == 200
            async with s.post(url, data=payload("valid", 0),
                              headers={"Content-Type": "application/json"}) as r:
                assert r.status == 200
    expected = {"valid": {200}, "broken": {200}, "strict_only": {200}, "malformed": {400},
                "unknown_model": {404}, "stream": {200}, "abandon": {200}}
    for kind, statuses in seen.items():
        assert set(statuses) <= expected[kind], (kind, statuses)
    assert sum(len(v) for v in seen.values()) == 300
