"""The outermost middleware: one :class:`RequestRecord` per request, rendered when the
request ends (metrics, access log, inspector), and quiet about clients that went away."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway.telemetry.hub import Telemetry
from gateway.telemetry.record import RequestRecord

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
RECORD = web.RequestKey("gateway_record", RequestRecord)
CLIENT_CLOSED = 499  # nginx's code for "the client closed the connection first"


def observe_middleware(
    telemetry: Telemetry, request_id_key: web.RequestKey[str], client_key: Any
) -> Any:
    """Build the middleware (keys passed in to keep this module free of the app's imports)."""
    in_flight = telemetry.metrics.in_flight

    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        rec = RequestRecord(method=request.method, path=request.path)
        request[RECORD] = rec
        in_flight.inc()
        try:
            response = await handler(request)
            if not rec.status:
                rec.status = response.status
            return response
        except web.HTTPException as exc:  # redirects and the like
            rec.status = rec.status or exc.status
            raise
        except (asyncio.CancelledError, ConnectionResetError):
            rec.disconnected = True
            rec.status = rec.status or CLIENT_CLOSED
            raise
        finally:
            in_flight.dec()
            rec.duration = time.perf_counter() - rec.t0
            rec.request_id = request.get(request_id_key, rec.request_id)
            owner = request.get(client_key)
            if owner:
                rec.owner, rec.client_key_id = owner, owner[:8]
            # Rendered right after the answer is on its way, not before it.
            asyncio.get_running_loop().call_soon(telemetry.finish, rec)

    return observe
