"""The keys under which the application and each request keep their state.

Apart from ``app`` so that route modules can read the state without importing the module
that registers them (no import cycle between ``app`` and ``routes``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from gateway.flow.flow import Flow
from gateway.sessions.responses_state import ResponseState

if TYPE_CHECKING:
    from gateway.server.app import GatewayState

STATE: web.AppKey[GatewayState] = web.AppKey("gateway_state")
REQUEST_ID = web.RequestKey("request_id", str)
CLIENT: web.RequestKey[str | None] = web.RequestKey("client_owner")
# When the edge began reading the request (``time.monotonic()``), and the request's Flow
# once it has one: read by the edge (server/edge.py) when the request is over.
RECEIVED = web.RequestKey("received", float)
WIRE = web.RequestKey("wire", str)  # the client-facing API of a model route ("chat")
FLOW = web.RequestKey("flow", Flow)
# The Responses answers the gateway keeps (``previous_response_id`` on every upstream, and
# the stored-response routes).
RESPONSE_STATE: web.AppKey[ResponseState] = web.AppKey("response_state", ResponseState)
