"""HTTP routes: chat completions, models, health, the dry-run projection, session archives."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

from aiohttp import web

from gateway.pipeline import ChatRequest, PipelineFailure
from gateway.projection import project, project_strict
from gateway.providers.prompt_cache import session_id_from
from gateway.server.app import CLIENT, REQUEST_ID, STATE
from gateway.server.errors import ClientError, json_response
from gateway.server.http import read_body
from gateway.server.validation import parse_json_object, require_model, validate_chat_body

log = logging.getLogger("gateway.server")

MAX_SESSION_ID = 256
MAX_ARCHIVE_LINE = 1_000_000_000  # archive line numbers are bounded (SQLite integers)
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
               "X-Accel-Buffering": "no"}


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions``: project, forward, recover, relay."""
    state = request.app[STATE]
    raw = await read_body(request, timeout=state.config.gateway.body_timeout)
    body = parse_json_object(raw)
    model = require_model(body)
    route = state.routes.get(model)
    if route is None:
        raise ClientError(404, f"The model '{model}' does not exist or is not served by this "
                          "gateway; GET /v1/models lists the models", param="model",
                          code="model_not_found")
    messages = validate_chat_body(body)
    assert state.pipeline is not None
    session_id = session_id_from(request.headers, body)
    if session_id is not None:
        _check_session_id(session_id)
    chat = ChatRequest(
        body=body,
        raw=raw,
        messages=messages,
        route=route,
        stream=body.get("stream") is True,
        request_id=request[REQUEST_ID],
        session_id=session_id,
        owner=request[CLIENT],
    )
    try:
        result = await state.pipeline.run(chat)
    except PipelineFailure as failed:
        failed.headers["x-request-id"] = chat.request_id
        return json_response(failed.body, status=failed.status, headers=failed.headers)
    upstream = result.response
    headers = dict(upstream.relay_headers)
    headers.update(result.headers)
    headers["x-request-id"] = chat.request_id
    if not chat.stream or upstream.content_type.startswith("application/json"):
        try:
            body_bytes = b"".join([chunk async for chunk in upstream.chunks()])
        finally:
            await upstream.aclose()
        headers["Content-Type"] = upstream.content_type or "application/json"
        return web.Response(body=body_bytes, status=upstream.status, headers=headers)
    response = web.StreamResponse(status=upstream.status, headers={**SSE_HEADERS, **headers})
    try:
        await response.prepare(request)
        async for chunk in upstream.chunks():
            await response.write(chunk)
        await response.write_eof()
    except (ConnectionError, asyncio.CancelledError) as exc:
        transport = request.transport
        gone = transport is None or transport.is_closing()
        if gone:  # the client went away mid-stream: an everyday event, not a gateway error
            log.info("client disconnected mid-stream (request %s, model %s)",
                     chat.request_id, model)
        if isinstance(exc, asyncio.CancelledError) or not gone:
            raise
    finally:
        # Also when the client went away mid-stream: closing cancels the upstream request.
        await upstream.aclose()
    return response


def _check_session_id(session_id: str) -> None:
    if len(session_id) > MAX_SESSION_ID:
        raise ClientError(400, f"the session id (x-session-id or prompt_cache_key) must be at "
                          f"most {MAX_SESSION_ID} characters", param="x-session-id")
    if not session_id.isascii():
        try:
            session_id.encode("utf-8")
        except UnicodeEncodeError:  # header bytes that are not UTF-8 arrive as surrogates
            raise ClientError(400, "the session id (x-session-id or prompt_cache_key) must "
                              "be valid UTF-8", param="x-session-id") from None


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
    timeout = request.app[STATE].config.gateway.body_timeout
    body = parse_json_object(await read_body(request, timeout=timeout))
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
    session_id = request.match_info["session_id"]
    first = _line_number(request.query.get("from", "1"), "from")
    last = _line_number(request.query.get("to", str(min(first + 99, MAX_ARCHIVE_LINE))), "to")
    if last < first:
        raise ClientError(400, "need 1 <= from <= to", param="from")
    lines: list[dict[str, Any]] = await state.pipeline.read_archive(
        session_id, first, last, owner=request[CLIENT]
    )
    return json_response({"session_id": session_id, "from": first, "to": first + len(lines) - 1,
                          "messages": lines})


def _line_number(text: str, name: str) -> int:
    """A 1-based archive line number from the query: ASCII digits, 1..MAX_ARCHIVE_LINE."""
    if not (text.isascii() and text.isdigit() and len(text) <= 10):
        raise ClientError(400, f"'from' and 'to' must be integers from 1 to "
                          f"{MAX_ARCHIVE_LINE} (1-based line numbers); got {name}="
                          f"{text[:20]!r}", param=name)
    value = int(text)
    if not 1 <= value <= MAX_ARCHIVE_LINE:
        raise ClientError(400, f"'from' and 'to' must be integers from 1 to "
                          f"{MAX_ARCHIVE_LINE}; got {name}={value}", param=name)
    return value


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics``: counters in the Prometheus text format."""
    state = request.app[STATE]
    text = state.pipeline.metrics.render() if state.pipeline is not None else ""
    return web.Response(text=text, content_type="text/plain", charset="utf-8",
                        headers={"x-request-id": request[REQUEST_ID]})


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

