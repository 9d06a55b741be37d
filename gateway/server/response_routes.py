"""The stored-response routes of the Responses API: ``GET /v1/responses/{id}`` (retrieve,
also ``?stream=true`` to resume a background stream), ``GET .../input_items``,
``DELETE /v1/responses/{id}`` and ``POST .../cancel``.

The gateway keeps every Responses answer it returns (``sessions.responses_state``), with
its owner and, for a Responses upstream's answer, the deployment that holds it too. A
finished answer is served from what was kept; a background response still under way, a
resumed stream and a cancel go to the deployment that made it (with its own key, never
the client's) and what it answers is kept in turn. Only the owner's key sees a response:
another key gets the same ``404`` as for an unknown id. Deleting removes the gateway's copy
and the upstream's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from gateway.errors import ClientError
from gateway.redact import redact_bytes
from gateway.routing import ModelRoute, request_deadline, upstream_timeouts
from gateway.server.auth import PRINCIPAL
from gateway.server.errors import json_response
from gateway.server.keys import CLIENT, RESPONSE_STATE, STATE, WIRE
from gateway.sessions.response_records import KeptResponse
from gateway.sessions.responses_state import failures
from gateway.wires.native import responses_headers, responses_url
from gateway.wires.response_chain import CapturedAnswer
from gateway.wires.response_objects import (
    deleted,
    input_items_page,
    not_cancellable,
    not_found,
    retrieved,
)

__all__ = ["owners", "register"]

log = logging.getLogger("gateway.server")

# The statuses of a background response still under way upstream.
UNDER_WAY = ("queued", "in_progress")


def owners(request: web.Request) -> tuple[str | None, ...]:
    """The owner ids whose kept responses the client may see (its own first)."""
    principal = request.get(PRINCIPAL)
    return principal.owner_ids if principal is not None else (request[CLIENT],)


async def retrieve(request: web.Request) -> web.StreamResponse:
    """``GET /v1/responses/{id}``: the kept answer; a background one under way, or
    ``stream=true``, from the deployment that holds it."""
    record = await _owned(request)
    stream = request.query.get("stream") == "true"
    if record.origin is not None and (stream or not record.finished):
        return await _forward(request, record, "GET", "")
    if stream:
        raise ClientError(400, "stream=true resumes a background response's stream, which "
                          "only a Responses upstream keeps; this response was answered "
                          "whole: retrieve it without stream", param="stream")
    return json_response(retrieved(record))


async def input_items(request: web.Request) -> web.StreamResponse:
    """``GET /v1/responses/{id}/input_items``: the input the answer was made for."""
    record = await _owned(request)
    return json_response(input_items_page(record, request.query))


async def delete(request: web.Request) -> web.StreamResponse:
    """``DELETE /v1/responses/{id}``: the gateway's copy, and the upstream's when one
    holds it."""
    record = await _owned(request)
    if record.origin is not None:
        # (the upstream may have let it expire already: the gateway's copy goes anyway)
        try:
            await _call(request, record, "DELETE", "")
        except ClientError as err:
            log.warning("response %s: the upstream did not delete it (%s)",
                        record.response_id, err.status)
    try:
        await request.app[RESPONSE_STATE].delete(record.response_id)
    except failures() as err:
        raise _store_down(err) from None
    return json_response(deleted(record.response_id))


async def cancel(request: web.Request) -> web.StreamResponse:
    """``POST /v1/responses/{id}/cancel``: a background response under way, at the
    deployment that runs it."""
    record = await _owned(request)
    if record.origin is None or record.finished:
        raise not_cancellable(record.response_id)
    return await _forward(request, record, "POST", "/cancel")


async def _owned(request: web.Request) -> KeptResponse:
    """The kept response the path names, when the client's owner kept it."""
    request[WIRE] = "responses"
    response_id = request.match_info["response_id"]
    try:
        record = await request.app[RESPONSE_STATE].find(owners(request), response_id)
    except failures() as err:
        raise _store_down(err) from None
    if record is None:
        raise not_found(response_id)
    return record


def _store_down(err: BaseException) -> ClientError:
    log.warning("response state unavailable: a stored response was not read (%s)",
                err.__class__.__name__)
    return ClientError(503, "the gateway's response state is unavailable; retry shortly",
                       code="response_state_unavailable")


def _origin(request: web.Request, record: KeptResponse,
            suffix: str) -> tuple[ModelRoute, str]:
    """The deployment holding the response (it must still be configured), and the URL of
    the response's ``suffix`` route there."""
    assert record.origin is not None
    name, deployment = record.origin
    fleet = request.app[STATE].fleet
    if fleet is not None and fleet.resolve(name) is not None:
        for route in fleet.deployments_of(name):
            if route.deployment_id == deployment:
                return route, responses_url(route, f"/responses/{record.response_id}{suffix}")
    raise ClientError(404, f"Response with id '{record.response_id}' is held by deployment "
                      f"{deployment!r} of model {name!r}, which this gateway no longer "
                      "serves.", code="deployment_not_found")


async def _call(request: web.Request, record: KeptResponse, method: str,
                suffix: str) -> dict[str, Any]:
    """A whole JSON answer of the holding deployment (its refusal relayed as a
    ``ClientError`` of its status and message)."""
    route, url = _origin(request, record, suffix)
    config = request.app[STATE].config
    timeout = aiohttp.ClientTimeout(total=request_deadline(route.entry, config),
                                    sock_connect=config.gateway.timeouts.connect)
    with _reaching(route):
        async with request.app[STATE].pool.session.request(
                method, url, headers=responses_headers(route), params=_passed(request.query),
                timeout=timeout) as upstream:
            body = await upstream.read()
            status = upstream.status
    return _answer(status, body, route)


@contextmanager
def _reaching(route: ModelRoute) -> Iterator[None]:
    """A call to the deployment, its failure to answer as the client's ``504`` / ``502``."""
    try:
        yield
    except TimeoutError:
        raise ClientError(504, f"deployment {route.deployment_id!r} did not answer in time",
                          code="upstream_timeout") from None
    except aiohttp.ClientError as err:
        raise ClientError(502, f"deployment {route.deployment_id!r} could not be reached "
                          f"({err.__class__.__name__})", code="upstream_unreachable") from None


def _answer(status: int, body: bytes, route: ModelRoute) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if status < 400 and isinstance(data, dict):
        return data
    error = data.get("error") if isinstance(data, dict) else None
    if status >= 400 and isinstance(error, dict) and isinstance(error.get("message"), str):
        message = redact_bytes(error["message"].encode()).decode("utf-8", "replace")
        param, code = error.get("param"), error.get("code")
        raise ClientError(status if status < 500 else 502, message,
                          param=param if isinstance(param, str) else None,
                          code=code if isinstance(code, str) else None)
    raise ClientError(502, f"deployment {route.deployment_id!r} answered {status} without "
                      "a response object", code="bad_upstream_answer")


async def _forward(request: web.Request, record: KeptResponse, method: str,
                   suffix: str) -> web.StreamResponse:
    """A retrieve or a cancel at the holding deployment, its answer kept in turn (a
    resumed stream relayed as it comes)."""
    if request.query.get("stream") == "true" and method == "GET":
        return await _stream(request, record)
    answer = await _call(request, record, method, suffix)
    _keep(request, record, answer)
    return json_response(answer)


async def _stream(request: web.Request, record: KeptResponse) -> web.StreamResponse:
    route, url = _origin(request, record, "")
    _, timeouts = upstream_timeouts(route.entry, request.app[STATE].config)
    with _reaching(route):
        upstream = await request.app[STATE].pool.session.get(
            url, headers=responses_headers(route), params=_passed(request.query),
            timeout=aiohttp.ClientTimeout(sock_connect=timeouts.connect, sock_read=timeouts.read,
                                          total=timeouts.total))
    async with upstream:
        if upstream.status >= 400 or not upstream.content_type.startswith("text/event-stream"):
            answer = _answer(upstream.status, await upstream.read(), route)
            _keep(request, record, answer)
            return json_response(answer)
        captured = CapturedAnswer(_Chunks(upstream))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            async for chunk in captured.chunks():
                await response.write(redact_bytes(chunk))
        except (TimeoutError, aiohttp.ClientError) as err:
            # (the stream had begun: it ends here, as a cut stream; the client resumes it)
            log.warning("response %s: the resumed stream broke off (%s)", record.response_id,
                        err.__class__.__name__)
            return response
        if captured.final is not None:
            _keep(request, record, captured.final)
        await response.write_eof()
        return response


class _Chunks:
    """An upstream stream as ``CapturedAnswer`` reads it."""

    def __init__(self, upstream: aiohttp.ClientResponse) -> None:
        self._upstream = upstream
        self.status = upstream.status
        self.content_type = upstream.content_type
        self.relay_headers: tuple[tuple[str, str], ...] = ()

    async def chunks(self) -> Any:
        async for chunk in self._upstream.content.iter_any():
            yield chunk

    async def aclose(self) -> None:
        self._upstream.release()


def _passed(query: Mapping[str, str]) -> list[tuple[str, str]]:
    """The query parameters the API takes on these routes (``include``, ``stream``, ...)."""
    return [(k, v) for k, v in query.items()
            if k in ("stream", "starting_after", "include", "include[]", "include_obfuscation")]


def _keep(request: web.Request, record: KeptResponse, answer: Mapping[str, Any]) -> None:
    """Keep what the holding deployment said of the response now, when that is news (it
    finished: its output continues it; it ended otherwise: its status)."""
    if record.finished or answer.get("id") != record.response_id \
            or answer.get("object") != "response":
        return
    if record.response is not None and answer.get("status") == record.response.get("status"):
        return
    request.app[RESPONSE_STATE].keep(record.answered(answer))


def register(app: web.Application) -> None:
    """Attach the stored-response routes (also without the ``/v1`` prefix)."""
    for prefix in ("/v1", ""):
        app.router.add_get(f"{prefix}/responses/{{response_id}}", retrieve)
        app.router.add_delete(f"{prefix}/responses/{{response_id}}", delete)
        app.router.add_get(f"{prefix}/responses/{{response_id}}/input_items", input_items)
        app.router.add_post(f"{prefix}/responses/{{response_id}}/cancel", cancel)
