"""The one middleware every request passes: the edge.

In one frame, outermost first, it does what four middlewares used to (each a coroutine per
request, and a layer every suspension of a request resumes through):

- *observe*: the HTTP facts of every request (method, path, status, time, client) and, for a
  model request, its Flow, rendered into metrics, the access log and the inspector once the
  answer is on its way; quiet about clients that went away;
- *envelope*: a request id on every response, every error in the wire's envelope (OpenAI's,
  or Anthropic's on the Messages routes), never a traceback;
- *CORS preflights*, answered before authentication (browsers send them without
  credentials);
- *authentication and access rules* (:func:`gateway.server.auth.guard`), skipped when the
  config asks for none of them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway.flow import render
from gateway.flow.flow import Flow
from gateway.server.auth import PRINCIPAL, AuthState, guard
from gateway.server.compat import is_preflight, preflight
from gateway.server.errors import ClientError, wire_error_response
from gateway.server.keys import CLIENT, FLOW, RECEIVED, REQUEST_ID, WIRE
from gateway.server.relay import end_request_span
from gateway.telemetry.hub import Telemetry
from gateway.telemetry.record import RequestRecord

log = logging.getLogger("gateway.server")
telemetry_log = logging.getLogger("gateway.telemetry")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Request ids name a request in logs and traces and grant nothing: a generator seeded from the
# system's entropy (again in every forked worker) is enough, and a getrandom() system call per
# request is not (~2% of a never-seen body's CPU).
_request_ids = random.Random()
os.register_at_fork(after_in_child=_request_ids.seed)

_STATUS_MESSAGES = {
    404: "no route for {method} {path}",
    405: "method {method} is not allowed on {path}",
    413: "request body is larger than the gateway's limit",
}


def new_request_id() -> str:
    """A short unique id for ``x-request-id``."""
    return f"req_{_request_ids.getrandbits(96):024x}"


def edge_middleware(telemetry: Telemetry, auth: AuthState) -> Any:
    """Build the edge for this process's telemetry and auth settings (an aiohttp
    middleware)."""
    in_flight = telemetry.metrics.in_flight

    @web.middleware
    async def edge(request: web.Request, handler: Handler) -> web.StreamResponse:
        received = time.monotonic()
        request[RECEIVED] = received
        started_at = time.time()
        request_id = new_request_id()
        request[REQUEST_ID] = request_id
        status, disconnected = 0, False
        in_flight.inc()
        try:
            response: web.StreamResponse
            try:
                if is_preflight(request):
                    response = preflight(request)
                elif auth.checks_nothing:
                    request[PRINCIPAL] = None
                    request[CLIENT] = None
                    response = await handler(request)
                else:
                    response = await guard(request, handler, auth)
            except ClientError as err:
                if request.writer.output_size > 0:
                    raise  # (see below)
                response = wire_error_response(request.path, err,
                                               {"x-request-id": request_id})
                if getattr(request.protocol, "closes_after_response", False):
                    response.force_close()  # ("Connection: close": the body was not read)
            except web.HTTPException as exc:
                if exc.status < 400:
                    raise
                response = wire_error_response(request.path, _refusal(request, exc),
                                               {"x-request-id": request_id})
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("internal error handling %s %s (%s)", request.method,
                              request.path, request_id)
                if request.writer.output_size > 0:
                    # The answer had begun: a second response would be written inside it.
                    # The connection is closed instead (the relay ends its streams in the
                    # wire's shape).
                    raise
                failed = ClientError(500, f"internal gateway error (request {request_id})")
                response = wire_error_response(request.path, failed,
                                               {"x-request-id": request_id})
            if not response.prepared:
                response.headers["x-request-id"] = request_id
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
            http = RequestRecord(request_id=request_id, method=request.method,
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

    return edge


def _refusal(request: web.Request, exc: web.HTTPException) -> ClientError:
    """An aiohttp HTTP error (no route, a method not allowed, a body past the limit) as the
    gateway's own refusal."""
    template = _STATUS_MESSAGES.get(exc.status)
    message = (template.format(method=request.method, path=request.path) if template
               else exc.reason)
    code = "request_too_large" if exc.status == 413 else None
    return ClientError(exc.status, message, code=code)


def _finish(telemetry: Telemetry, http: RequestRecord, flow: Flow | None) -> None:
    """Render one finished request. Never raises: telemetry must not take the loop's
    callbacks down."""
    try:
        telemetry.finish(render.record(flow, http) if flow is not None else http)
    except Exception:
        telemetry_log.exception("telemetry: could not record request %s", http.request_id)
