"""Redis is loaded only when configured; its errors count as an unavailable store then."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from gateway.sessions.errors import store_errors

_SERVE_WITHOUT_REDIS = """
import asyncio, sys
from gateway.config import parse_config
from gateway.server.app import create_app
from gateway.server.http import GatewayRunner

async def main() -> None:
    config = parse_config({"model_list": [{"model_name": "m", "litellm_params": {
        "model": "openai/m", "api_base": "http://127.0.0.1:9/v1", "api_key": "k"}}],
        "sessions": {"data_dir": sys.argv[1]}})
    runner = GatewayRunner(create_app(config))
    await runner.setup()  # the app's start-up: store, fleet, telemetry
    await runner.cleanup()
    print("redis" in sys.modules)

asyncio.run(main())
"""


def test_a_gateway_without_redis_never_loads_the_client(tmp_path: object) -> None:
    out = subprocess.run([sys.executable, "-c", _SERVE_WITHOUT_REDIS, str(tmp_path)],
                         capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False", out.stderr[-2000:]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_an_unreachable_redis_is_an_unavailable_store() -> None:
    from gateway.sessions import RedisSessionStore

    store = RedisSessionStore(f"redis://127.0.0.1:{_closed_port()}/0")
    try:
        with pytest.raises(store_errors()) as caught:
            await store.has_records("s")
        assert caught.type.__module__.startswith(("redis", "builtins"))
    finally:
        await store.close()
