"""Added latency and throughput of the gateway over a fast local upstream.

Starts a minimal OpenAI-compatible upstream and the gateway (each in its own process), then:
  1. sequential latency, direct to the upstream vs. through the gateway (p50/p90/p99, added);
  2. throughput through the gateway with concurrent keep-alive clients.
Prints figures; asserts nothing. Usage: python benchmarks/overhead.py [--requests N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

COMPLETION = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
}).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_upstream(port: int) -> None:
    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=COMPLETION, content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def run_bare_proxy(port: int, upstream_port: int) -> None:
    """The floor: an aiohttp proxy that forwards bytes and does nothing else."""
    target = f"http://127.0.0.1:{upstream_port}/v1/chat/completions"
    session: dict[str, aiohttp.ClientSession] = {}

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        if "s" not in session:
            session["s"] = aiohttp.ClientSession()
        async with session["s"].post(target, data=body,
                                     headers={"Content-Type": "application/json"}) as r:
            return web.Response(body=await r.read(), status=r.status,
                                content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    app.router.add_get("/healthz", lambda _: web.Response(text="ok"))  # type: ignore[arg-type,return-value]
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def history(turns: int) -> list[dict[str, Any]]:
    """A valid agent history with tool calls (what agents resend every call)."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"step {i}: read file_{i}.py and fix the bug"})
        msgs.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{i}", "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": f"f{i}.py"})}}]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "content": "x = 1\n" * 40})
        msgs.append({"role": "assistant", "content": f"Fixed file_{i}.py."})
    return msgs


def broken(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same history with a lost tool result and an orphan (needs repair)."""
    out = [m for m in msgs if m.get("tool_call_id") != "call_3"]
    out.insert(5, {"role": "tool", "tool_call_id": "call_gone", "content": "orphan"})
    return out


async def wait_ready(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(300):
            try:
                async with s.get(url) as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


async def latency(url: str, body: bytes, n: int) -> list[float]:
    out = []
    async with aiohttp.ClientSession() as s:
        for _ in range(50):  # warm up
            async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                await r.read()
        for _ in range(n):
            t = time.perf_counter()
            async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                await r.read()
                assert r.status == 200, await r.text()
            out.append((time.perf_counter() - t) * 1000)
    return out


async def throughput(url: str, body: bytes, seconds: float, conc: int) -> float:
    done = 0
    stop = time.perf_counter() + seconds
    conn = aiohttp.TCPConnector(limit=conc)
    async with aiohttp.ClientSession(connector=conn) as s:
        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                async with s.post(url, data=body,
                                  headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                done += 1

        await asyncio.gather(*(worker() for _ in range(conc)))
    return done / seconds


def pct(xs: list[float], p: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(len(xs) * p))]


async def main_async(args: argparse.Namespace, up_port: int, gw_port: int,
                     bare_port: int) -> None:
    await wait_ready(f"http://127.0.0.1:{up_port}/")
    await wait_ready(f"http://127.0.0.1:{gw_port}/healthz")
    await wait_ready(f"http://127.0.0.1:{bare_port}/healthz")
    direct = f"http://127.0.0.1:{up_port}/v1/chat/completions"
    via = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
    bare = f"http://127.0.0.1:{bare_port}/v1/chat/completions"
    for label, msgs in (("valid 41 msgs", history(10)), ("valid 201 msgs", history(50)),
                        ("broken 200 msgs", broken(history(50)))):
        body_up = json.dumps({"model": "bench", "messages": msgs}).encode()
        body_gw = json.dumps({"model": "bench", "messages": msgs}).encode()
        d = await latency(direct, body_up, args.requests)
        b = await latency(bare, body_up, args.requests)
        g = await latency(via, body_gw, args.requests)
        added = statistics.median(g) - statistics.median(d)
        over_bare = statistics.median(g) - statistics.median(b)
        print(f"{label:16s} ({len(body_gw) // 1024} KiB)  direct p50 {statistics.median(d):.3f}"
              f" | bare aiohttp proxy p50 {statistics.median(b):.3f}"
              f" | gateway p50 {statistics.median(g):.3f} p99 {pct(g, .99):.3f} ms"
              f" | added {added:.3f} ms, of which gateway logic {over_bare:.3f} ms")
    body = json.dumps({"model": "bench", "messages": history(10)}).encode()
    rps_bare = await throughput(bare, body, args.seconds, args.concurrency)
    rps = await throughput(via, body, args.seconds, args.concurrency)
    print(f"throughput through a bare aiohttp proxy: {rps_bare:.0f} req/s")
    print(f"throughput through the gateway ({args.concurrency} clients, {args.seconds:.0f}s,"
          f" 1 worker, 2 cores shared with client and upstream): {rps:.0f} req/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    up_port, gw_port, bare_port = free_port(), free_port(), free_port()
    tmp = Path(tempfile.mkdtemp())
    config = tmp / "bench.yaml"
    config.write_text(json.dumps({
        "model_list": [{"model_name": "bench", "litellm_params": {
            "model": "openai/bench", "api_base": f"http://127.0.0.1:{up_port}/v1",
            "api_key": "bench-key"}}],
        "gateway": {"port": gw_port, "log_level": "warning"},
        "sessions": {"data_dir": str(tmp / "data")},
    }))
    ctx = multiprocessing.get_context("spawn")
    upstream = ctx.Process(target=run_upstream, args=(up_port,), daemon=True)
    upstream.start()
    gateway = ctx.Process(target=_gateway, args=(str(config),), daemon=True)
    gateway.start()
    bare = ctx.Process(target=run_bare_proxy, args=(bare_port, up_port), daemon=True)
    bare.start()
    try:
        asyncio.run(main_async(args, up_port, gw_port, bare_port))
    finally:
        for p in (gateway, bare, upstream):
            p.terminate()
            p.join(5)


def _gateway(config: str) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from gateway.cli import main as cli_main

    sys.exit(cli_main(["serve", "--config", config]))


if __name__ == "__main__":
    main()
