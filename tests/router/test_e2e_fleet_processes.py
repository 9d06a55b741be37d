"""The fleet topology of deploy/, run for real with processes: two ``gateway serve``
replicas sharing one ``redis-server``, behind a small load balancer that hashes the
``x-session-id`` header as deploy/compose/nginx.conf does (requests without it go round
robin), and an OpenAI-compatible upstream."""

from __future__ import annotations

import asyncio
import itertools
import re
import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from gateway.sessions.redis_store import aclose
from tests.compaction.test_e2e_sessions import GatewayProcess
from tests.conftest import serve_app
from tests.fakes.openai_fleet import FleetUpstream
from tests.sessions.conftest import run_redis_server

pytestmark = pytest.mark.slow

KEY = "client-key-fleet-0001"
HOP = frozenset({"host", "content-length", "transfer-encoding", "connection"})


def affinity_proxy(backends: list[str]) -> web.Application:
    """A consistent choice of replica by ``x-session-id``; round robin without it."""
    turn = itertools.count()

    async def forward(request: web.Request) -> web.Response:
        session = request.headers.get("x-session-id")
        index = zlib.crc32(session.encode()) if session else next(turn)
        target = backends[index % len(backends)] + request.path_qs
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with aiohttp.ClientSession() as http, http.request(
                request.method, target, headers=headers, data=await request.read()) as answer:
            body = await answer.read()
            relayed = {k: v for k, v in answer.headers.items() if k.lower() not in HOP}
            return web.Response(status=answer.status, body=body, headers=relayed)

    app = web.Application()
    app.router.add_route("*", "/{path:.*}", forward)
    return app


@dataclass
class Fleet:
    """The running topology."""

    replicas: list[GatewayProcess]
    balancer: str
    upstream: FleetUpstream
    redis_url: str


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with run_redis_server(tmp_path) as url:
        yield url


@pytest.fixture
async def fleet(tmp_path: Path, redis_url: str) -> AsyncIterator[Fleet]:
    async with FleetUpstream("upstream") as upstream:
        config: dict[str, Any] = {
            "model_list": [
                {"model_name": "agent", "litellm_params": {
                    "model": "openai/agent", "api_base": upstream.v1, "api_key": "up-key-1"}},
                {"model_name": "limited", "litellm_params": {
                    "model": "openai/limited", "api_base": upstream.v1, "api_key": "up-key-1",
                    "rpm": 10}}],
            "gateway": {"log_level": "warning", "api_keys": [KEY]},
            "sessions": {"redis_url": redis_url, "data_dir": str(tmp_path / "data")},
            "recovery": {"max_retry_after": 0.0},
        }
        replicas = [GatewayProcess(config, tmp_path, f"replica{i}") for i in range(2)]
        try:
            await asyncio.gather(*(r.ready() for r in replicas))
            runner, balancer = await serve_app(affinity_proxy([r.root for r in replicas]))
            try:
                yield Fleet(replicas, balancer, upstream, redis_url)
            finally:
                await runner.cleanup()
        finally:
            for replica in replicas:
                replica.stop()


def history(turns: int, session: str) -> list[dict[str, Any]]:
    """An agent's history: a system prompt, then user / assistant turns."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are a coding agent in session {session}."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"step {i}: read file_{i}.py " * 20})
        messages.append({"role": "assistant", "content": f"file_{i}.py read, it defines f{i}"})
    return messages


async def chat(http: aiohttp.ClientSession, root: str, model: str,
               messages: list[dict[str, Any]], session: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {KEY}"}
    if session is not None:
        headers["x-session-id"] = session
    async with http.post(f"{root}/v1/chat/completions", headers=headers,
                         json={"model": model, "messages": messages}) as response:
        await response.read()
        return response.status


async def reads(http: aiohttp.ClientSession, replica: GatewayProcess) -> dict[str, float]:
    """The replica's gateway_history_reads_total by kind of read."""
    async with http.get(replica.root + "/metrics") as response:
        text = await response.text()
    return {kind: float(n) for kind, n in
            re.findall(r'^gateway_history_reads_total\{read="(\w+)"\} (\S+)$', text, re.M)}


async def test_a_session_stays_on_one_replica_which_reads_its_next_turn_incrementally(
        fleet: Fleet) -> None:
    async with aiohttp.ClientSession() as http:
        for session in ("agent-session-1", "agent-session-2", "agent-session-3"):
            first = history(30, session)
            second = [*first, {"role": "user", "content": "now run the tests"}]
            assert await chat(http, fleet.balancer, "agent", first, session) == 200
            assert await chat(http, fleet.balancer, "agent", second, session) == 200
        before = [await reads(http, r) for r in fleet.replicas]
        # Through the balancer: every session's second turn met the replica that read its
        # first, which read it over the body it kept.
        assert sum(r.get("incremental", 0) for r in before) == 3
        assert sum(r.get("whole", 0) for r in before) == 3
        # Without affinity the second turn lands on a replica that never saw the session:
        # it reads the whole history again.
        first = history(30, "no-affinity")
        second = [*first, {"role": "user", "content": "now run the tests"}]
        assert await chat(http, fleet.replicas[0].root, "agent", first, "no-affinity") == 200
        assert await chat(http, fleet.replicas[1].root, "agent", second, "no-affinity") == 200
        after = await reads(http, fleet.replicas[1])
        assert after.get("whole", 0) == before[1].get("whole", 0) + 1
        assert after.get("incremental", 0) == before[1].get("incremental", 0)


async def test_thirty_concurrent_requests_over_two_replicas_pass_exactly_the_rpm(
        fleet: Fleet) -> None:
    async with aiohttp.ClientSession() as http:
        statuses = await asyncio.gather(*(
            chat(http, fleet.balancer, "limited", [{"role": "user", "content": f"q{i}"}])
            for i in range(30)))
    passed = statuses.count(200)
    assert statuses.count(429) == 30 - passed
    assert fleet.upstream.hits == passed
    client = aioredis.Redis.from_url(fleet.redis_url)
    try:
        counted = [int(await client.hget(key, "r") or 0)
                   async for key in client.scan_iter(match="gw:u:limited#1:*")]
    finally:
        await aclose(client)
    # Each wall-clock minute let exactly its 10 through (two when the burst straddled one).
    assert all(n <= 10 for n in counted) and sum(counted) == passed
    assert passed == 10 or (len(counted) == 2 and 10 < passed <= 20)
