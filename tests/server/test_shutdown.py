"""SIGTERM with streams open: each stream gets its wire's terminal error event once the
grace period is over (a request still waiting for its upstream a 503 in its wire's shape),
and ``gateway serve`` (one process, or a master with two workers) exits by itself within
``shutdown_grace`` plus the documented margin."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.supervisor import STOP_MARGIN
from tests.conftest import free_port
from tests.fakes.three_wires import ThreeWires, wire_models
from tests.server.wire_sse import assert_ends_with_wire_error, sse_events

GRACE = 2.0
# Streams on every wire and route kind (client wire, model, path, body).
STREAMS = [
    ("chat", "chat", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("responses", "chat", "/v1/responses", {"input": "hi"}),
    ("responses", "resp", "/v1/responses", {"input": "hi"}),
    ("anthropic", "chat", "/v1/messages",
     {"max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}),
    ("anthropic", "claude", "/v1/messages",
     {"max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}),
]


@pytest.fixture
async def upstream() -> AsyncIterator[ThreeWires]:
    async with ThreeWires() as up:
        up.hold = asyncio.Event()  # every stream stalls after its first text, every answer
        yield up


async def start_gateway(tmp_path: Path, upstream: ThreeWires, workers: int,
                        ) -> tuple[asyncio.subprocess.Process, str]:
    port = free_port()
    config = tmp_path / "gw.yaml"
    config.write_text(json.dumps({
        "model_list": wire_models(upstream.base_url),
        "gateway": {"port": port, "shutdown_grace": GRACE},
        "sessions": {"data_dir": str(tmp_path / "data")},
    }))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gateway.cli", "serve", "--config", str(config),
        "--workers", str(workers), env=env, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE)
    root = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as s:
        for _ in range(600):  # polling for start-up, not timing an assertion
            if proc.returncode is not None:
                raise AssertionError(f"gateway exited with {proc.returncode}")
            try:
                async with s.get(root + "/healthz") as r:
                    if r.status == 200:
                        return proc, root
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError("the gateway never answered")


async def open_stream(session: aiohttp.ClientSession, root: str, model: str, path: str,
                      body: dict[str, Any]) -> tuple[aiohttp.ClientResponse, bytes]:
    """A stream read up to its first text: the response and what came so far."""
    resp = await session.post(root + path, json={"model": model, "stream": True, **body})
    assert resp.status == 200
    got = b""
    while b"hello" not in got:
        chunk = await resp.content.readany()
        assert chunk, f"the stream ended before its first text: {got!r}"
        got += chunk
    return resp, got


@pytest.mark.parametrize("workers", [1, 2])
async def test_sigterm_ends_every_open_stream_and_the_process(
    tmp_path: Path, upstream: ThreeWires, workers: int,
) -> None:
    proc, root = await start_gateway(tmp_path, upstream, workers)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
            waiting = []
            for _, model, path, body in STREAMS:  # whole answers, held by the upstream
                waiting.append(asyncio.create_task(
                    s.post(root + path, json={"model": model, **body})))
                await asyncio.wait_for(upstream.held.get(), 30)
            opened = [await open_stream(s, root, model, path, body)
                      for _, model, path, body in STREAMS]
            proc.send_signal(signal.SIGTERM)
            for (wire, model, _, _), (resp, head) in zip(STREAMS, opened, strict=True):
                # read() fails unless the chunked body is correctly closed.
                rest = await asyncio.wait_for(resp.read(), 30)
                events = sse_events(head + rest)
                message = assert_ends_with_wire_error(wire, events)
                assert "shutting down" in message, (wire, model)
            for (wire, model, _, _), task in zip(STREAMS, waiting, strict=True):
                refused = await asyncio.wait_for(task, 30)
                assert refused.status == 503, (wire, model)
                body = await refused.json()
                error = body["error"]
                if wire == "anthropic":
                    assert body["type"] == "error" and error["type"] == "api_error"
                assert "shutting down" in error["message"], (wire, model)
        # A bounded wait (a shared machine runs this): the process leaves by itself, long
        # before the master's kill deadline plus a wide margin.
        code = await asyncio.wait_for(proc.wait(), GRACE + STOP_MARGIN + 10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 0
    assert proc.stderr is not None
    logged = (await proc.stderr.read()).decode()
    # No worker had to be killed, and none gave up waiting for its own shutdown.
    assert "killed" not in logged and "did not finish" not in logged, logged
