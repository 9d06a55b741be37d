"""A real redis-server killed mid-traffic and restarted (issue 22): store outages degrade,
never refuse. Compacted sessions keep getting answers (compacted in memory meanwhile,
``x-gateway-compaction: ...; unstored``), the archive route answers 503 with Retry-After,
readiness says degraded and comes back, the compactions made meanwhile are stored when Redis
returns, and the outage is one warning line, not a traceback per request."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.referee import Referee
from tests.compaction.conftest import (
    Gateways,
    Session,
    agent_turn,
    compaction_header,
    demo_config,
)
from tests.conftest import RunningGateway, free_port

REFEREE_WINDOW = 1500
KEY = "client-key"


class RedisProcess:
    """A redis-server on a fixed port with an append-only file: killed with SIGKILL and
    restarted on the same port, it comes back with what it had."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed: apt-get install -y redis-server",
                        pytrace=False)
        self.binary = binary
        self.port = free_port()
        self.dir = workdir / "redis"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.dir),
             "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and self.proc.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return
            time.sleep(0.01)
        pytest.fail("redis-server did not start")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisProcess]:
    server = RedisProcess(tmp_path)
    server.start()
    yield server
    if server.proc is not None and server.proc.poll() is None:
        server.kill()


async def get(root: str, path: str) -> tuple[int, Any, Any]:
    headers = {"Authorization": f"Bearer {KEY}"}
    async with aiohttp.ClientSession() as http, http.get(root + path, headers=headers) as r:
        return r.status, r.headers, await r.json()


async def readiness(gw: RunningGateway) -> str:
    status, _, body = await get(gw.root, "/health/readiness")
    assert status == 200, body  # degraded is still ready: requests are answered
    return str(body["status"])


async def until_ready(gw: RunningGateway, want: str) -> None:
    """Ask readiness until it says ``want`` (bounded: fails, never hangs)."""
    for _ in range(1000):
        if await readiness(gw) == want:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"readiness never said {want}")


async def grow_until_compacted(s: Session, start: int) -> int:
    for i in range(start, start + 12):
        raw = await s.send(agent_turn(i))
        if compaction_header(raw) is not None:
            return i + 1
    raise AssertionError("the session never needed a compaction")


async def test_a_redis_outage_degrades_and_never_refuses(
    gateways: Gateways, caplog: pytest.LogCaptureFixture, redis: RedisProcess
) -> None:
    async with Referee(rules="openai", style="openai", context_window=REFEREE_WINDOW) as ref:
        config = demo_config(ref, window=REFEREE_WINDOW, sessions={"redis_url": redis.url},
                             gateway={"api_keys": [KEY]})
        gw = await gateways.start(config)
        a, b = Session(gw, session_id="out-a"), Session(gw, session_id="out-b")
        na, nb = await grow_until_compacted(a, 0), await grow_until_compacted(b, 100)
        assert await readiness(gw) == "healthy"

        # Killed while requests of both compacted sessions are on their way.
        sending = [asyncio.create_task(a.send(agent_turn(na))),
                   asyncio.create_task(b.send(agent_turn(nb)))]
        await asyncio.sleep(0)
        redis.kill()
        await asyncio.gather(*sending)  # (Session.send fails on anything but an answer)
        hows = []
        for turn in range(1, 6):
            for s, n in ((a, na), (b, nb)):
                raw = await s.send(agent_turn(n + turn))
                assert "x-gateway-compaction-failed" not in raw.headers
                hows.append(raw.headers.get("x-gateway-compaction", ""))
        assert all(h.startswith(("reused; ", "summarized; ")) for h in hows), hows
        assert any(h.endswith("; unstored") for h in hows), hows  # compacted in memory

        # A session that first compacts during the outage: in memory too.
        c = Session(gw, session_id="out-c")
        nc = await grow_until_compacted(c, 200)
        assert c.replies[-1].headers["x-gateway-compaction"].endswith("; unstored")

        assert await readiness(gw) == "degraded"
        status, _, body = await get(gw.root, "/health/liveness")
        assert status == 200
        status, headers, body = await get(gw.root, "/v1/gateway/sessions/out-a/archive")
        assert status == 503 and int(headers["Retry-After"]) >= 1, body
        assert body["error"]["code"] == "session_store_unavailable"

        redis.start()  # the same port, what it had before the kill
        await until_ready(gw, "healthy")
        raw = await c.send(agent_turn(nc))
        assert compaction_header(raw) is not None
        assert not raw.headers["x-gateway-compaction"].endswith("; unstored")
        # The compaction made during the outage was stored, its messages archived.
        status, _, body = await get(gw.root, "/v1/gateway/sessions/out-c/archive")
        assert status == 200 and body["messages"], body
        assert body["messages"][:4] == c.history[:4]
        for s, n in ((a, na), (b, nb)):
            raw = await s.send(agent_turn(n + 10))
            assert compaction_header(raw) is not None

        # One warning for the one outage (from each part that uses Redis), no traceback,
        # no error.
        warnings = [r for r in caplog.records if r.levelname == "WARNING"
                    and ("store" in r.getMessage() or "Redis" in r.getMessage())]
        ours = [r.getMessage() for r in warnings if r.name == "gateway.compaction"]
        assert len(ours) == 1 and ours[0].startswith("session store unavailable"), ours
        by_logger = [r.name for r in warnings]
        assert all(by_logger.count(name) == 1 for name in by_logger), by_logger
        assert not [r for r in caplog.records if r.exc_info or r.levelname == "ERROR"]
