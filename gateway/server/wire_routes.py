"""HTTP routes of the wires: ``POST /v1/responses``, ``POST /v1/messages`` and
``POST /v1/messages/count_tokens``.

Each handler is the wire's edge around the one chat Flow: parse and check the body, build
the neutral view, then either hand the Flow a native codec (the repaired wire body goes to
the upstream's own endpoint) or a translated chat request (and translate the answer back).
Repairs, the ladder and compaction are the Flow's, for every wire alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

from gateway.compaction.tokens import count_message_tokens, count_tools_tokens
from gateway.flow import ChatRequest, Flow
from gateway.projection import project
from gateway.providers.base import UpstreamCall, UpstreamError
from gateway.providers.prompt_cache import session_id_from
from gateway.router.request_fields import NO_OPTIONS, take_litellm_fields
from gateway.routing import ModelRoute
from gateway.server import relay
from gateway.server.compat import resolve_chat_model
from gateway.server.errors import ClientError, json_response
from gateway.server.http import read_body
from gateway.server.keys import CLIENT, REQUEST_ID, STATE, WIRE
from gateway.telemetry.repairs import repairs_header
from gateway.wires.anthropic_answer import AnthropicAnswer
from gateway.wires.anthropic_view import parse_messages, render_messages
from gateway.wires.chat_validation import (
    check_session_id,
    dumps_within_depth,
    parse_json_object,
    require_model,
)
from gateway.wires.codecs import AnthropicCodec, ResponsesCodec
from gateway.wires.errors import anthropic_error
from gateway.wires.native import (
    anthropic_sender,
    native_anthropic,
    native_responses,
    responses_sender,
)
from gateway.wires.relaying import NativeAnswer, TranslatedAnswer
from gateway.wires.responses_answer import ResponsesAnswer
from gateway.wires.responses_view import parse_input
from gateway.wires.to_chat import anthropic_to_chat, responses_to_chat
from gateway.wires.validation import validate_messages_body, validate_responses_body

Answer = AnthropicAnswer | ResponsesAnswer


async def _read(request: web.Request, wire: str) -> tuple[bytes, dict[str, Any], ModelRoute]:
    """The request of a model call on ``wire``: the bytes to forward natively (the client's
    own unless LiteLLM-only fields, never sent to a provider, were taken out), the body and
    its route (aliases and wildcards resolved)."""
    request[WIRE] = wire  # metrics and logs label the request by the client's API
    raw = await read_body(request, timeout=request.app[STATE].config.gateway.body_timeout)
    body = parse_json_object(raw)
    if take_litellm_fields(body) is not NO_OPTIONS:
        raw = orjson.dumps(body)
    return raw, body, _route(request, body)


def _route(request: web.Request, body: dict[str, Any]) -> ModelRoute:
    model = require_model(body)
    fleet = request.app[STATE].fleet
    assert fleet is not None
    return resolve_chat_model(fleet, model)  # aliases and wildcards included


def _chat_request(request: web.Request, body: dict[str, Any], raw: bytes,
                  messages: list[Any], route: ModelRoute, wire: Any = None) -> ChatRequest:
    session_id = session_id_from(request.headers, body)
    if session_id is not None:
        check_session_id(session_id)
    return ChatRequest(body=body, raw=raw, messages=messages, route=route,
                       stream=body.get("stream") is True, request_id=request[REQUEST_ID],
                       session_id=session_id, owner=request[CLIENT], wire=wire,
                       client_wire=request[WIRE])


async def _run(request: web.Request, chat: ChatRequest, anthropic: bool) -> Flow | web.Response:
    """Run the request's Flow; a give-up or refusal comes back in the wire's error shape."""
    driver = request.app[STATE].pipeline
    assert driver is not None
    flow = driver.new_flow(chat)
    await relay.run(request, flow)  # under the request span, like chat
    if flow.response is not None:
        return flow
    return relay.refusal(flow, NativeAnswer(anthropic))  # in the wire's error shape


async def _relay(request: web.Request, result: Flow, chat: ChatRequest,
                 anthropic: bool) -> web.StreamResponse:
    """A native answer, relayed as it comes (the wire's own objects and events) by the
    shared edge."""
    return await relay.answer(request, result, NativeAnswer(anthropic))


async def _translate(request: web.Request, result: Flow, chat: ChatRequest,
                     answer: Answer, final: Callable[[], dict[str, Any]],
                     anthropic: bool) -> web.StreamResponse:
    """A chat answer translated to the wire (an object, or its SSE events as they come) by
    the shared edge."""
    return await relay.answer(request, result, TranslatedAnswer(answer, final))


async def messages(request: web.Request) -> web.StreamResponse:
    """``POST /v1/messages``: the Anthropic Messages API, repaired like chat."""
    state = request.app[STATE]
    raw, body, route = await _read(request, "anthropic")
    view = parse_messages(validate_messages_body(body))
    if native_anthropic(route):
        sender = anthropic_sender(state.config, route, state.pool, request.headers)
        codec = AnthropicCodec(body, view, route.upstream_model, sender)
        chat = _chat_request(request, body, raw, view.messages, route, codec)
        return await _native(request, chat, anthropic=True)
    answer = AnthropicAnswer(route.name)
    return await _translated(request, anthropic_to_chat(body, view), route, answer,
                             lambda: answer.message, anthropic=True)


async def count_tokens(request: web.Request) -> web.StreamResponse:
    """``POST /v1/messages/count_tokens``: native for Anthropic models (the repaired
    history is counted), estimated with the gateway's tokenizer for the others."""
    state = request.app[STATE]
    body = parse_json_object(
        await read_body(request, timeout=state.config.gateway.body_timeout))
    route = _route(request, body)
    view = parse_messages(validate_messages_body(body))
    projection = project(view.messages) if state.config.repair.enabled else None
    headers = {"x-request-id": request[REQUEST_ID]}
    if projection is not None and projection.repaired:
        headers["x-gateway-repairs"] = repairs_header(projection.counts())
    if not native_anthropic(route):
        chat_body = anthropic_to_chat(body, view)
        if projection is not None:
            chat_body["messages"] = project(chat_body["messages"]).messages
        tokens = (count_message_tokens(chat_body["messages"], route.upstream_model)
                  + count_tools_tokens(chat_body, route.upstream_model))
        return json_response({"input_tokens": tokens}, headers=headers)
    out = dict(body)
    out["model"] = route.upstream_model
    if projection is not None:
        out["messages"] = render_messages(view, projection.messages)
    sender = anthropic_sender(state.config, route, state.pool, request.headers,
                              "/messages/count_tokens")
    try:
        answer = await sender.send(UpstreamCall(body=out, stream=False,
                                                request_id=request[REQUEST_ID]))
    except UpstreamError as err:
        failure = err.failure
        try:
            parsed = orjson.loads(failure.body) if failure.body else None
        except orjson.JSONDecodeError:
            parsed = None
        if not (isinstance(parsed, dict) and parsed.get("type") == "error"):
            parsed = anthropic_error(failure.status, failure.message, failure.type)
        return json_response(parsed, status=failure.status, headers=headers)
    data = b"".join([chunk async for chunk in answer.chunks()])
    await answer.aclose()
    return web.Response(body=data, status=answer.status, content_type="application/json",
                        headers=headers)


async def responses(request: web.Request) -> web.StreamResponse:
    """``POST /v1/responses``: the OpenAI Responses API, repaired like chat."""
    state = request.app[STATE]
    raw, body, route = await _read(request, "responses")
    items = validate_responses_body(body)
    stateful = isinstance(body.get("previous_response_id"), str)
    view = parse_input(items)
    if native_responses(route):
        sender = responses_sender(state.config, route, state.pool)
        codec = ResponsesCodec(body, view, route.upstream_model, sender, stateful)
        # With previous_response_id the history lives upstream: nothing to repair here.
        chat = _chat_request(request, body, raw, [] if stateful else view.messages, route,
                             codec)
        return await _native(request, chat, anthropic=False)
    if stateful:
        raise ClientError(400, f"previous_response_id is not supported for model "
                          f"'{route.name}': its upstream does not keep response state and the "
                          "gateway stores none, so it needs the full conversation in 'input' "
                          "(send every item again, without previous_response_id)",
                          param="previous_response_id", code="previous_response_not_supported")
    answer = ResponsesAnswer(route.name, body)
    return await _translated(request, responses_to_chat(body, view), route, answer,
                             lambda: answer.response, anthropic=False)


async def _native(request: web.Request, chat: ChatRequest, *,
                  anthropic: bool) -> web.StreamResponse:
    """Run a request whose upstream speaks the client's wire; relay its answer as it comes."""
    result = await _run(request, chat, anthropic)
    if isinstance(result, web.Response):
        return result
    return await _relay(request, result, chat, anthropic=anthropic)


async def _translated(request: web.Request, chat_body: dict[str, Any], route: ModelRoute,
                      answer: Answer, final: Callable[[], dict[str, Any]], *,
                      anthropic: bool) -> web.StreamResponse:
    """Run a request translated to Chat Completions; answer in the client's wire."""
    raw = dumps_within_depth(chat_body, "sent on as Chat Completions")
    chat = _chat_request(request, chat_body, raw, chat_body["messages"], route)
    result = await _run(request, chat, anthropic)
    if isinstance(result, web.Response):
        return result
    return await _translate(request, result, chat, answer, final, anthropic=anthropic)


def register(app: web.Application) -> None:
    """Attach the wire routes (also without the ``/v1`` prefix)."""
    for prefix in ("/v1", ""):
        app.router.add_post(f"{prefix}/responses", responses)
        app.router.add_post(f"{prefix}/messages", messages)
        app.router.add_post(f"{prefix}/messages/count_tokens", count_tokens)
