"""The aiohttp application: state, the edge middleware, lifecycle."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from gateway.config import GatewayConfig
from gateway.flow.driver import Driver
from gateway.providers.openai_compat import HttpPool
from gateway.redact import install_log_redaction, register_secrets
from gateway.router.fleet import Fleet
from gateway.routing import ModelRoute, needs_litellm
from gateway.server.auth import AUTH, AuthState, close_auth
from gateway.server.kept_slots import KeptSlots
from gateway.server.keys import CLIENT, REQUEST_ID, STATE
from gateway.server.memory import MemoryTrimmer, start_memory_trim
from gateway.server.seen import SeenBodies
from gateway.server.seen_native import MESSAGES, RESPONSES, SeenNative
from gateway.sessions.retention import start_retention
from gateway.startup import prepare_environment
from gateway.telemetry.hub import Telemetry
from gateway.telemetry.setup import build_tracer_provider, effective_exporter, tracer_from
from gateway.wires.native import Senders
from gateway.wires.refused import RefusedSecrets

log = logging.getLogger("gateway.server")


@dataclass
class GatewayState:
    """Everything a request handler needs, built once at start-up."""

    config: GatewayConfig
    tracer_provider: TracerProvider
    telemetry: Telemetry
    pool: HttpPool = field(default_factory=HttpPool)
    routes: dict[str, ModelRoute] = field(default_factory=dict)
    fleet: Fleet | None = None  # every deployment of every model group
    driver: Driver | None = None  # runs every request's Flow
    exporting: bool = False
    background: set[asyncio.Task[Any]] = field(default_factory=set)
    seen: SeenBodies = field(default_factory=lambda: SeenBodies(0))  # bodies read lately
    # Messages and Responses bodies read lately (plain ones, for the turns extending them).
    messages_turns: SeenNative = field(
        default_factory=lambda: SeenNative(KeptSlots(0), MESSAGES))
    responses_turns: SeenNative = field(
        default_factory=lambda: SeenNative(KeptSlots(0), RESPONSES))
    # Thinking and encrypted reasoning each upstream model refused lately (left out of the
    # later turns of their sessions).
    refused: RefusedSecrets = field(default_factory=RefusedSecrets)
    # Models whose upstream answered 404 at /responses (a chat-only server behind an
    # ``openai/`` model): their Responses requests are translated to Chat Completions.
    no_responses_endpoint: set[str] = field(default_factory=set)
    trimmer: MemoryTrimmer | None = None  # returns freed memory to the system
    senders: Senders = field(init=False)  # the native wires' senders, built once each

    def __post_init__(self) -> None:
        self.senders = Senders(self.config, self.pool)


__all__ = ["CLIENT", "REQUEST_ID", "STATE", "GatewayState", "create_app"]


async def _lifecycle(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE]
    state.fleet = fleet = await asyncio.to_thread(Fleet, state.config, state.pool)
    state.routes = {name: routes[0] for name, routes in fleet.groups.items()}
    state.telemetry.metrics.declare_deployments(
        (route.name, route.litellm_model) for routes in fleet.groups.values()
        for route in routes)
    tracer = tracer_from(state.tracer_provider, exporting=state.exporting)
    state.driver = Driver(state.config, state.routes, tracer, state.pool,
                          state.telemetry.metrics)
    state.driver.fleet = fleet
    fleet.on_circuit = lambda route, circuit: state.telemetry.metrics.set_circuit_state(
        route.name, route.litellm_model, circuit)
    await state.driver.start()
    await state.telemetry.start()
    app[AUTH].metrics = state.driver.metrics
    state.driver.owner_names = app[AUTH].keyring.owner_names()
    sweeper = start_retention(state.config)
    state.trimmer = trimmer = start_memory_trim(state.config.gateway.memory_trim_seconds)
    if needs_litellm(state.config):
        from gateway.providers.litellm_loader import load_litellm

        task = asyncio.create_task(load_litellm())  # warm up off the event loop
        state.background.add(task)
        task.add_done_callback(state.background.discard)
    yield
    # Every step of closing is bounded: a store or exporter that does not answer must not
    # keep the process (or a replica's restart) waiting.
    await _closing(state.telemetry.close(), "telemetry")
    if trimmer is not None:
        await _closing(trimmer.close(), "memory trimmer")
    if sweeper is not None:
        await _closing(sweeper.close(), "retention sweeper")
    await _closing(state.driver.close(), "session stores")
    await _closing(fleet.close(), "router")
    for task in list(state.background):
        task.cancel()
    await _closing(state.pool.close(), "upstream pool")
    from gateway.providers.litellm_loader import close_litellm_clients

    await _closing(close_litellm_clients(), "litellm clients")
    # Flushing spans does blocking HTTP in the exporter: keep it off the event loop.
    await _closing(asyncio.to_thread(state.tracer_provider.shutdown), "span exporter")


CLOSE_SECONDS = 10.0  # the most one step of closing the app may take


async def _closing(step: Awaitable[Any], what: str) -> None:
    """Await one step of closing the app, for at most CLOSE_SECONDS."""
    try:
        await asyncio.wait_for(step, CLOSE_SECONDS)
    except TimeoutError:
        log.warning("closing the %s took more than %gs: left behind", what, CLOSE_SECONDS)


def create_app(
    config: GatewayConfig,
    *,
    span_processors: tuple[SpanProcessor, ...] = (),
) -> web.Application:
    """Build the gateway application for a validated config."""
    from gateway.server import routes

    prepare_environment(config)
    register_secrets(config.secrets())  # client, master and upstream keys, env secrets
    install_log_redaction()
    provider = build_tracer_provider(config.gateway.telemetry, span_processors)
    budget = int(config.gateway.history_cache_mb * 1024 * 1024)
    kept = KeptSlots(budget)  # every wire's kept bodies, within the one budget
    state = GatewayState(
        config=config,
        tracer_provider=provider,
        telemetry=Telemetry(config),
        exporting=effective_exporter(config.gateway.telemetry) != "none"
        or bool(span_processors),
        seen=SeenBodies(budget, kept),
        messages_turns=SeenNative(kept, MESSAGES),
        responses_turns=SeenNative(kept, RESPONSES),
    )
    from gateway.server.compat import on_prepare_headers
    from gateway.server.edge import edge_middleware

    auth = AuthState.from_config(config)
    app = web.Application(middlewares=[edge_middleware(state.telemetry, auth)],
                          client_max_size=config.gateway.max_body_bytes)
    app[STATE] = state
    app[AUTH] = auth
    app.on_cleanup.append(close_auth)
    app.cleanup_ctx.append(_lifecycle)
    app.on_response_prepare.append(on_prepare_headers)
    routes.register(app)
    return app
