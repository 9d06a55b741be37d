"""Shared fixtures: a real gateway server on 127.0.0.1, built from a config dict."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.config import GatewayConfig, parse_config
from gateway.server.app import STATE, create_app
from gateway.startup import prepare_environment

prepare_environment()  # what start-up does, before any test counts tokens or loads litellm


def free_port() -> int:
    """An unused loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


async def serve_app(app: web.Application) -> tuple[web.AppRunner, str]:
    """Serve an aiohttp app on a free loopback port: its runner and ``http://127.0.0.1:N``."""
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def serve_gateway(raw: dict[str, Any]) -> tuple[RunningGateway, web.AppRunner]:
    """A gateway from a config dict, recording its spans in memory."""
    config = parse_config(raw)
    spans = InMemorySpanExporter()
    app = create_app(config, span_processors=(SimpleSpanProcessor(spans),))
    runner, root = await serve_app(app)
    return RunningGateway(f"{root}/v1", root, app, config, spans), runner


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
