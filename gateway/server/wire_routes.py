"""HTTP routes of the wires: ``POST /v1/responses``, ``POST /v1/messages`` and
``POST /v1/messages/count_tokens``.

Each handler is the wire's edge around the one chat Flow: parse and check the body, build
the neutral view, then either hand the Flow a native codec (the repaired wire body goes to
the upstream's own endpoint) or a translated chat request (and translate the answer back).
Repairs, the ladder and compaction are the Flow's, for every wire alike.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import orjson
from aiohttp import web

from gateway.compaction.session_view import KnownHistory
from gateway.compaction.tokens import count_message_tokens, count_tools_tokens
from gateway.flow import ChatRequest, Flow, render
from gateway.projection import project
from gateway.projection.anomalies import LONE_SURROGATE_REPLACED, Anomaly, Projection
from gateway.providers.base import Provider, UpstreamCall, UpstreamError
from gateway.providers.openai_compat import BufferedResponse
from gateway.providers.prompt_cache import session_id_from
from gateway.providers.splice import exact_integers
from gateway.recovery.classifier import Verdict, classify
from gateway.router.fleet import Fleet
from gateway.router.request_fields import (
    NO_OPTIONS,
    TAGS_HEADER,
    RequestOptions,
    take_litellm_fields,
)
from gateway.routing import ModelRoute, request_deadline
from gateway.server import relay, response_routes
from gateway.server.compat import request_options, resolve_chat_model
from gateway.server.errors import ClientError, json_response
from gateway.server.http import read_body
from gateway.server.keys import CLIENT, FLOW, REQUEST_ID, RESPONSE_STATE, STATE, WIRE
from gateway.server.offload import off_loop
from gateway.server.seen_native import SeenNative, TurnReading, answer_to, note_answer
from gateway.sessions.response_records import KeptResponse
from gateway.sessions.responses_state import (
    LOOKUP_DEADLINE_SHARE,
    Lookup,
    ResponseState,
    open_response_store,
)
from gateway.telemetry.context import count_messages
from gateway.telemetry.repairs import anomaly_counts, repairs_header
from gateway.wires.anthropic_answer import AnthropicAnswer
from gateway.wires.anthropic_deferred import DeferredAnthropicView
from gateway.wires.anthropic_typed import PlainMessages, read_plain_messages_typed
from gateway.wires.anthropic_view import AnthropicView
from gateway.wires.base import NativeSenders, WireView
from gateway.wires.chat_validation import (
    check_session_id,
    dumps_within_depth,
    read_json_object,
    require_model,
)
from gateway.wires.codecs import AnthropicCodec, ResponsesCodec, anthropic_body, compact_body
from gateway.wires.deferred import DeferredView
from gateway.wires.errors import anthropic_error
from gateway.wires.native import (
    native_anthropic,
    native_responses,
    responses_declared,
)
from gateway.wires.reading import (
    interleaved_thinking,
    no_message_left,
    nothing_left,
    read_messages,
    read_plain_messages,
    read_plain_responses,
    read_responses,
)
from gateway.wires.relaying import NativeAnswer, TranslatedAnswer
from gateway.wires.response_chain import (
    PREVIOUS_RESPONSE_EXPANDED,
    CapturedAnswer,
    expanded_body,
    finished,
    forgot_previous,
    held_upstream_overflow,
    previous_not_found,
    under_way,
)
from gateway.wires.responses_answer import ResponsesAnswer
from gateway.wires.responses_deferred import DeferredResponsesView
from gateway.wires.responses_rules import paired_continuation, without_held
from gateway.wires.responses_typed import PlainItems, read_plain_input_typed
from gateway.wires.shapes import check_messages_top, check_responses_fields
from gateway.wires.to_chat import (
    OPTIONAL_FIELDS,
    anthropic_positions,
    anthropic_to_chat,
    responses_positions,
    responses_to_chat,
)
from gateway.wires.validation import input_items

Answer = AnthropicAnswer | ResponsesAnswer

log = logging.getLogger("gateway.server")


# LiteLLM-only fields a native request sent (fallbacks, retries, timeout, routing tags).
OPTIONS = web.RequestKey("litellm_options", RequestOptions)
# What a Responses request's answer may be kept over: its history as read (the answer to
# the body it was read over) and the answer it continues (``previous_response_id``).
_KEPT_OVER: web.RequestKey[tuple[KnownHistory | None, KeptResponse | None]] = \
    web.RequestKey("kept_over")
# The bytes of the body a kept answer answers: its share of the response state's backlog.
_BODY_SIZE = web.RequestKey("kept_body_size", int)

async def _read(request: web.Request, wire: str
                ) -> tuple[bytes, dict[str, Any], ModelRoute, tuple[Anomaly, ...]]:
    """The request of a model call on ``wire``: the bytes to forward natively (the client's
    own unless LiteLLM-only fields, never sent to a provider, were taken out, or half an
    emoji was written as U+FFFD), the body, its route (aliases and wildcards resolved) and
    what reading it repaired."""
    request[WIRE] = wire  # metrics and logs label the request by the client's API
    sent = await read_body(request, timeout=request.app[STATE].config.gateway.body_timeout)
    return await _parsed(request, sent)


async def _parsed(request: web.Request, sent: bytes
                  ) -> tuple[bytes, dict[str, Any], ModelRoute, tuple[Anomaly, ...]]:
    """:func:`_read` of the bytes ``sent``."""
    body, raw = await off_loop(len(sent), read_json_object, sent)
    read = (Anomaly(LONE_SURROGATE_REPLACED, None),) if raw is not sent else ()
    options, raw = request_options(request, body, raw)
    if options is not NO_OPTIONS:
        request[OPTIONS] = options  # (the request's Flow honours them as on chat)
    return raw, body, _route(request, body), read


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
                       client_wire=request[WIRE], options=request.get(OPTIONS, NO_OPTIONS))


async def _run(request: web.Request, chat: ChatRequest, anthropic: bool,
               after: Flow | None = None) -> Flow | web.Response:
    """Run the request's Flow; a give-up or refusal comes back in the wire's error shape.
    ``after``: the Flow of the same request sent before (its deadline holds, its attempts
    are counted)."""
    driver = request.app[STATE].driver
    assert driver is not None
    flow = driver.new_flow(chat)
    if after is not None:
        flow.started, flow.deadline = after.started, after.deadline
        flow.attempts[:0] = after.attempts
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


async def _read_turn(request: web.Request, seen: SeenNative, wire: str,
                     typed: Callable[[bytes], PlainMessages | PlainItems | None],
                     ) -> tuple[TurnReading | PlainMessages | PlainItems | None, bytes, bytes,
                                dict[str, Any], ModelRoute, tuple[Anomaly, ...]]:
    """:func:`_read`, over the plain turn the client sent before when the body extends one
    (``seen_native``), else typed when ``typed`` reads it as plain: (that reading, or
    None when the body was read the general way, the bytes sent, the bytes to forward,
    the body, its route, what reading repaired)."""
    request[WIRE] = wire
    sent = await read_body(request, timeout=request.app[STATE].config.gateway.body_timeout)
    turn = seen.read(sent, request[CLIENT])
    request.app[STATE].telemetry.metrics.history_read(turn is not None)
    reading: TurnReading | PlainMessages | PlainItems | None = turn
    if turn is None:
        reading = await off_loop(len(sent), typed, sent)
    if reading is None:
        return None, sent, *await _parsed(request, sent)
    body = reading.body  # (a kept body's fields and what it added, or the fields read)
    options, raw = request_options(request, body, sent)
    if options is not NO_OPTIONS:
        request[OPTIONS] = options
    return reading, sent, raw, body, _route(request, body), ()


def _known(request: web.Request, seen: SeenNative, sent: bytes, raw: bytes,
           body: dict[str, Any], view: WireView, plain: Any, turn: TurnReading | None,
           span: tuple[int, int] | None = None, keep: bool = True) -> KnownHistory | None:
    """What the Flow may take as known of a plain body's history (None: not plain); the
    body is kept for the turns that extend it when it is sent as it came (then its every
    field is the body's) and ``keep`` does not say its history ends where no turn extends
    it. ``span``: where a body read typed holds its history."""
    if plain is None or view.anomalies:
        return None
    # (a history read whole is counted for the context report while its messages are hot;
    # one left unparsed, read typed or over such a one, was counted as it was read)
    counted = None
    if request.app[STATE].config.gateway.telemetry.context_report:
        if isinstance(view, DeferredView):
            counted = view.counted
        elif turn is None:
            counted = count_messages(view.messages)
    learned = seen.learn(sent, request[CLIENT], body, view, plain, turn,
                         keep=keep and raw is sent, span=span)
    return KnownHistory(learned.clean, 0, learned.fingerprint,  # (plain: no media parts)
                        invisible=learned.invisible, turn=learned.turn,
                        extends=turn.kept if turn is not None else None,
                        reused=turn.shared if turn is not None else 0,
                        counted=counted, written=learned.written)


async def messages(request: web.Request) -> web.StreamResponse:
    """``POST /v1/messages``: the Anthropic Messages API, repaired like chat. An agent's
    next turn is read over the plain turn it sent before (``seen_native``)."""
    state = request.app[STATE]
    reading, sent, raw, body, route, read = await _read_turn(
        request, state.messages_turns, "anthropic", read_plain_messages_typed)
    plain: Any
    view: AnthropicView
    turn = reading if isinstance(reading, TurnReading) else None
    if turn is not None:
        assert isinstance(turn.view, AnthropicView)
        view, plain = turn.view, turn.plain
    elif body.get("thread") is not None:
        return _unthreaded()
    elif isinstance(reading, PlainMessages):  # (a new plain body, its history unparsed)
        check_messages_top(body)
        view = DeferredAnthropicView(reading.messages,
                                     (reading.neutral, reading.counted, reading.lead))
        plain = reading.plain
    else:
        given = body.get("messages")
        body, view, plain = read_plain_messages(
            body, interleaved=interleaved_thinking(request.headers.get("anthropic-beta")))
        if (unsendable := no_message_left(given, view)) is not None:
            raise unsendable
    view.anomalies[:0] = read
    known = _known(request, state.messages_turns, sent, raw, body, view, plain, turn,
                   (reading.start, reading.close) if isinstance(reading, PlainMessages)
                   else None)
    if native_anthropic(route):
        senders, client_headers = state.senders, request.headers

        # (not the request itself: the request holds the Flow that holds this, and a cycle
        # would leave every request's objects to the cyclic collector)
        def sender_to(to: ModelRoute) -> Provider:
            return senders.anthropic(to, client_headers)

        codec = AnthropicCodec(body, view, route.upstream_model, sender_to(route),
                               senders=NativeSenders(native_anthropic, sender_to),
                               refused=state.refused, plain=plain is not None)
        chat = _chat_request(request, body, raw, view.messages, route, codec)
        chat.known = known
        return await _native_messages(request, chat)
    answer = AnthropicAnswer(route.name)
    return await _translated(request, anthropic_to_chat(body, view), route, answer,
                             lambda: answer.message, anthropic=True, read=view.anomalies,
                             sent=raw, positions=anthropic_positions(body, view))


def _unthreaded() -> web.Response:
    """The refusal of a message thread (history the provider holds between turns, beta
    ``message-threads``): the gateway repairs and retries whole histories, so it takes
    none. The code is the one the anthropic SDK's tool runner answers by sending the whole
    history without ``thread``."""
    error = anthropic_error(400, "message threads are not supported by this gateway: send "
                                 "the whole history without 'thread'")
    error["error"]["details"] = {"error_code": "thread_unsupported_request",
                                 "unsupported": ["thread"]}
    return json_response(error, status=400)


async def count_tokens(request: web.Request) -> web.StreamResponse:
    """``POST /v1/messages/count_tokens``: native for Anthropic models (the repaired
    history is counted), estimated with the gateway's tokenizer for the others.

    Bounded by the model's request deadline (``recovery.deadline``), the upstream's answer
    included: ``504`` in Anthropic's shape when it passes. A big body is parsed, repaired
    and counted off the event loop."""
    state = request.app[STATE]
    raw = await read_body(request, timeout=state.config.gateway.body_timeout)
    body, _ = await off_loop(len(raw), read_json_object, raw)
    # LiteLLM-only fields never reach the provider (the body is serialized again below);
    # the routing tags choose the deployment that counts, as they would the call's.
    tags = take_litellm_fields(body, request.headers.get(TAGS_HEADER, "")).tags
    route = _route(request, body)
    if state.fleet is not None:
        route = state.fleet.tagged_route(route, tags)
    assert state.driver is not None
    limit = state.driver.settings(route).policy.deadline
    deadline = time.monotonic() + limit
    interleaved = interleaved_thinking(request.headers.get("anthropic-beta"))
    repair = state.config.repair.enabled
    headers = {"x-request-id": request[REQUEST_ID]}

    def prepare(body: dict[str, Any]) -> tuple[int | None, bytes, str | None]:
        """The estimate (not native) or the body to send (native), and the repairs."""
        body, view = read_messages(body, interleaved=interleaved)
        projection = project(view.messages) if repair else None
        done = (*view.anomalies, *projection.anomalies) if projection is not None else ()
        if not native_anthropic(route):
            chat_body = anthropic_to_chat(body, view)
            if projection is not None:
                chat_body["messages"] = project(chat_body["messages"]).messages
            tokens = (count_message_tokens(chat_body["messages"], route.upstream_model)
                      + count_tools_tokens(chat_body, route.upstream_model))
            return tokens, b"", repairs_header(anomaly_counts(done)) if done else None
        out = dict(body)
        if projection is not None:
            # What /v1/messages sends: the wire's finishing rules too (tools declared,
            # thinking off, breakpoints), or the count is refused where the call is not.
            out, finished = anthropic_body(body, view, projection.messages)
            done += finished
        out["model"] = route.upstream_model
        return None, orjson.dumps(out), repairs_header(anomaly_counts(done)) if done else None

    try:
        async with asyncio.timeout(limit):
            tokens, out, repaired = await off_loop(len(raw), prepare, body)
            if repaired is not None:
                headers["x-gateway-repairs"] = repaired
            if tokens is not None:
                return json_response({"input_tokens": tokens}, headers=headers)
            sender = state.senders.anthropic(route, request.headers, "/messages/count_tokens")
            answer = await sender.send(UpstreamCall(body={}, raw=out, stream=False,
                                                    request_id=request[REQUEST_ID],
                                                    deadline=deadline))
            try:
                data = b"".join([chunk async for chunk in answer.chunks()])
            finally:
                await answer.aclose()
    except TimeoutError:
        message = (f"the request deadline of {limit:g}s passed before the tokens of model "
                   f"'{route.name}' were counted")
        return json_response(anthropic_error(504, message, "timeout_error"), status=504,
                             headers=headers)
    except UpstreamError as err:
        failure = err.failure
        try:
            parsed = orjson.loads(failure.body) if failure.body else None
        except orjson.JSONDecodeError:
            parsed = None
        if not (isinstance(parsed, dict) and parsed.get("type") == "error"):
            kind = failure.type or ("timeout_error" if failure.status == 504 else None)
            parsed = anthropic_error(failure.status, failure.message, kind)
        return json_response(parsed, status=failure.status, headers=headers)
    return web.Response(body=data, status=answer.status, content_type="application/json",
                        headers=headers)


async def responses_compact(request: web.Request) -> web.StreamResponse:
    """``POST /v1/responses/compact``: the Responses API's compaction of a conversation
    (Codex CLI's remote compaction, ``client.responses.compact``), forwarded as sent (the
    model mapped, a broken ``input`` repaired as for ``/responses``) to the model's
    Responses endpoint, within the model's request deadline.
    A model not served on the Responses API gets a ``400`` saying so."""
    state = request.app[STATE]
    raw, body, route, _ = await _read(request, "responses")
    if not native_responses(route):
        raise ClientError(400, f"model '{route.name}' is not served on the Responses API: "
                          "/responses/compact needs a model that is (the gateway compacts "
                          "other models' histories itself when they overflow)", param="model")
    assert state.driver is not None
    limit = state.driver.settings(route).policy.deadline
    sender = state.senders.responses(route, "/responses/compact")
    body, repaired = compact_body(body)
    out = exact_integers(raw, orjson.dumps({**body, "model": route.upstream_model}))
    headers = {"x-request-id": request[REQUEST_ID]}
    if repaired:
        headers["x-gateway-repairs"] = repairs_header(anomaly_counts(repaired))
    try:
        async with asyncio.timeout(limit):
            answer = await sender.send(UpstreamCall(
                body={}, raw=out, stream=False, request_id=request[REQUEST_ID],
                deadline=time.monotonic() + limit))
            try:
                data = b"".join([chunk async for chunk in answer.chunks()])
            finally:
                await answer.aclose()
    except TimeoutError:
        raise ClientError(504, f"the request deadline of {limit:g}s passed before model "
                          f"'{route.name}' compacted the conversation",
                          code="deadline_exceeded") from None
    except UpstreamError as err:
        failure = err.failure
        parsed = _json_or_none(failure.body) if failure.body else None
        if not (isinstance(parsed, dict) and isinstance(parsed.get("error"), dict)):
            raise ClientError(failure.status, failure.message) from None
        return json_response(parsed, status=failure.status, headers=headers)
    return web.Response(body=data, status=answer.status, content_type="application/json",
                        headers=headers)


async def responses(request: web.Request) -> web.StreamResponse:
    """``POST /v1/responses``: the OpenAI Responses API, repaired like chat. The answers are
    kept (unless ``store: false``) so that ``previous_response_id`` works on every upstream."""
    seen = request.app[STATE].responses_turns
    reading, received, raw, body, route, read = await _read_turn(
        request, seen, "responses", read_plain_input_typed)
    turn = reading if isinstance(reading, TurnReading) else None
    given = body.get("input")
    plain: Any
    view: WireView
    span = None
    if turn is not None:
        view, plain = turn.view, turn.plain
    elif isinstance(reading, PlainItems):  # (a new plain input, its items unparsed)
        check_responses_fields(body, items_read=True)
        view = DeferredResponsesView(reading.items, (reading.neutral, reading.counted,
                                                     reading.lead, reading.clean))
        plain = reading.plain
        span = (reading.start, reading.close)
    else:
        body, view, plain = read_plain_responses(body)
    if reading is None and (unsendable := nothing_left(given, body, view)) is not None:
        raise unsendable  # (a plain input read typed, or over a kept one, holds words)
    view.anomalies[:0] = read
    known = _known(request, seen, received, raw, body, view, plain, turn, span,
                   keep=not isinstance(reading, PlainItems) or reading.extensible)
    if body.get("store") is not False:  # (its answer is kept: wait while the writer is behind)
        request[_BODY_SIZE] = len(raw)
        await _room(request, route)
    previous = body.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise ClientError(400, "Invalid type for 'previous_response_id': expected a string.",
                          param="previous_response_id", code="invalid_type")
    found = await _previous(request, previous, route) if previous is not None else None
    request[_KEPT_OVER] = known, found.kept if found is not None else None
    state = request.app[STATE]
    if native_responses(route) and route.name not in state.no_responses_endpoint:
        response = await _native_responses(request, raw, body, view, route, found, known)
        if not _no_endpoint(request, route, body, found):
            return response
        # A chat-only server behind an ``openai/`` model: translated from now on (warned
        # once, however many first requests learnt it at the same time).
        if route.name not in state.no_responses_endpoint:
            state.no_responses_endpoint.add(route.name)
            log.warning("model %s: its upstream has no /responses endpoint (404): Responses "
                        "requests are translated to Chat Completions from now on (set "
                        "model_info.responses_api: false to say so)", route.name)
    sent = body
    if body.get("conversation") is not None:  # (the history is the provider's: none here)
        raise ClientError(400, f"'conversation' continues a conversation the provider keeps; "
                          f"model {route.name!r} is served through Chat Completions, which "
                          "keeps none: send the conversation's items in 'input' instead",
                          param="conversation", code="unsupported_parameter")
    if found is not None:
        assert isinstance(previous, str)
        if found.failed:
            raise ClientError(503, "the gateway's response state is unavailable, so "
                              "previous_response_id cannot be expanded for this model: send "
                              "the full conversation in 'input', or retry",
                              param="previous_response_id", code="response_state_unavailable")
        if found.kept is None:
            raise previous_not_found(previous)
        # A chat-only upstream keeps nothing: it gets the whole conversation, translated
        # (without what the client sent of it again).
        kept = found.kept.conversation()
        new, resent = without_held(input_items(body), _held_ids(kept), kept)
        body, view = read_responses(expanded_body(body, [*kept, *new]))
        view.anomalies[:0] = resent
    answer = ResponsesAnswer(route.name, sent)
    response = await _translated(request, responses_to_chat(body, view), route, answer,
                                 lambda: answer.response, anthropic=False, read=view.anomalies,
                                 sent=raw, positions=responses_positions(body, view))
    if sent.get("store") is not False:
        _keep(request, answer.response, input_items(body))
    return response


def _no_endpoint(request: web.Request, route: ModelRoute, body: dict[str, Any],
                 found: Lookup | None) -> bool:
    """Whether a Responses request to a model not declared to speak the API was refused
    with a 404 that is about the endpoint (the upstream has no ``/responses``), not the
    model or the previous response: it can be sent translated (not a ``conversation``,
    whose history only the provider holds)."""
    flow = request.get(FLOW)
    if (flow is None or flow.response is not None or flow.give_up is None
            or body.get("conversation") is not None or responses_declared(route)):
        return False
    failure = flow.give_up.failure
    # A server without the route answers a bare "Not Found"; a server with it that does
    # not know the model says so ("The model `x` does not exist", model_not_found), or
    # the response continued ("Previous response with id ... not found"). A continuation
    # is translated too: the gateway kept the conversation (after a restart it has to
    # learn again that the server has no /responses).
    said = failure.body.decode("utf-8", "replace").lower()
    about_previous = found is not None and (failure.param == "previous_response_id"
                                            or "previous" in said)
    return (failure.status == 404 and failure.param != "model" and not about_previous
            and failure.code != "model_not_found" and "model" not in said)


async def _previous(request: web.Request, response_id: str, route: ModelRoute) -> Lookup:
    # The lookup may take a share of the request's deadline, no more: a store that hangs
    # is one that failed (the request then goes on without it, or is refused clearly).
    limit = request_deadline(route.entry, request.app[STATE].config) * LOOKUP_DEADLINE_SHARE
    owners = response_routes.owners(request)
    return await request.app[RESPONSE_STATE].lookup(owners, response_id, limit=limit)


async def _room(request: web.Request, route: ModelRoute) -> None:
    """Wait while more answers wait for the response store than it may hold (a store slower
    than the traffic slows the traffic), a share of the request's deadline at most."""
    kept = request.app[RESPONSE_STATE]
    if kept.backlog > kept.backlog_bytes:
        limit = request_deadline(route.entry, request.app[STATE].config) * LOOKUP_DEADLINE_SHARE
        await kept.room(limit)


def _keep(request: web.Request, response: Any, conversation: list[Any],
          held_by: ModelRoute | None = None) -> None:
    """Keep a finished answer and the full input it answered (written in the background);
    ``held_by``: the Responses deployment that answered (it holds the answer too: a
    background response still under way is kept to be polled there)."""
    done = finished(response)
    origin = (held_by.name, held_by.deployment_id) if held_by is not None else None
    if done is None and origin is not None and (queued := under_way(response)) is not None:
        done = queued, []
    if done is None:
        return
    record = KeptResponse.create(done[0], request[CLIENT], conversation, done[1], response,
                                 origin)
    known, continued = request.get(_KEPT_OVER, (None, None))
    over = (continued, answer_to(known.extends)) if known is not None else (continued,)
    kept = request.app[RESPONSE_STATE].keep(record, [r for r in over
                                                     if isinstance(r, KeptResponse)],
                                            request.get(_BODY_SIZE, 0))
    if known is not None:
        note_answer(known.turn, kept)


async def _native_responses(request: web.Request, raw: bytes, body: dict[str, Any],
                            view: Any, route: ModelRoute, found: Lookup | None,
                            known: KnownHistory | None = None) -> web.StreamResponse:
    """A Responses request to a Responses upstream. With ``previous_response_id`` it goes
    as sent (the upstream keeps the history); when the upstream answers that it does not
    know the id, it is sent once more with the conversation the gateway kept in ``input``
    (``previous_response_expanded``). The answer is kept as it is relayed."""
    state = request.app[STATE]
    previous = body.get("previous_response_id")
    if found is not None and found.foreign:
        assert isinstance(previous, str)
        raise previous_not_found(previous)  # another owner's: never continued, never shown
    # ``conversation`` (the Conversations API) keeps the history upstream too: the input
    # continues it, so its outputs may answer calls only the provider holds.
    stateful = found is not None or body.get("conversation") is not None
    if stateful and state.fleet is not None:  # (sent where the request's tags allow)
        tags = request.get(OPTIONS, NO_OPTIONS).tags
        route = state.fleet.tagged_route(route, tags)
        if found is not None and found.kept is not None and not tags:
            route = _holding(state.fleet, route, found.kept)
    sender = state.senders.responses(route)
    if found is not None and found.kept is not None:
        body, view = _without_held(body, view, found.kept.conversation())
    # A stateless request may go to any deployment speaking the Responses API; a history
    # held upstream only to the one that holds it.
    senders = None if stateful else NativeSenders(
        native_responses, lambda to: state.senders.responses(to))
    codec = ResponsesCodec(body, view, route.upstream_model, sender, stateful, senders=senders,
                           refused=request.app[STATE].refused, plain=known is not None)
    # With previous_response_id (or a conversation) the history lives upstream: nothing to
    # repair here.
    chat = _chat_request(request, body, raw, [] if stateful else view.messages, route, codec)
    chat.known = known  # (a plain input is stateless)
    conversation: list[Any] | None = input_items(body)
    if found is not None:
        conversation = (None if found.kept is None
                        else [*found.kept.conversation(), *input_items(body)])
    elif body.get("conversation") is not None:
        conversation = None  # (only its last turn is here: nothing to keep and expand later)
    result = await _run(request, chat, anthropic=False)
    if isinstance(result, web.Response):
        flow = request[FLOW]
        # Expanded: when the upstream forgot the id, when it refused the history it holds as
        # broken (a stored response that ended in lone reasoning, ...) while the gateway
        # keeps that history to repair, and when that history overflowed the window (only
        # the expanded conversation can be compacted).
        overflowed = flow.give_up is not None and classify(
            flow.give_up.failure) is Verdict.OVERFLOW
        held = body.get("conversation")
        if found is None and overflowed and held is not None:
            # (a conversation's items are the Conversations API's: none here to compact)
            held = held.get("id") if isinstance(held, dict) else held
            return _refused(flow, chat, held_upstream_overflow("conversation", str(held)))
        if found is None or flow.give_up is None or not (
                forgot_previous(flow.give_up.failure) or overflowed
                or (found.kept is not None and flow.give_up.reason.startswith("structural"))):
            return result
        assert isinstance(previous, str)
        if found.failed:
            return result  # (the store could not say: the upstream's refusal stands)
        if found.kept is None:
            return _refused(flow, chat, held_upstream_overflow("previous_response_id", previous)
                            if overflowed else previous_not_found(previous, upstream=True))
        assert conversation is not None
        earlier = view.anomalies  # what the new input had repaired goes with it
        body, view = read_responses(expanded_body(body, conversation))
        view.anomalies[:0] = earlier
        view.anomalies.append(Anomaly(PREVIOUS_RESPONSE_EXPANDED))
        codec = ResponsesCodec(body, view, route.upstream_model, sender, senders=NativeSenders(
            native_responses, lambda to: state.senders.responses(to)),
            refused=state.refused)
        chat = _chat_request(request, body, orjson.dumps(body), view.messages, route, codec)
        result = await _run(request, chat, anthropic=False, after=flow)
        if isinstance(result, web.Response):
            return result
        _report_read(result, view.anomalies)
        conversation = input_items(body)
    wire, sent = result.request.wire, request[FLOW].sent_input
    if conversation is not None and isinstance(wire, ResponsesCodec) and not wire.stateful \
            and sent is not None:
        conversation = sent  # what the upstream holds (compacted, repaired), to continue
    upstream = result.response
    if result.request.wire is None:  # a fallback that speaks only chat answered
        answer = ResponsesAnswer(result.request.route.name, body)
        response = await _translate(request, result, result.request, answer,
                                    lambda: answer.response, anthropic=False)
        if body.get("store") is not False and conversation is not None:
            _keep(request, answer.response, conversation)
        return response
    if body.get("store") is False or conversation is None or upstream is None:
        return await _relay(request, result, chat, anthropic=False)
    held_by = result.request.route
    if isinstance(upstream, BufferedResponse):  # a whole answer: read once it was relayed
        response = await _relay(request, result, chat, anthropic=False)
        _keep(request, upstream.parsed if upstream.parsed is not None
              else _json_or_none(upstream.body), conversation, held_by)
        return response
    captured = result.response = CapturedAnswer(upstream)
    response = await _relay(request, result, chat, anthropic=False)
    _keep(request, captured.final or captured.opened, conversation, held_by)
    return response


def _holding(fleet: Fleet, route: ModelRoute, kept: KeptResponse) -> ModelRoute:
    """The deployment of ``route``'s group that made the continued answer, which holds its
    history (a stateless turn may have gone to any of them); ``route`` when it is not one
    of them any more."""
    if kept.origin is None or kept.origin[0] != route.name:
        return route
    for deployment in fleet.deployments_of(route.name):
        if deployment.deployment_id == kept.origin[1] and native_responses(deployment):
            return deployment
    return route


def _refused(flow: Flow, chat: ChatRequest, refused: ClientError) -> web.Response:
    """The gateway's own refusal of a request whose attempts are over, with their
    headers."""
    headers = render.headers(flow)
    headers["x-request-id"] = chat.request_id
    return json_response(refused.body(), status=refused.status, headers=headers)


def _without_held(body: dict[str, Any], view: Any,
                  conversation: list[Any]) -> tuple[dict[str, Any], Any]:
    """A continuing request without the items the kept conversation holds, paired with it
    (a call of it left unanswered gets its output, an output no call made goes: read
    again, what reading repaired before kept first)."""
    items, dropped = without_held(input_items(body), _held_ids(conversation),
                                  conversation)
    items, paired = paired_continuation(conversation, items)
    dropped = (*dropped, *paired)
    if not dropped:
        return body, view
    body, again = read_responses({**body, "input": items})
    again.anomalies[:0] = [*view.anomalies, *dropped]
    return body, again


def _held_ids(conversation: list[Any]) -> frozenset[str]:
    """The item ids a kept conversation holds."""
    return frozenset(i["id"] for i in conversation
                     if type(i) is dict and isinstance(i.get("id"), str))


def _json_or_none(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def _report_read(flow: Flow, anomalies: Sequence[Anomaly]) -> None:
    """Report what reading the wire body repaired with the Flow's repairs (a translated
    request's Flow never saw the wire body; a native one reports it unless compaction
    replaced the history)."""
    if not anomalies:
        return
    for field in ("projection", "refused_projection"):
        projection = getattr(flow, field)
        if projection is None:
            continue
        known = {id(a) for a in projection.anomalies}
        new = tuple(a for a in anomalies if id(a) not in known)
        if new:
            setattr(flow, field, Projection(projection.messages,
                                            (*new, *projection.anomalies)))


async def _native_messages(request: web.Request, chat: ChatRequest) -> web.StreamResponse:
    """Run a Messages request whose upstream speaks Messages; relay its answer as it comes
    (translated, when a fallback that speaks only chat answered)."""
    result = await _run(request, chat, anthropic=True)
    if isinstance(result, web.Response):
        return result
    if result.request.wire is None:
        answer = AnthropicAnswer(result.request.route.name)
        return await _translate(request, result, result.request, answer,
                                lambda: answer.message, anthropic=True)
    return await _relay(request, result, chat, anthropic=True)


async def _translated(request: web.Request, chat_body: dict[str, Any], route: ModelRoute,
                      answer: Answer, final: Callable[[], dict[str, Any]], *,
                      anthropic: bool, read: Sequence[Anomaly] = (), sent: bytes = b"",
                      positions: tuple[int | None, ...] | None = None,
                      ) -> web.StreamResponse:
    """Run a request translated to Chat Completions; answer in the client's wire. ``read``:
    what reading the wire body repaired (reported with the Flow's repairs); ``sent``: the
    client's bytes (its integers past 64 bits are kept as written); ``positions``: the
    client's message or input item behind each chat message."""
    raw = exact_integers(sent, dumps_within_depth(chat_body, "sent on as Chat Completions"))
    chat = _chat_request(request, chat_body, raw, chat_body["messages"], route)
    chat.positions = positions
    chat.optional_fields = OPTIONAL_FIELDS
    result = await _run(request, chat, anthropic)
    if isinstance(result, web.Response):
        return result
    _report_read(result, read)
    return await _translate(request, result, chat, answer, final, anthropic=anthropic)


async def _response_state(app: web.Application) -> AsyncIterator[None]:
    """Close the response store when the app stops (its writes under way finished first)."""
    yield
    await app[RESPONSE_STATE].close()


def register(app: web.Application) -> None:
    """Attach the wire routes (also without the ``/v1`` prefix), and the response state
    beside the session store (nothing is opened before it is used)."""
    sessions = app[STATE].config.sessions
    metrics = app[STATE].telemetry.metrics
    app[RESPONSE_STATE] = ResponseState(
        open_response_store(sessions.data_dir, sessions.redis_url),
        not_kept=lambda reason, count: metrics.inc("gateway_responses_not_kept_total", count,
                                                   reason=reason))
    app.cleanup_ctx.append(_response_state)
    response_routes.register(app)
    for prefix in ("/v1", ""):
        app.router.add_post(f"{prefix}/responses", responses)
        app.router.add_post(f"{prefix}/responses/compact", responses_compact)
        app.router.add_post(f"{prefix}/messages", messages)
        app.router.add_post(f"{prefix}/messages/count_tokens", count_tokens)
