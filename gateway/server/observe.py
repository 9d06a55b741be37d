"""The outermost middleware: the HTTP facts of every request (method, path, status, time,
client) and, for a model request, its Flow, rendered when the request is over into metrics,
the access log and the inspector; quiet about clients that went away."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway.flow import render
from gateway.flow.flow import Flow
from gateway.server.auth import PRINCIPAL
from gateway.server.keys import CLIENT, FLOW, RECEIVED, REQUEST_ID, WIRE
from gateway.server.relay import end_request_span
from gateway.telemetry.hub import Telemetry
from gateway.telemetry.record import RequestRecord

log = logging.getLogger("gateway.telemetry")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def observe_middleware(telemetry: Telemetry) -> Any:
    """Build the middleware for this process's telemetry (an aiohttp middleware)."""
    in_flight = telemetry.metrics.in_flight

    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        received = time.monotonic()
        request[RECEIVED] = received
        started_at = time.time()
        status, disconnected = 0, False
        in_flight.inc()
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:  # redirects and the like
            status = exc.status
            raise
        except (asyncio.CancelledError, ConnectionResetError):
            status, disconnected = render.CLIENT_CLOSED, True
            raise
        finally:
            in_flight.dec()
            end_request_span(request)  # (a model request's span, once its answer is written)
            http = RequestRecord(request_id=request.get(REQUEST_ID, ""), method=request.method,
                                 path=request.path, wire=request.get(WIRE, ""),
                                 started_at=started_at, status=status,
                                 duration=time.monotonic() - received,
                                 disconnected=disconnected)
            owner = request.get(CLIENT)
            if owner:
                # Which key: two keys of one team are told apart (a rotation's progress).
                principal = request.get(PRINCIPAL)
                http.owner = owner
                http.client_key_id = (principal.key_id if principal is not None
                                      and principal.key_id else owner[:8])
                if principal is not None:
                    http.key_owner = principal.name
            # Rendered right after the answer is on its way, not before it.
            asyncio.get_running_loop().call_soon(_finish, telemetry, http, request.get(FLOW))

    return observe


def _finish(telemetry: Telemetry, http: RequestRecord, flow: Flow | None) -> None:
    """Render one finished request. Never raises: telemetry must not take the loop's
    callbacks down."""
    try:
        telemetry.finish(render.record(flow, http) if flow is not None else http)
    except Exception:
        log.exception("telemetry: could not record request %s", http.request_id)
