"""The one edge every model route answers through (chat, Responses, Anthropic Messages).

:func:`serve` runs a request's Flow under the request span (joined to the client's
``traceparent``) and relays its answer: whole, or a stream chunk by chunk with its usage
counted, ``gateway_open_streams`` kept, and a client that went away noted. A wire plugs in
only what is its own (:class:`gateway.wires.relaying.WireAnswer`): its chunk
transformation (native passthrough, or chat translated to the wire) and its error shape.
So a request's telemetry is the same whatever its wire.

A stream, once started, always ends with the wire's own terminal event: its end, or its
error event when the upstream breaks off, sends what cannot be relayed, a translation
fails, or the server shuts down (:class:`Draining`: at the end of ``shutdown_grace``; a
request still waiting for its upstream then gets a ``503`` in its wire's shape).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

from aiohttp import web
from opentelemetry.trace import Span

from gateway.errors import error_body
from gateway.flow import Flow, Refusal, render
from gateway.providers.base import UpstreamResponse
from gateway.providers.openai_compat import END_GRACE, BufferedResponse
from gateway.redact import redact_bytes
from gateway.server.errors import json_response
from gateway.server.keys import FLOW, RECEIVED, STATE
from gateway.telemetry.genai import finish_request_span, start_request_span
from gateway.telemetry.prefix import PromptHead
from gateway.telemetry.usage import StreamUsage, answer_usage
from gateway.wires.relaying import StreamShape, WireAnswer

log = logging.getLogger("gateway.server")

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no"}
# Seconds past ``shutdown_grace`` that streams get to write their terminal event before
# the server cancels what is still running.
DRAIN_MARGIN = 2.0
SHUTTING_DOWN = "the gateway is shutting down; send the request again"


class Draining:
    """The requests of this process still waiting for their upstream or relaying a stream;
    :meth:`end_all` (a shutdown) ends each: a ``503``, or the stream's terminal error event."""

    def __init__(self) -> None:
        self._scopes: set[asyncio.Timeout] = set()
        self.closing = False

    def add(self, scope: asyncio.Timeout) -> None:
        """Track one request's scope (ended at once when the server is already closing)."""
        if self.closing:
            scope.reschedule(asyncio.get_running_loop().time())
        self._scopes.add(scope)

    def discard(self, scope: asyncio.Timeout) -> None:
        """The wait (or the stream) is over."""
        self._scopes.discard(scope)

    def end_all(self) -> None:
        """End every wait and stream now, and every one that starts from now on."""
        self.closing = True
        now = asyncio.get_running_loop().time()
        for scope in list(self._scopes):
            scope.reschedule(now)

    def __len__(self) -> int:
        return len(self._scopes)


DRAINING = web.AppKey("draining", Draining)


async def _end_streams_after_grace(app: web.Application) -> None:
    """On shutdown: streams still open when ``shutdown_grace`` is over get their terminal
    error event, requests still waiting a 503 (the server cancels what is left
    ``DRAIN_MARGIN`` seconds later)."""
    grace = app[STATE].config.gateway.shutdown_grace
    asyncio.get_running_loop().call_later(grace, app[DRAINING].end_all)


def install(app: web.Application) -> None:
    """Give the app its registry of waits and streams, ended on shutdown."""
    app[DRAINING] = Draining()
    app.on_shutdown.append(_end_streams_after_grace)


SPAN = web.RequestKey("request_span", Span)


def request_span(request: web.Request) -> Span:
    """The request's span (``gateway.chat``, joined to the client's trace), started when
    its first Flow runs; it lives until the request is over (:func:`end_request_span`)."""
    span = request.get(SPAN)
    if span is None:
        driver = request.app[STATE].driver
        assert driver is not None
        span = request[SPAN] = start_request_span(driver.tracer, request.headers)
    return span


def end_request_span(request: web.Request) -> None:
    """End the request's span, if a Flow ran, with what its (last) Flow saw: usage and
    response model (streams included), status, a client that went away. Called by the
    edge (``edge.py``) when the answer is written (or the client left)."""
    span = request.get(SPAN)
    if span is None:
        return
    flow = request.get(FLOW)
    if flow is None:
        span.end()
        return
    if flow.relayed is None:
        flow.relayed = time.monotonic()
    # No attributes built for a span nobody records (no exporter configured).
    finish_request_span(span, render.span_answered(flow) if span.is_recording() else {},
                        flow.status, True, render.error_message(flow))


async def run(request: web.Request, flow: Flow) -> Flow:
    """Run ``flow`` under the request span; it is the request's Flow from now on (metrics,
    access log, inspector and the span render it when the request is over)."""
    driver = request.app[STATE].driver
    assert driver is not None
    flow.received = request.get(RECEIVED)
    request[FLOW] = flow
    draining = request.app[DRAINING]
    try:
        async with asyncio.timeout(None) as scope:  # ended early by a shutdown
            draining.add(scope)
            try:
                await driver.run(flow, request_span(request))
            finally:
                draining.discard(scope)
    except TimeoutError:
        if not (draining.closing and scope.expired()):
            raise
        if flow.response is not None:  # (an answer that will not be relayed now)
            await flow.response.aclose()
            flow.response = None
        flow.refusal = Refusal(503, SHUTTING_DOWN, code="shutting_down",
                               reason="shutdown: the server stopped before an answer came")
    return flow


async def serve(request: web.Request, flow: Flow, wire: WireAnswer) -> web.StreamResponse:
    """Run ``flow`` and answer in the client's wire (``wire``)."""
    await run(request, flow)
    return await answer(request, flow, wire)


def refusal(flow: Flow, wire: WireAnswer) -> web.Response:
    """The ladder's give-up (or the gateway's refusal) of ``flow`` in the wire's shape."""
    headers = render.headers(flow)
    headers["x-request-id"] = flow.request.request_id
    return json_response(wire.error(flow.status, render.error(flow)), status=flow.status,
                         headers=headers)


async def answer(request: web.Request, flow: Flow, wire: WireAnswer) -> web.StreamResponse:
    """Relay the answer (or the ladder's give-up) to the client, noting in the Flow what the
    relay saw: usage, the model that answered, when it ended, a client that went away."""
    chat = flow.request
    upstream = flow.response
    if upstream is None:
        return refusal(flow, wire)
    headers = dict(upstream.relay_headers)
    headers.update(render.headers(flow))
    headers["x-request-id"] = chat.request_id
    state = request.app[STATE]
    telemetry = state.telemetry
    if state.config.gateway.telemetry.context_report:
        # Compared with the session's last turn while the parsed request is still held.
        changed = flow.compaction is not None or (
            flow.projection is not None and flow.projection.repaired)
        flow.prefix = telemetry.prefix.observe(  # (unchanged by the gateway: as the client's)
            chat.session_key(), PromptHead.of(chat.body), chat.messages,
            flow.sent if changed else None, chat.edge_turn,
            chat.laid_over(flow.sent) if changed else None)
    if telemetry.capturer is None and flow.recall is None:
        # Neither the inspector nor a recall answered mid-stream needs the parsed request.
        flow.release_bodies()
    shape = (wire.stream(upstream.content_type.startswith("text/event-stream"))
             if chat.stream else None)
    if shape is None:
        return await _whole(flow, upstream, wire, headers)
    return await _stream(request, flow, upstream, shape, headers)


async def _whole(flow: Flow, upstream: UpstreamResponse, wire: WireAnswer,
                 headers: dict[str, str]) -> web.Response:
    """A whole answer: read, counted, given to the wire (a 502 in its shape when the wire
    cannot use it)."""
    buffered = upstream if isinstance(upstream, BufferedResponse) else None
    try:
        body = (buffered.body if buffered is not None
                else b"".join([chunk async for chunk in upstream.chunks()]))
    finally:
        await upstream.aclose()
        flow.relayed = time.monotonic()
    usage, flow.response_model = answer_usage(
        body, buffered.parsed if buffered is not None else None)
    if usage is not None:
        flow.input_tokens, flow.output_tokens = usage.input_tokens, usage.output_tokens
        flow.cache = usage
    try:
        data, content_type = wire.whole(body, upstream.content_type or "application/json")
    except Exception as exc:  # an answer the wire cannot be given: the upstream's fault
        model = flow.route.name
        log.warning("the answer of model %s could not be given to the client (request %s): "
                    "%s", model, flow.request.request_id, exc, exc_info=True)
        message = f"the upstream of model {model!r} sent an answer the gateway cannot use"
        return json_response(wire.error(502, error_body(message, status=502)), status=502,
                             headers=headers)
    headers["Content-Type"] = content_type
    # As a stream's events are: an answer quoting a configured secret (a proxy's "no credit
    # left for key ...") has it masked.
    return web.Response(body=redact_bytes(data), status=upstream.status, headers=headers)


async def _stream(request: web.Request, flow: Flow, upstream: UpstreamResponse,
                  shape: StreamShape, headers: dict[str, str]) -> web.StreamResponse:
    """A stream, relayed chunk by chunk through the wire's shape, always ending with the
    wire's terminal event and a closed chunked body (unless the client left)."""
    chat = flow.request
    model = chat.route.name
    response = web.StreamResponse(status=upstream.status, headers={**SSE_HEADERS, **headers})
    scan = StreamUsage()
    metrics = request.app[STATE].telemetry.metrics
    metrics.stream_opened(model)
    try:
        await response.prepare(request)
        tail = await _pump(request, response, upstream, shape, scan, flow)
        if tail:
            await _write(request, response, b"".join(tail))
        await response.write_eof()
    except (ConnectionError, asyncio.CancelledError) as exc:
        transport = request.transport
        gone = transport is None or transport.is_closing()
        if gone:  # the client went away mid-stream: an everyday event, not a gateway error
            flow.disconnected = True
            log.info("client disconnected mid-stream (request %s, model %s)%s",
                     chat.request_id, model,
                     f": {exc}" if isinstance(exc, ClientStalled) else "")
        if isinstance(exc, asyncio.CancelledError) or not gone:
            raise
    finally:
        # Also when the client went away mid-stream: closing cancels the upstream request.
        await upstream.aclose()
        metrics.stream_closed(model)
        flow.relayed = time.monotonic()
        flow.input_tokens, flow.output_tokens = scan.usage.input_tokens, scan.usage.output_tokens
        flow.cache = scan.usage
        flow.response_model = scan.model
    return response


class ClientStalled(ConnectionResetError):
    """A streaming client that took nothing for ``gateway.timeouts.read`` seconds."""


async def _write(request: web.Request, response: web.StreamResponse, data: bytes) -> None:
    """Write to a streaming client, waiting at most ``gateway.timeouts.read`` seconds for it
    to take the bytes: a client that stopped reading (a suspended process, a stuck proxy)
    while keeping its connection open would otherwise hold the stream and its upstream
    connection forever. Such a client is hung up on, as one that left."""
    bound = request.app[STATE].config.gateway.timeouts.read
    try:
        async with asyncio.timeout(bound):
            await response.write(data)
    except TimeoutError:
        transport = request.transport
        if transport is not None:
            transport.abort()
        raise ClientStalled(f"it read nothing for {bound:g}s") from None


async def _rest(chunks: AsyncIterator[bytes]) -> None:
    """Read (not relay) what the upstream sends after the wire's end, so that a complete
    answer hands its connection back to the pool; an upstream that holds its body open (the
    client's stream ended on an error event, or on a translated end) is hung up on after
    ``END_GRACE`` seconds instead of holding the client's stream until the read timeout."""
    try:
        async with asyncio.timeout(END_GRACE):
            async for _ in chunks:
                pass
    except TimeoutError:
        pass


async def _pump(request: web.Request, response: web.StreamResponse,
                upstream: UpstreamResponse, shape: StreamShape, scan: StreamUsage,
                flow: Flow) -> list[bytes]:
    """Write the stream as it comes; what is left to write is returned: the wire's closing
    events, or its error event after a failure (or at shutdown)."""
    streams = request.app[DRAINING]
    chunks = upstream.chunks()
    try:
        async with asyncio.timeout(None) as scope:  # ended early by a shutdown
            streams.add(scope)
            try:
                async for chunk in chunks:
                    # Read on past the wire's end so that a complete upstream answer hands
                    # its connection back to the pool; data after the end is not relayed.
                    if shape.ended:
                        break
                    scan.feed(chunk)
                    out = shape.feed(chunk)
                    if out:
                        await _write(request, response,
                                     out[0] if len(out) == 1 else b"".join(out))
                    if shape.ended:
                        await _rest(chunks)
                        break
            finally:
                streams.discard(scope)
        return shape.finish()
    except (ConnectionError, asyncio.CancelledError):
        raise
    except Exception as exc:  # the stream still ends in the wire's shape
        if isinstance(exc, TimeoutError) and streams.closing:
            log.info("shutting down: the stream of model %s ends (request %s)",
                     flow.route.name, flow.request.request_id)
            return shape.failed(503, SHUTTING_DOWN)
        log.exception("the stream of model %s failed after its first byte (request %s)",
                      flow.route.name, flow.request.request_id)
        return shape.failed(502, f"the gateway could not relay the answer of model "
                            f"{flow.route.name!r}")
    finally:
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()
