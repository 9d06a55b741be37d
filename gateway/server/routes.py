"""HTTP routes: chat completions, models, health, the dry-run projection, session archives."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from aiohttp import web
from opentelemetry import trace
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.pipeline import ChatRequest, PipelineFailure
from gateway.projection import project, project_strict
from gateway.providers.prompt_cache import session_id_from
from gateway.server.app import CLIENT, REQUEST_ID, STATE
from gateway.server.auth import not_readable, session_reader
from gateway.server.errors import ClientError, json_response
from gateway.server.observe import RECORD
from gateway.server.validation import parse_json_object, require_model, validate_chat_body
from gateway.telemetry.genai import (
    describe_request,
    finish_request_span,
    request_params,
    start_request_span,
)
from gateway.telemetry.metrics import multiprocess_dir
from gateway.telemetry.record import RequestRecord
from gateway.telemetry.usage import StreamUsage, response_model, usage_in

MAX_SESSION_ID = 256
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no"}


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions``: project, forward, recover, relay."""
    state = request.app[STATE]
    rec = request[RECORD]
    rec.wire = "chat"
    raw = await request.read()
    body = parse_json_object(raw)
    model = require_model(body)
    route = state.routes.get(model)
    if route is None:
        raise ClientError(404, f"The model '{model}' does not exist or is not served by this "
                          "gateway; GET /v1/models lists the models", param="model",
                          code="model_not_found")
    rec.model, rec.provider, rec.deployment = route.name, route.provider_name, route.litellm_model
    messages = validate_chat_body(body)
    assert state.pipeline is not None
    session_id = session_id_from(request.headers, body)
    if session_id is not None and len(session_id) > MAX_SESSION_ID:
        raise ClientError(400, f"the session id (x-session-id or prompt_cache_key) must be at "
                          f"most {MAX_SESSION_ID} characters", param="x-session-id")
    chat = ChatRequest(
        body=body,
        raw=raw,
        messages=messages,
        route=route,
        stream=body.get("stream") is True,
        request_id=request[REQUEST_ID],
        session_id=session_id,
        owner=request[CLIENT],
        record=rec,
    )
    rec.request_id, rec.stream, rec.session_id = chat.request_id, chat.stream, session_id
    rec.request_params = request_params(body)
    if state.telemetry.capturer is not None:
        rec.client_messages = messages
    span = start_request_span(state.pipeline.tracer, request.headers, rec)
    describe_request(span, rec)
    chat.span = span
    try:
        with trace.use_span(span, record_exception=False, set_status_on_exception=False):
            return await _answer(request, chat, rec)
    finally:
        finish_request_span(span, rec)
        span.end()


async def _answer(request: web.Request, chat: ChatRequest, rec: RequestRecord
                  ) -> web.StreamResponse:
    """Run the pipeline and relay its answer (or the ladder's give-up) to the client."""
    state = request.app[STATE]
    assert state.pipeline is not None
    try:
        result = await state.pipeline.run(chat)
    except PipelineFailure as failed:
        failed.headers["x-request-id"] = chat.request_id
        rec.note_headers(failed.headers)
        rec.status = failed.status
        error = failed.body.get("error")
        rec.error = str(error.get("message", "")) if isinstance(error, dict) else ""
        return json_response(failed.body, status=failed.status, headers=failed.headers)
    upstream = result.response
    rec.note_headers(result.headers)
    rec.ttfb = rec.attempts[-1].seconds if rec.attempts else None
    rec.status = upstream.status
    headers = dict(upstream.relay_headers)
    headers.update(result.headers)
    headers["x-request-id"] = chat.request_id
    relay_start = time.perf_counter()
    if not chat.stream or upstream.content_type.startswith("application/json"):
        try:
            body_bytes = b"".join([chunk async for chunk in upstream.chunks()])
        finally:
            await upstream.aclose()
            rec.upstream_seconds += time.perf_counter() - relay_start
        usage, _ = usage_in(body_bytes)
        if usage is not None:
            rec.input_tokens, rec.output_tokens = usage.input_tokens, usage.output_tokens
        rec.response_model = response_model(body_bytes)
        headers["Content-Type"] = upstream.content_type or "application/json"
        return web.Response(body=body_bytes, status=upstream.status, headers=headers)
    response = web.StreamResponse(status=upstream.status, headers={**SSE_HEADERS, **headers})
    scan = StreamUsage()
    metrics = state.telemetry.metrics
    metrics.stream_opened(rec.model)
    try:
        await response.prepare(request)
        async for chunk in upstream.chunks():
            scan.feed(chunk)
            await response.write(chunk)
        await response.write_eof()
    except ConnectionResetError:
        rec.disconnected = True  # the client went away: nothing to answer, no traceback
    finally:
        # Also when the client went away mid-stream: closing cancels the upstream request.
        await upstream.aclose()
        metrics.stream_closed(rec.model)
        rec.upstream_seconds += time.perf_counter() - relay_start
        rec.input_tokens, rec.output_tokens = scan.usage.input_tokens, scan.usage.output_tokens
        rec.response_model = scan.model
    return response


async def list_models(request: web.Request) -> web.Response:
    """``GET /v1/models``: the configured model names with their capabilities."""
    state = request.app[STATE]
    data = []
    for route in state.routes.values():
        caps = route.capabilities
        data.append({
            "id": route.name,
            "object": "model",
            "created": 0,
            "owned_by": route.provider_name,
            "context_window": caps.context_window,
            "max_output_tokens": caps.max_output_tokens,
            "supports_images": caps.supports_images,
            "supports_tools": caps.supports_tools,
        })
    return json_response({"object": "list", "data": data})


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: 200 while serving."""
    state = request.app[STATE]
    return json_response({"status": "ok", "models": len(state.routes),
                          "litellm_loaded": "litellm" in sys.modules})


async def dry_run_project(request: web.Request) -> web.Response:
    """``POST /v1/gateway/project[?strict=true]``: the projection, without any upstream."""
    body = parse_json_object(await request.read())
    messages = validate_chat_body(body)
    strict = request.query.get("strict", "").lower() in ("1", "true", "yes")
    projection = project_strict(messages) if strict else project(messages)
    return json_response({
        "messages": projection.messages,
        "anomalies": [a.as_dict() for a in projection.anomalies],
        "strict": strict,
    })


async def session_archive(request: web.Request) -> web.Response:
    """``GET /v1/gateway/sessions/{id}/archive?from=N&to=M``: messages a compaction removed."""
    state = request.app[STATE]
    assert state.pipeline is not None
    principal = session_reader(request)
    session_id = request.match_info["session_id"]
    try:
        first = int(request.query.get("from", "1"))
        last = int(request.query.get("to", str(first + 99)))
    except ValueError:
        raise ClientError(400, "'from' and 'to' must be integers (1-based line numbers)",
                          param="from") from None
    if first < 1 or last < first:
        raise ClientError(400, "need 1 <= from <= to", param="from")
    lines: list[dict[str, Any]] | None = await state.pipeline.read_archive(
        session_id, first, last, owners=principal.owner_ids
    )
    if lines is None:
        raise not_readable(session_id)
    return json_response({"session_id": session_id, "from": first, "to": first + len(lines) - 1,
                          "messages": lines})


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: the Prometheus text format (every worker's values)."""
    state = request.app[STATE]
    body = await asyncio.to_thread(state.telemetry.metrics.render) if multiprocess_dir() else (
        state.telemetry.metrics.render())
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST,
                                            "x-request-id": request[REQUEST_ID]})


def register(app: web.Application) -> None:
    """Attach every route."""
    # Clients configured with a base URL without /v1 are served too.
    for prefix in ("/v1", ""):
        app.router.add_post(f"{prefix}/chat/completions", chat_completions)
        app.router.add_get(f"{prefix}/models", list_models)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/gateway/project", dry_run_project)
    app.router.add_get("/v1/gateway/sessions/{session_id}/archive", session_archive)
    if app[STATE].config.gateway.ui:
        from gateway.server import ui

        ui.register(app)

