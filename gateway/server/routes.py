"""HTTP routes: chat completions, models, health, the dry-run projection, session archives."""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.flow import ChatRequest, render
from gateway.projection.anomalies import LONE_SURROGATE_REPLACED, Anomaly, Message
from gateway.projection.lazy_messages import dumps_request
from gateway.providers.litellm_loader import loaded_litellm
from gateway.providers.prompt_cache import session_id_from
from gateway.providers.splice import exact_integers
from gateway.server import relay
from gateway.server.auth import not_readable, session_reader
from gateway.server.compat import request_options, resolve_chat_model
from gateway.server.errors import ClientError, error_response, json_response
from gateway.server.http import read_body
from gateway.server.keys import CLIENT, REQUEST_ID, STATE, WIRE
from gateway.server.offload import INLINE_BYTES, off_loop
from gateway.sessions.errors import StoreUnavailable
from gateway.telemetry.metrics import multiprocess_dir
from gateway.wires.chat_typed import read_clean_chat
from gateway.wires.chat_validation import (
    check_chat_body_fields,
    check_session_id,
    parse_json_object,
    read_chat_body,
    read_json_object,
    require_model,
    validate_chat_body,
)
from gateway.wires.chat_values import repaired_chat_values
from gateway.wires.relaying import ChatAnswer

log = logging.getLogger("gateway.server")

MAX_ARCHIVE_LINE = 1_000_000_000  # archive line numbers are bounded (SQLite integers)
CHAT_ANSWER = ChatAnswer()  # chat answers are relayed as they come


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/chat/completions``: project, forward, recover, relay."""
    state = request.app[STATE]
    request[WIRE] = render.WIRE  # a model request, also when it is refused before its Flow
    sent = raw = await read_body(request, timeout=state.config.gateway.body_timeout)
    owner = request[CLIENT]
    # An agent's next turn: parsed over the body it sent before, when it extends one.
    reading = state.seen.read(raw, owner)
    state.telemetry.metrics.history_read(reading is not None)
    # A big body that is not a known session's next turn is parsed and checked off the loop.
    fresh = 0 if reading is not None else len(raw)
    count = state.config.gateway.telemetry.context_report
    clean = None
    if reading is not None:
        body = reading.body
    else:
        # A new body that needs nothing done is read without building its messages (they
        # are parsed if something reads them); any other is parsed whole.
        clean = await off_loop(fresh, read_clean_chat, raw, count=count, shared_tools=(
            state.seen.shared_tools if fresh <= INLINE_BYTES else None))
        if clean is not None:
            body = clean.body
        else:
            body, raw = await off_loop(fresh, read_json_object, raw)
    # Half an emoji written as U+FFFD (then the body is not kept: its bytes are not sent).
    read_anomalies: tuple[Anomaly, ...] = (
        (Anomaly(LONE_SURROGATE_REPLACED, None),) if raw is not sent else ())
    # Azure-style paths name the deployment in the URL; the body's model is then optional.
    model = request.match_info.get("deployment") or require_model(body)
    assert state.fleet is not None
    route = resolve_chat_model(state.fleet, model)
    options, raw = request_options(request, body, raw)
    try:
        # A turn read over a kept body with the same later fields (the usual agent turn) has
        # them validated already: they are that body's very objects.
        # (With the context report on, what it reads is counted in the same pass.)
        messages: list[Message]
        if clean is not None:
            check_chat_body_fields(body, tools_checked=clean.tools_shared)
            messages, counted = clean.messages, clean.counted
        else:
            messages, counted = await off_loop(
                fresh, read_chat_body, body, checked=reading.checked if reading else 0,
                fields_checked=reading is not None and reading.fields is reading.seen.fields,
                count=count, added=reading.added if reading else None)
    except ClientError:
        # Tool values sent as JSON objects and content parts without their type are
        # repaired up front (then the body is checked whole, and not kept: its bytes are
        # no longer what is sent).
        repaired = repaired_chat_values(body)
        if repaired is None:
            raise
        body, repairs = repaired
        read_anomalies = (*read_anomalies, *repairs)
        raw = exact_integers(raw, dumps_request(body))
        messages, counted, clean = await off_loop(len(raw), validate_chat_body, body), None, None
    if read_anomalies:
        known = None
    elif clean is not None:
        known = state.seen.learn_clean(sent, owner, clean)
    else:
        known = state.seen.learn(sent, owner, body, messages, reading, counted)
    assert state.driver is not None
    session_id = session_id_from(request.headers, body)
    if session_id is not None:
        check_session_id(session_id)
    chat = ChatRequest(
        body=body,
        raw=raw,
        messages=messages,
        route=route,
        stream=body.get("stream") is True,
        request_id=request[REQUEST_ID],
        session_id=session_id,
        owner=owner,
        options=options,
        known=known,
        read_anomalies=read_anomalies,
    )
    flow = state.driver.new_flow(chat)
    # From here the Flow holds the request: a stream may stay open for minutes, so this
    # frame keeps no reference that would outlive Flow.release_bodies().
    del body, raw, sent, messages, chat, reading, counted, clean
    return await relay.serve(request, flow, CHAT_ANSWER)


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: 200 while serving."""
    state = request.app[STATE]
    return json_response({"status": "ok", "models": len(state.routes),
                          "litellm_loaded": loaded_litellm() is not None})


async def dry_run_project(request: web.Request) -> web.Response:
    """``POST /v1/gateway/project[?strict=true][&wire=chat|responses|anthropic]``: the
    projection, without any upstream (the wire is detected from the body when not given)."""
    timeout = request.app[STATE].config.gateway.body_timeout
    body = parse_json_object(await read_body(request, timeout=timeout))
    strict = request.query.get("strict", "").lower() in ("1", "true", "yes")
    from gateway.wires.dryrun import choose_wire, dry_run

    wire = choose_wire(request.query.get("wire"), body)
    return json_response(dry_run(body, wire, strict))


async def session_archive(request: web.Request) -> web.Response:
    """``GET /v1/gateway/sessions/{id}/archive?from=N&to=M``: messages a compaction removed."""
    state = request.app[STATE]
    assert state.driver is not None
    principal = session_reader(request)
    session_id = request.match_info["session_id"]
    first = _line_number(request.query.get("from", "1"), "from")
    last = _line_number(request.query.get("to", str(min(first + 99, MAX_ARCHIVE_LINE))), "to")
    if last < first:
        raise ClientError(400, "need 1 <= from <= to", param="from")
    try:
        lines: list[dict[str, Any]] | None = await state.driver.read_archive(
            session_id, first, last, owners=principal.owner_ids
        )
    except StoreUnavailable as down:  # a passing outage: the client may retry shortly
        retry = max(1, math.ceil(down.retry_after))
        return error_response(
            ClientError(503, "The session store is unavailable right now; the archive can "
                        f"be read again when it returns (retry in {retry}s).",
                        code="session_store_unavailable"), headers={"Retry-After": str(retry)})
    if lines is None:
        raise not_readable(session_id)
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
    app.router.add_get("/healthz", healthz)
    relay.install(app)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/gateway/project", dry_run_project)
    app.router.add_get("/v1/gateway/sessions/{session_id}/archive", session_archive)
    from gateway.server.compat import register_compat

    register_compat(app, chat_completions)
    from gateway.server.wire_routes import register as register_wires

    register_wires(app)
    if app[STATE].config.gateway.ui:
        from gateway.server import ui

        ui.register(app)

