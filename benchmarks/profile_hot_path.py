"""Profile the gateway's request path with cProfile (``make profile``).

The gateway runs in this process (its app, not ``gateway serve``) behind a mock upstream in
another process; a client in a third sends N requests of one history. Prints the functions
with the most cumulative time inside the gateway process. Usage:
python benchmarks/profile_hot_path.py [--messages 600] [--broken] [--cold] [--requests 300]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from aiohttp import web
from bench_load import agent_history, broken, request_body
from bench_servers import free_port, start_script

from gateway.config import parse_config
from gateway.server.app import create_app

_CLIENT = """
import asyncio, sys, aiohttp
async def main(url, path, n, cold):
    body = open(path, 'rb').read()
    cut = body.index(b"You are a coding agent")
    async with aiohttp.ClientSession() as s:
        for i in range(n):
            # --cold: a new system prompt start on every request (a body never seen before).
            data = body[:cut] + b"[%d] " % i + body[cut:] if cold else body
            async with s.post(url, data=data, headers={'Content-Type': 'application/json'}) as r:
                await r.read()
                assert r.status == 200, r.status
asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "cold"))
"""


async def profile(args: argparse.Namespace, upstream: str, tmp: Path) -> pstats.Stats:
    config = parse_config({
        "model_list": [{"model_name": "bench", "litellm_params": {
            "model": "openai/bench", "api_base": f"{upstream}/v1", "api_key": "bench-key"},
            "model_info": {"max_input_tokens": 1_000_000}}],
        "gateway": {"log_level": "warning"},
        "sessions": {"data_dir": str(tmp / "data")},
    })
    runner = web.AppRunner(create_app(config), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    msgs = agent_history(args.messages)
    body = request_body(broken(msgs) if args.broken else msgs)
    path = tmp / "body.json"
    path.write_bytes(body)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    cold = "cold" if args.cold else "seen"
    warm = await asyncio.create_subprocess_exec(sys.executable, "-c", _CLIENT, url, str(path),
                                                "20", cold)
    await warm.wait()
    profiler = cProfile.Profile()
    profiler.enable()
    client = await asyncio.create_subprocess_exec(sys.executable, "-c", _CLIENT, url,
                                                  str(path), str(args.requests), cold)
    await client.wait()
    profiler.disable()
    await runner.cleanup()
    print(f"{args.requests} requests of {len(body) // 1024} KB "
          f"({'broken' if args.broken else 'valid'}, {args.messages} messages, {cold})")
    return pstats.Stats(profiler)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--broken", action="store_true")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--cold", action="store_true", help="every body one never seen")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--sort", default="tottime")
    parser.add_argument("--only", default="", help="restrict to paths matching this regex")
    parser.add_argument("--save", default="", help="also write the raw stats to this file")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gateway-profile-"))
    upstream = start_script("upstream")
    try:
        stats = asyncio.run(profile(args, upstream.url, tmp))
    finally:
        upstream.stop()
    if args.save:
        stats.dump_stats(args.save)
    stats.sort_stats(args.sort)
    if args.only:
        stats.print_stats(args.only, args.top)
    else:
        stats.print_stats(args.top)


if __name__ == "__main__":
    main()
