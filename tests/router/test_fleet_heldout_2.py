"""An outsider's round on the fleet: two real gateway replicas on 127.0.0.1 sharing one real
redis-server (rpm/tpm, cooldowns, response state), Redis going away and coming back, Redis
that never answers, Redis behind a password read from the environment, and where that
password must never show up."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from gateway.referee import Referee
from gateway.server.wire_routes import RESPONSE_STATE
from tests.conftest import GatewayFactory, RunningGateway, free_port, gateway_state
from tests.fakes.openai_fleet import FleetUpstream

MINUTE = 1_800_000_000.0
PASSWORD = "pw-Zq7@x:y/z#secret-4242"  # every character a URL gives a meaning to
ASK = [{"role": "user", "content": "hi"}]


def _pings(port: int, password: str | None) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            if password is not None:
                s.sendall(f"AUTH {password}\r\n".encode())
                if not s.recv(64).startswith(b"+OK"):
                    return False
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisProcess:
    """A redis-server on a fixed loopback port that a test can stop and start again."""

    def __init__(self, workdir: Path, password: str | None = None) -> None:
        self.port = free_port()
        self.password = password
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed"
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.workdir)]
        if self.password is not None:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not _pings(self.port, self.password):
            assert self.proc.poll() is None, "redis-server exited"
            assert time.monotonic() < deadline, "redis-server never answered"
            time.sleep(0.01)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def silent_redis() -> AsyncIterator[int]:
    """A TCP port that accepts connections and never answers (a Redis behind a dead link)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


def limited(upstream: FleetUpstream, router: dict[str, Any], **limits: int) -> dict[str, Any]:
    return {"model_list": [{"model_name": "small", "litellm_params": {
                "model": "openai/small", "api_base": upstream.v1, "api_key": "k-123456",
                **limits}}],
            "router_settings": router, "recovery": {"max_retry_after": 0.0}}


def same_minute(*replicas: RunningGateway, minute: float = MINUTE) -> None:
    for gw in replicas:
        shared = gateway_state(gw).fleet.shared
        assert shared is not None
        shared.wall = lambda: minute


def client(gw: RunningGateway, key: str = "x") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0)


async def ask(gw: RunningGateway, content: str = "hi") -> str:
    """One chat request: "passed", "refused" (a 429 of the gateway), or the failure."""
    async with client(gw) as c:
        try:
            await c.chat.completions.create(
                model="small", messages=[{"role": "user", "content": content}])
        except openai.RateLimitError as err:
            assert err.code == "no_deployments_available"
            return "refused"
    return "passed"


# --- rpm/tpm across replicas ------------------------------------------------------------

async def test_a_client_spraying_both_replicas_never_passes_the_rpm(
        gateway_factory: GatewayFactory, redis: RedisProcess) -> None:
    async with FleetUpstream("limited") as upstream:
        config = limited(upstream, {"redis_url": redis.url}, rpm=5)
        a, b = await gateway_factory(config), await gateway_factory(config)
        same_minute(a, b)
        outcomes = [await ask((a, b)[i % 2]) for i in range(12)]
        assert outcomes.count("passed") == 5
        assert outcomes[:5] == ["passed"] * 5  # the first five, whichever replica
        assert upstream.hits == 5


async def test_the_tpm_is_counted_across_replicas(gateway_factory: GatewayFactory,
                                                 redis: RedisProcess) -> None:
    """A tpm budget one replica spent is spent for the other too."""
    async with FleetUpstream("limited") as upstream:
        config = limited(upstream, {"redis_url": redis.url}, tpm=40)
        a, b = await gateway_factory(config), await gateway_factory(config)
        same_minute(a, b)
        long = "word " * 120  # well over 40 tokens: it passes only as the minute's first
        assert await ask(a, long) == "passed"
        assert await ask(b, long) == "refused"
        assert await ask(b, "hi") == "refused"
        assert upstream.hits == 1


async def test_a_new_minute_opens_the_budget_on_both_replicas(
        gateway_factory: GatewayFactory, redis: RedisProcess) -> None:
    async with FleetUpstream("limited") as upstream:
        config = limited(upstream, {"redis_url": redis.url}, rpm=1)
        a, b = await gateway_factory(config), await gateway_factory(config)
        same_minute(a, b)
        assert [await ask(a), await ask(b)] == ["passed", "refused"]
        same_minute(a, b, minute=MINUTE + 60)
        assert [await ask(b), await ask(a)] == ["passed", "refused"]


async def test_the_refusal_tells_the_client_when_the_minute_ends(
        gateway_factory: GatewayFactory, redis: RedisProcess) -> None:
    async with FleetUpstream("limited") as upstream:
        config = limited(upstream, {"redis_url": redis.url}, rpm=1)
        a, b = await gateway_factory(config), await gateway_factory(config)
        same_minute(a, b, minute=MINUTE + 45)  # 15 seconds left in the minute
        assert await ask(a) == "passed"
        async with aiohttp.ClientSession() as session, session.post(
                f"{b.base_url}/chat/completions",
                json={"model": "small", "messages": ASK}) as response:
            assert response.status == 429
            body = await response.json()
            retry = float(response.headers["retry-after"])
        assert body["error"]["code"] == "no_deployments_available"
        assert 0 < retry <= 15


# --- Redis going away, and back ---------------------------------------------------------

async def test_redis_going_down_mid_traffic_degrades_to_per_replica_limits(
        gateway_factory: GatewayFactory, redis: RedisProcess,
        caplog: pytest.LogCaptureFixture) -> None:
    async with FleetUpstream("limited") as upstream:
        config = limited(upstream, {"redis_url": redis.url}, rpm=3)
        a, b = await gateway_factory(config), await gateway_factory(config)
        same_minute(a, b)
        assert await ask(a) == "passed"
        redis.stop()
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="gateway.router"):
            outcomes_a = [await ask(a) for _ in range(5)]
            outcomes_b = [await ask(b) for _ in range(5)]
        # Every request is answered (a pass or the gateway's own 429), never a 5xx; each
        # replica now holds the limit by itself.
        assert outcomes_a.count("passed") == 2  # its own count holds the one it sent before
        assert outcomes_b.count("passed") == 3
        warnings = [r.getMessage() for r in caplog.records
                    if "shared rpm/tpm counters unavailable" in r.getMessage()]
        assert len(warnings) == 2  # once per replica, not once per request
        assert all("counting in this process" in w for w in warnings)


async def test_redis_coming_back_shares_the_limits_again(
        gateway_factory: GatewayFactory, redis: RedisProcess,
        caplog: pytest.LogCaptureFixture) -> None:
    async with FleetUpstream("limited") as upstream:
        config = limited(upstream, {"redis_url": redis.url}, rpm=1)
        a, b = await gateway_factory(config), await gateway_factory(config)
        same_minute(a, b)
        redis.stop()
        with caplog.at_level(logging.WARNING, logger="gateway.router"):
            assert [await ask(a), await ask(b)] == ["passed", "passed"]  # per replica
        redis.start()  # the same port, empty
        same_minute(a, b, minute=MINUTE + 60)
        deadline = time.monotonic() + 20
        while await ask(a) != "passed":  # the pool reconnects on its next call
            assert time.monotonic() < deadline
        assert await ask(b) == "refused"  # counted in Redis again, across replicas


async def test_a_redis_that_never_answers_holds_no_request_up(
        gateway_factory: GatewayFactory) -> None:
    """Every Redis call is bounded: a Redis that accepts and then says nothing costs a
    bounded wait, and the requests are answered with the limit held per replica."""
    async with silent_redis() as port, FleetUpstream("limited") as upstream:
        url = f"redis://127.0.0.1:{port}/0"
        config = limited(upstream, {"redis_url": url}, rpm=2)
        gw = await gateway_factory(config)
        outcomes = await asyncio.wait_for(asyncio.gather(*(ask(gw) for _ in range(4))), 60)
        assert sorted(outcomes) == ["passed", "passed", "refused", "refused"]


# --- cooldowns -------------------------------------------------------------------------

async def test_a_cooldown_set_on_one_replica_survives_its_death(
        gateway_factory: GatewayFactory, redis: RedisProcess) -> None:
    """The cooldown lives in Redis: a replica that started after the one that set it died
    still keeps the refusing deployment out of rotation."""
    async with FleetUpstream("east", mode="rate_limited") as east, \
            FleetUpstream("west") as west:
        config: dict[str, Any] = {
            "model_list": [
                {"model_name": "m", "litellm_params": {
                    "model": "openai/m", "api_base": east.v1, "api_key": "k-123456"}},
                {"model_name": "m", "litellm_params": {
                    "model": "openai/m", "api_base": west.v1, "api_key": "k-123456"}}],
            "router_settings": {"redis_url": redis.url, "routing_strategy": "simple-shuffle",
                                "allowed_fails": 0, "cooldown_time": 300},
            "recovery": {"max_retry_after": 0.0}}
        first = await gateway_factory(config)
        async with client(first) as c:
            while east.hits == 0:  # until the shuffle picked east once (its 429 relayed)
                with contextlib.suppress(openai.RateLimitError):
                    await c.chat.completions.create(model="m", messages=ASK)
        await gateway_state(first).fleet.close()  # the replica goes away (writes flushed)
        later = await gateway_factory(config)
        before = east.hits
        async with client(later) as c:
            for _ in range(8):
                answer = await c.chat.completions.create(model="m", messages=ASK)
                assert answer.choices[0].message.content == "from west: m"
        assert east.hits == before


# --- Redis behind a password -----------------------------------------------------------

@pytest.fixture
def locked_redis(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path, PASSWORD)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_a_redis_password_from_the_environment_shares_the_limits(
        gateway_factory: GatewayFactory, locked_redis: RedisProcess,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``redis_password: os.environ/NAME`` with a password holding ``@ : / #``."""
    monkeypatch.setenv("FLEET_REDIS_PASSWORD", PASSWORD)
    async with FleetUpstream("limited") as upstream:
        config = limited(upstream, {"redis_host": "127.0.0.1", "redis_port": locked_redis.port,
                                    "redis_password": "os.environ/FLEET_REDIS_PASSWORD"}, rpm=2)
        a, b = await gateway_factory(config), await gateway_factory(config)
        same_minute(a, b)
        assert [await ask(a), await ask(b), await ask(a)] == ["passed", "passed", "refused"]


async def test_a_redis_url_from_the_environment_holds_sessions_and_limits(
        gateway_factory: GatewayFactory, locked_redis: RedisProcess,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from urllib.parse import quote
    monkeypatch.setenv("FLEET_REDIS_URL",
                       f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:{locked_redis.port}/0")
    async with FleetUpstream("limited") as upstream:
        config = limited(upstream, {}, rpm=1)
        config["sessions"] = {"data_dir": str(tmp_path / "d"),
                              "redis_url": "os.environ/FLEET_REDIS_URL"}
        a, b = await gateway_factory(config), await gateway_factory(config)
        same_minute(a, b)
        assert [await ask(a), await ask(b)] == ["passed", "refused"]


async def test_the_redis_password_never_reaches_logs_metrics_or_errors(
        gateway_factory: GatewayFactory, locked_redis: RedisProcess,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        tmp_path: Path) -> None:
    """A wrong password (Redis refuses every call) and a right one: neither appears in a log
    line, in /metrics, in an answer, or in the inspector's config."""
    from urllib.parse import quote
    wrong = "wrong-" + PASSWORD
    monkeypatch.setenv("WRONG_REDIS_URL",
                       f"redis://:{quote(wrong, safe='')}@127.0.0.1:{locked_redis.port}/0")
    monkeypatch.setenv("RIGHT_REDIS_PASSWORD", PASSWORD)
    seen: list[str] = []
    async with FleetUpstream("limited") as upstream:
        with caplog.at_level(logging.DEBUG):
            bad = limited(upstream, {"redis_url": "os.environ/WRONG_REDIS_URL"}, rpm=5)
            bad["sessions"] = {"data_dir": str(tmp_path / "d1"),
                               "redis_url": "os.environ/WRONG_REDIS_URL"}
            good = limited(upstream, {"redis_host": "127.0.0.1",
                                      "redis_port": locked_redis.port,
                                      "redis_password": "os.environ/RIGHT_REDIS_PASSWORD"},
                           rpm=5)
            for config in (bad, good):
                gw = await gateway_factory(config)
                async with client(gw) as c:
                    raw = await c.chat.completions.with_raw_response.create(
                        model="small", messages=ASK)
                    seen.append(raw.http_response.text)
                    seen.extend(f"{k}: {v}" for k, v in raw.headers.items())
                async with aiohttp.ClientSession() as session:
                    for path in ("/metrics", "/health/readiness", "/health/liveness"):
                        async with session.get(gw.root + path) as response:
                            seen.append(await response.text())
        seen.extend(r.getMessage() for r in caplog.records)
        seen.extend(str(r.exc_info) for r in caplog.records if r.exc_info)
    text = "\n".join(seen)
    for secret in (PASSWORD, quote(PASSWORD, safe=""), "Zq7@x", "secret-4242"):
        assert secret not in text


# --- response state across replicas ----------------------------------------------------

async def test_a_response_stored_by_one_replica_is_continued_on_the_other(
        gateway_factory: GatewayFactory, redis: RedisProcess, tmp_path: Path) -> None:
    async with Referee(rules="strict") as referee:
        def config(name: str) -> dict[str, Any]:
            return {"model_list": [{"model_name": "local", "litellm_params": {
                        "model": "hosted_vllm/referee", "api_base": referee.base_url,
                        "api_key": "k"}}],
                    "gateway": {"api_keys": ["client-key-a"]},
                    "sessions": {"data_dir": str(tmp_path / name), "redis_url": redis.url}}
        a, b = await gateway_factory(config("a")), await gateway_factory(config("b"))
        async with client(a, "client-key-a") as ca, client(b, "client-key-a") as cb:
            first = await ca.responses.create(model="local", input="remember: blue heron")
            await a.app[RESPONSE_STATE].flush()
            second = await cb.responses.create(model="local", input="what did I say?",
                                               previous_response_id=first.id)
            await b.app[RESPONSE_STATE].flush()
            third = await ca.responses.create(model="local", input="and then?",
                                              previous_response_id=second.id)
    assert third.previous_response_id == second.id
    sent = referee.requests[-1].json()["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    assert sent[0]["content"] == "remember: blue heron"


async def test_another_key_cannot_continue_on_another_replica(
        gateway_factory: GatewayFactory, redis: RedisProcess, tmp_path: Path) -> None:
    async with Referee(rules="strict") as referee:
        def config(name: str) -> dict[str, Any]:
            return {"model_list": [{"model_name": "local", "litellm_params": {
                        "model": "hosted_vllm/referee", "api_base": referee.base_url,
                        "api_key": "k"}}],
                    "gateway": {"api_keys": ["client-key-a", "client-key-b"]},
                    "sessions": {"data_dir": str(tmp_path / name), "redis_url": redis.url}}
        a, b = await gateway_factory(config("a")), await gateway_factory(config("b"))
        async with client(a, "client-key-a") as ca, client(b, "client-key-b") as cb:
            first = await ca.responses.create(model="local", input="my secret plan")
            await a.app[RESPONSE_STATE].flush()
            with pytest.raises(openai.BadRequestError) as refused:
                await cb.responses.create(model="local", input="tell me",
                                          previous_response_id=first.id)
    assert refused.value.code == "previous_response_not_found"
    assert len(referee.requests) == 1


async def test_a_response_stored_before_redis_died_is_a_clear_400_not_a_hang(
        gateway_factory: GatewayFactory, redis: RedisProcess, tmp_path: Path) -> None:
    """Redis gone: the chain cannot be read; the client gets the clear 400 that tells it
    to send the whole conversation (never a 500, never a hang), and plain turns still
    pass."""
    async with Referee(rules="strict") as referee:
        config = {"model_list": [{"model_name": "local", "litellm_params": {
                      "model": "hosted_vllm/referee", "api_base": referee.base_url,
                      "api_key": "k"}}],
                  "sessions": {"data_dir": str(tmp_path / "a"), "redis_url": redis.url}}
        gw = await gateway_factory(config)
        async with client(gw) as c:
            first = await c.responses.create(model="local", input="one")
            await gw.app[RESPONSE_STATE].flush()
            redis.stop()
            with pytest.raises(openai.APIStatusError) as refused:
                await asyncio.wait_for(c.responses.create(
                    model="local", input="two", previous_response_id=first.id), 60)
            plain = await c.responses.create(model="local", input="three")
    assert refused.value.status_code in (400, 503)
    assert plain.output_text


# --- cooldowns and the session store while Redis is away ---------------------------------

async def test_cooldowns_hold_per_replica_while_redis_is_down(
        gateway_factory: GatewayFactory, redis: RedisProcess,
        caplog: pytest.LogCaptureFixture) -> None:
    async with FleetUpstream("east", mode="rate_limited") as east, \
            FleetUpstream("west") as west:
        config: dict[str, Any] = {
            "model_list": [
                {"model_name": "m", "litellm_params": {
                    "model": "openai/m", "api_base": east.v1, "api_key": "k-123456"}},
                {"model_name": "m", "litellm_params": {
                    "model": "openai/m", "api_base": west.v1, "api_key": "k-123456"}}],
            "router_settings": {"redis_url": redis.url, "allowed_fails": 0,
                                "cooldown_time": 300},
            "recovery": {"max_retry_after": 0.0}}
        gw = await gateway_factory(config)
        redis.stop()
        with caplog.at_level(logging.WARNING, logger="gateway.router"):
            async with client(gw) as c:
                while east.hits == 0:
                    with contextlib.suppress(openai.RateLimitError):
                        await c.chat.completions.create(model="m", messages=ASK)
                for _ in range(6):
                    answer = await c.chat.completions.create(model="m", messages=ASK)
                    assert answer.choices[0].message.content == "from west: m"
            fleet = gateway_state(gw).fleet
            assert fleet.cooldowns is not None
            await fleet.cooldowns.close()  # the publication that failed is finished
        assert east.hits == 1
        lines = [r.getMessage() for r in caplog.records
                 if "shared deployment cooldowns unavailable" in r.getMessage()]
        assert len(lines) == 1 and "per replica" in lines[0]


async def test_a_silent_session_store_holds_neither_requests_nor_the_readiness_probe(
        gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    async with silent_redis() as port, FleetUpstream("plain") as upstream:
        url = f"redis://127.0.0.1:{port}/0"
        config = limited(upstream, {}, rpm=100)
        config["sessions"] = {"data_dir": str(tmp_path / "d"), "redis_url": url}
        gw = await gateway_factory(config)
        async with client(gw) as c:
            answer = await asyncio.wait_for(c.chat.completions.create(
                model="small", messages=ASK, extra_headers={"x-session-id": "s-1"}), 60)
        assert answer.choices[0].message.content == "from plain: small"
        async with aiohttp.ClientSession() as session:
            for _ in range(2):
                async with asyncio.timeout(60), session.get(
                        gw.root + "/health/readiness") as response:
                    assert response.status == 200  # answered, never taken out of rotation
                    body = await response.json()
                assert body["status"] in ("healthy", "degraded")


async def test_a_refused_redis_password_is_reported_without_the_password(
        gateway_factory: GatewayFactory, locked_redis: RedisProcess,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        tmp_path: Path) -> None:
    from urllib.parse import quote
    wrong = "not-" + PASSWORD
    monkeypatch.setenv("FLEET_REDIS_URL",
                       f"redis://:{quote(wrong, safe='')}@127.0.0.1:{locked_redis.port}/0")
    async with FleetUpstream("plain") as upstream:
        config = limited(upstream, {}, rpm=1)
        config["sessions"] = {"data_dir": str(tmp_path / "d"),
                              "redis_url": "os.environ/FLEET_REDIS_URL"}
        with caplog.at_level(logging.DEBUG):
            a, b = await gateway_factory(config), await gateway_factory(config)
            same_minute(a, b)
            # Redis refuses both: each replica counts by itself, and says so.
            assert [await ask(a), await ask(b), await ask(a)] == ["passed", "passed",
                                                                 "refused"]
            async with aiohttp.ClientSession() as session, session.get(
                    a.root + "/health/readiness") as response:
                readiness = await response.text()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "shared rpm/tpm counters unavailable" in logged
    for text in (logged, readiness):
        assert "Zq7@x" not in text and "secret-4242" not in text
        assert quote(wrong, safe="") not in text


async def test_a_tls_redis_url_to_a_plain_redis_degrades_without_a_hang(
        gateway_factory: GatewayFactory, redis: RedisProcess,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``rediss://`` (from the environment) to a server that does not speak TLS: the
    handshake fails, bounded; requests are answered with per-replica limits."""
    monkeypatch.setenv("FLEET_REDIS_URL", f"rediss://127.0.0.1:{redis.port}/0")
    async with FleetUpstream("limited") as upstream:
        config = limited(upstream, {"redis_url": "os.environ/FLEET_REDIS_URL"}, rpm=2)
        gw = await gateway_factory(config)
        outcomes = await asyncio.wait_for(
            asyncio.gather(*(ask(gw) for _ in range(3))), 60)
        assert sorted(outcomes) == ["passed", "passed", "refused"]


# --- a replica with --workers N --------------------------------------------------------

@pytest.mark.slow
async def test_workers_read_the_shared_counts_and_a_killed_worker_loses_none(
        redis: RedisProcess, tmp_path: Path) -> None:
    """``gateway serve --workers 2`` on one Redis: a deployment another replica filled is
    refused by both workers; a worker killed with ``kill -9`` comes back reading the same
    counts; freed, the workers count into Redis again."""
    import json
    import os
    import signal

    import redis.asyncio as aioredis

    from gateway.router.redis_usage import usage_key
    from gateway.sessions.redis_store import aclose
    from tests.test_cli import GATEWAY, wait_http
    from tests.test_supervisor import ENV, poll_until, stop, worker_pids

    store: aioredis.Redis[bytes] = aioredis.Redis.from_url(redis.url)
    minute = int(time.time() // 60)
    keys = [usage_key("dep-1", m) for m in range(minute - 1, minute + 5)]
    for key in keys:  # another replica spent this minute's and the next ones' budget
        await store.hset(key, mapping={"r": 2, "t": 10})
    async with FleetUpstream("limited") as upstream:
        port = free_port()
        path = tmp_path / "gw.yaml"
        path.write_text(json.dumps({
            "model_list": [{"model_name": "small", "litellm_params": {
                "model": "openai/small", "api_base": upstream.v1, "api_key": "k-123456",
                "rpm": 2}, "model_info": {"id": "dep-1"}}],
            "router_settings": {"redis_url": redis.url},
            "recovery": {"max_retry_after": 0.0},
            "gateway": {"port": port}, "sessions": {"data_dir": str(tmp_path / "d")}}))
        proc = subprocess.Popen([*GATEWAY, "serve", "--config", str(path), "--workers", "2"],
                                env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        root = f"http://127.0.0.1:{port}"

        async def one() -> int:
            # a connection each: the kernel spreads them over both workers
            async with aiohttp.ClientSession() as own, own.post(
                    root + "/v1/chat/completions",
                    json={"model": "small", "messages": ASK}) as response:
                return response.status

        async def statuses(n: int) -> list[int]:
            return list(await asyncio.gather(*(one() for _ in range(n))))

        try:
            await asyncio.to_thread(wait_http, root + "/healthz", proc)
            before = await asyncio.to_thread(
                poll_until, "two workers", lambda: (w := worker_pids(proc.pid)) and
                len(w) == 2 and w)
            assert await statuses(8) == [429] * 8
            victim = sorted(before)[0]
            os.kill(victim, signal.SIGKILL)
            await asyncio.to_thread(
                poll_until, "the worker restarted",
                lambda: len(w := worker_pids(proc.pid)) == 2 and victim not in w)
            await asyncio.to_thread(wait_http, root + "/healthz", proc)
            assert await statuses(8) == [429] * 8
            assert upstream.hits == 0
            await store.delete(*keys)
            assert 200 in await statuses(2)
            counted = [await store.hget(k, "r") for k in keys]
            assert any(c is not None and int(c) >= 1 for c in counted)
        finally:
            await asyncio.to_thread(stop, proc)
            for pid in worker_pids(proc.pid):
                os.kill(pid, signal.SIGKILL)
            await aclose(store)
