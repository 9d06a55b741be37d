"""Shared fixtures: a real gateway server on 127.0.0.1, built from a config dict."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The gateway imports litellm (and with it httpx) in a worker thread; the openai SDK reads
# sys.modules["httpx"] and fails on a module still half imported. Import it whole first.
import httpx  # noqa: F401
import pytest
from aiohttp import web
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.config import GatewayConfig, parse_config
from gateway.server.app import STATE, create_app
from gateway.server.http import GatewayRunner
from gateway.startup import prepare_environment

prepare_environment()  # what start-up does, before any test counts tokens or loads litellm


def free_port() -> int:
    """A loopback port for a server in another process (or for nothing to listen on).

    The OS picks it (port 0); one connection accepted and closed from the server side then
    leaves it in TIME_WAIT, so the OS hands it to no other ``bind(0)`` for a minute, while a
    server that binds it with SO_REUSEADDR (aiohttp, ``gateway serve``, redis-server) still
    can. In-process servers bind port 0 themselves (``serve_app``)."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = int(listener.getsockname()[1])
        with socket.create_connection(("127.0.0.1", port)):
            accepted, _ = listener.accept()
            accepted.close()  # the server side closes first: its port goes to TIME_WAIT
    return port


@dataclass
class RunningGateway:
    """A gateway serving on loopback."""

    base_url: str  # ends in /v1
    root: str
    app: web.Application
    config: GatewayConfig
    spans: InMemorySpanExporter


def model_entry(name: str, api_base: str, *, model: str | None = None,
                api_key: str = "upstream-secret-key", **model_info: Any) -> dict[str, Any]:
    """A LiteLLM-style model_list entry pointing at a local upstream."""
    entry: dict[str, Any] = {
        "model_name": name,
        "litellm_params": {"model": model or f"openai/{name}-upstream", "api_base": api_base,
                           "api_key": api_key},
    }
    if model_info:
        entry["model_info"] = model_info
    return entry


GatewayFactory = Callable[..., Awaitable[RunningGateway]]


async def serve_app(app: web.Application, *, header_timeout: float | None = None,
                    ) -> tuple[web.AppRunner, str]:
    """Serve an aiohttp app on a free loopback port: its runner and ``http://127.0.0.1:N``.

    With ``header_timeout`` the app is served as ``gateway serve`` serves the gateway (its
    own HTTP layer: envelope parse errors, header-read timeout)."""
    runner: web.AppRunner
    if header_timeout is None:
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    else:
        runner = GatewayRunner(app, handler_cancellation=True, access_log=None,
                               header_timeout=header_timeout)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()  # the OS picks the port: no race
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


async def serve_gateway(raw: dict[str, Any]) -> tuple[RunningGateway, web.AppRunner]:
    """A gateway from a config dict, recording its spans in memory."""
    config = parse_config(raw)
    spans = InMemorySpanExporter()
    app = create_app(config, span_processors=(SimpleSpanProcessor(spans),))
    runner, root = await serve_app(app, header_timeout=config.gateway.header_timeout)
    if (fleet := app[STATE].fleet) is not None:
        fleet.clock = minute_clock()
    return RunningGateway(f"{root}/v1", root, app, config, spans), runner


def minute_clock() -> Callable[[], float]:
    """A monotonic clock that starts a second into a minute: a test's per-process rpm/tpm
    counts (minutes of this clock) never see a minute turn within its first 59 seconds."""
    started = time.monotonic()
    return lambda: 3_600_001.0 + (time.monotonic() - started)


@pytest.fixture(params=["sqlite", "redis"])
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The ``sessions:`` section, once for each store: SQLite under tmp_path, then a real
    redis-server."""
    from tests.sessions.conftest import run_redis_server

    if request.param == "sqlite":
        yield {"data_dir": str(tmp_path / "data")}
        return
    with run_redis_server(tmp_path) as url:
        yield {"data_dir": str(tmp_path / "data"), "redis_url": url}


@pytest.fixture
async def gateway_factory(tmp_path: Any) -> AsyncIterator[GatewayFactory]:
    """Start gateways from config dicts; all are stopped at the end of the test."""
    runners: list[web.AppRunner] = []

    async def start(raw: dict[str, Any]) -> RunningGateway:
        raw = dict(raw)
        raw.setdefault("sessions", {"data_dir": str(tmp_path / "data")})
        gw, runner = await serve_gateway(raw)
        runners.append(runner)
        return gw

    yield start
    for runner in reversed(runners):
        await runner.cleanup()


def gateway_state(gw: RunningGateway) -> Any:
    """The running gateway's state object."""
    return gw.app[STATE]
