"""Passthrough to upstreams that speak OpenAI Chat Completions, over one pooled session.

No translation: the body goes out as bytes, the answer comes back as bytes. For a stream, the
provider waits for the upstream's status and first SSE event before returning, so a refusal
(including an error sent as the first event of a 200 stream) can still be recovered; after
that, chunks are relayed as they arrive with no parsing.
"""

from __future__ import annotations

import asyncio
import io
import re
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import orjson

from gateway.projection.lazy_messages import dumps_request
from gateway.providers.answers import CHAT, AnswerShape, event_problem, first_bad_event
from gateway.providers.base import UpstreamCall, UpstreamError, UpstreamResponse, hold_until
from gateway.providers.error_body import implied_status, parse_error_text
from gateway.providers.errors import (
    failure_from_exception,
    failure_from_http,
    failure_sse_event,
)
from gateway.providers.failure import UpstreamFailure, redact_failure
from gateway.providers.sse import (
    LineEnds,
    ends_with,
    first_oversized,
    has_output,
    is_chat_opening,
    only_opening,
    parse_event,
)
from gateway.redact import redact, redact_bytes, register_secrets


@dataclass(frozen=True, slots=True)
class UpstreamTimeouts:
    """Seconds: connect, longest gap between two chunks, whole request (None: unbounded), and
    ``first_byte``: everything before the answer's first byte could reach the client (status,
    headers, a whole non-stream body, a stream's first event; None: unbounded)."""

    connect: float = 10.0
    read: float = 600.0
    total: float | None = None
    first_byte: float | None = None

    def client_timeout(self) -> aiohttp.ClientTimeout:
        """The aiohttp form."""
        return aiohttp.ClientTimeout(total=self.total, sock_connect=self.connect,
                                     connect=self.connect, sock_read=self.read)


@dataclass(frozen=True, slots=True)
class UpstreamLimits:
    """Bytes read from an upstream, after decompression: a whole non-stream answer, an error
    answer (kept truncated past the cap), one SSE event."""

    max_body_bytes: int = 64 * 1024 * 1024
    max_error_bytes: int = 1024 * 1024
    max_event_bytes: int = 1024 * 1024


class HttpPool:
    """The one pooled upstream client session, opened and closed with the server."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The open session (created on first use inside the running loop)."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=1000, limit_per_host=0, ttl_dns_cache=300,
                                             keepalive_timeout=60)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=True,
                                                  trust_env=False)
        return self._session

    async def close(self) -> None:
        """Close the session and its connections."""
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None


@dataclass(slots=True)
class BufferedResponse:
    """A complete non-stream upstream answer."""

    body: bytes
    status: int = 200
    content_type: str = "application/json"
    relay_headers: tuple[tuple[str, str], ...] = ()
    parsed: dict[str, Any] | None = field(default=None, repr=False)  # the body, when parsed

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield the body once (a configured secret it quotes masked, as in a stream)."""
        yield redact_bytes(self.body)

    async def aclose(self) -> None:
        """Nothing to release."""


# Seconds a stream that sent its final event gets to end its body: an upstream that keeps
# it open is then hung up on, and the client's stream ends (not after ``idle``).
END_GRACE = 1.0


@dataclass(slots=True)
class RelayedStream:
    """An SSE stream that already delivered its first event; the rest is relayed as it
    arrives, whole events at a time (a partial event is held until its blank line).

    After the first event the stream is bounded by ``idle`` seconds between two data events
    (comments and keep-alives do not count) and ``max_event`` bytes per event. A stream
    that breaks off, stalls, ends without ``data: [DONE]``, or sends an event that does
    not fit ``shape`` (not SSE, data that is not JSON or not the wire's event) ends with an
    OpenAI-shaped SSE ``error`` event naming the model, never a silent truncation.
    """

    response: aiohttp.ClientResponse
    head: bytes
    provider: str
    idle: float = 600.0
    max_event: int = 1024 * 1024
    status: int = 200
    content_type: str = "text/event-stream"
    relay_headers: tuple[tuple[str, str], ...] = ()
    # What a complete stream ends with: chat's ``data: [DONE]``; other wires name their own.
    end_markers: tuple[bytes, ...] = (b"[DONE]",)
    shape: AnswerShape = CHAT  # what each event's data must be
    line_ends: LineEnds = field(default_factory=LineEnds)  # (as the head was read)
    _done: bool = field(default=False)

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield the first event, then every complete event as it arrives."""
        loop = asyncio.get_running_loop()
        pending = bytearray()
        finished = False  # saw data: [DONE]
        closed = False  # the last event so far is the final one
        opened = False  # an event with output was relayed
        try:
            data = self.head
            deadline = loop.time() + self.idle
            while True:
                if data:
                    searched = max(0, len(pending) - 3)
                    pending += data
                    cut = _last_event_end(pending, searched)
                    if cut:
                        out = bytes(pending[:cut])
                        del pending[:cut]
                        # (an event that arrived whole in one read is capped too)
                        big = (first_oversized(out, self.max_event)
                               if cut > self.max_event else None)
                        if big is not None:
                            out = out[:big]
                        bad = first_bad_event(out, self.shape)
                        if bad is not None:
                            if bad[0]:
                                yield redact_bytes(out[:bad[0]])
                            yield _sse_error(_bad(self.provider, bad[1]))
                            return
                        if big is not None:
                            if out:
                                yield redact_bytes(out)
                            yield _sse_error(self._too_big())
                            return
                        if b"data:" in out:
                            # Keep-alive events (pings, in_progress, empty deltas) show no
                            # progress: a stream of only them ends at ``idle`` too.
                            # (a chat stream's role chunk is progress once, not again)
                            if has_output(out) and not (
                                    opened and b'"role"' in out and only_opening(out)):
                                deadline = loop.time() + self.idle
                                opened = True
                            marked = any(m in out for m in self.end_markers)
                            finished = finished or marked
                            # (parsed only when a marker is there: most chunks hold none)
                            closed = marked and ends_with(out, self.end_markers)
                        handed = loop.time()
                        yield redact_bytes(out)  # an error event may echo the key
                        # The time the client took to be written to is no upstream silence.
                        deadline += loop.time() - handed
                    if len(pending) > self.max_event:
                        yield _sse_error(self._too_big())
                        return
                ended = closed and not pending.strip()
                try:
                    # Past the final event, only the body's end is waited for, briefly.
                    async with asyncio.timeout_at(min(deadline, loop.time() + END_GRACE)
                                                  if ended else deadline):
                        data = await self.response.content.readany()
                except TimeoutError:
                    if ended:  # (a proxy holding the body open: the answer is complete)
                        return
                    yield _sse_error(UpstreamFailure(
                        status=504, provider=self.provider,
                        message=f"the upstream of model {self.provider!r} sent no event "
                                f"with output for {self.idle:g}s; the stream timed out"))
                    return
                if data:
                    data = self.line_ends.feed(data)
                elif not (data := self.line_ends.flush()):
                    break
            if pending.strip() or not finished:
                where = ("in the middle of an event" if pending.strip()
                         else "without its final event")
                yield _sse_error(_bad(self.provider, f"ended the stream {where}"))
                return
            self._done = True
            self.response.release()  # complete: the connection goes back to the pool
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            yield _sse_error(_transport_failure(exc, self.provider))
        finally:
            await self.aclose()

    def _too_big(self) -> UpstreamFailure:
        return _bad(self.provider, f"sent an SSE event larger than {self.max_event} bytes "
                    "(the gateway's cap)")

    async def aclose(self) -> None:
        """Release (or, if unfinished, abort) the upstream connection."""
        if not self._done:
            self._done = True
            self.response.close()


_LARGE_BODY = 1024 * 1024
_WINDOW_FULL = "model_context_window_exceeded"  # (Claude's stop reason)
_WINDOW_STOP = _WINDOW_FULL.encode()


def _window_stop(data: Any) -> bool:
    """Whether an Anthropic answer (whole, or its ``message_delta`` event) stopped at the
    context window with no content: nothing the model said, only a full window."""
    if not isinstance(data, dict):
        return False
    if data.get("type") == "message_delta":
        delta = data.get("delta")
        return isinstance(delta, dict) and delta.get("stop_reason") == _WINDOW_FULL
    return (data.get("type") == "message" and data.get("stop_reason") == _WINDOW_FULL
            and not data.get("content"))


_ONLY_DONE = re.compile(rb"\s*data: ?\[DONE\]\s*")  # a chat stream with no answer in it
_RELAYED_PREFIXES = ("x-ratelimit-", "openai-processing-ms", "openai-version")


def relayed(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The upstream headers a client may use: rate-limit state, processing time, and the
    upstream's own request id (as ``x-upstream-request-id``: ``x-request-id`` is the
    gateway's). Never anything that could carry a credential: a value quoting a configured
    secret (a proxy naming the key's rate-limit bucket) has it masked."""
    out = [(k, redact(v)) for k, v in headers.items()
           if k.lower().startswith(_RELAYED_PREFIXES)]
    upstream_id = headers.get("x-request-id")
    if upstream_id:
        out.append(("x-upstream-request-id", redact(upstream_id)))
    return tuple(out)


def relayed_failure_headers(pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The relayable headers of a refusal (its rate-limit state and upstream request id)."""
    headers = {k.lower(): v for k, v in pairs}
    out = {k: v for k, v in headers.items()
           if k.startswith(_RELAYED_PREFIXES) or k.startswith("anthropic-ratelimit-")}
    if headers.get("x-request-id"):
        out["x-upstream-request-id"] = headers["x-request-id"]
    return out


def _sse_error(failure: UpstreamFailure) -> bytes:
    """The SSE ``error`` event that ends a stream which failed after its first byte."""
    return failure_sse_event(redact_failure(failure))


def _last_event_end(buf: bytearray, start: int) -> int:
    """Index just past the last complete SSE event in ``buf`` (0 when none); the boundary
    is searched for from ``start`` only (earlier bytes were searched before)."""
    lf = buf.rfind(b"\n\n", start)
    crlf = buf.rfind(b"\r\n\r\n", start)
    return max(lf + 2 if lf >= 0 else 0, crlf + 4 if crlf >= 0 else 0)


def _next_event_end(buf: bytearray, start: int) -> int:
    """Index just past the first SSE event boundary at or after ``start``, or -1."""
    lf = buf.find(b"\n\n", start)
    crlf = buf.find(b"\r\n\r\n", start)
    if lf < 0 and crlf < 0:
        return -1
    if lf < 0 or (0 <= crlf < lf):
        return crlf + 4
    return lf + 2


# What a failure reported inside a stream means as an HTTP status, by its type or code
# (Responses ``response.failed`` and ``error`` events carry no status).
_STREAM_CODE_STATUS = {
    "context_length_exceeded": 400, "invalid_prompt": 400, "invalid_request_error": 400,
    "invalid_image": 400, "invalid_image_format": 400, "invalid_image_url": 400,
    "rate_limit_exceeded": 429, "insufficient_quota": 429, "usage_limit_reached": 429,
    "server_error": 500, "api_error": 500, "overloaded": 529,
}


def _failure_in_event(event: bytes) -> tuple[int, dict[str, object]] | None:
    """(status, error body) of an SSE event that reports a failure: ``{"error": {...}}``
    (chat, Anthropic's ``error`` event) or a Responses ``response.failed`` / ``error``."""
    if b"error" not in event and b"failed" not in event:
        return None
    data = parse_event(event).json()
    if not isinstance(data, dict):
        return None
    kind = data.get("type")
    error: object = data.get("error")
    if kind == "response.failed":
        response = data.get("response")
        error = response.get("error") if isinstance(response, dict) else None
        error = error if isinstance(error, dict) else {"message": "the response failed"}
    elif kind == "error" and not isinstance(error, dict):  # Responses: fields at the top
        error = {k: data[k] for k in ("message", "code", "param") if k in data}
    elif data.get("object") == "error" and isinstance(data.get("message"), str):
        # vLLM's ErrorResponse as a stream chunk: the fields at the top.
        error = {k: data[k] for k in ("message", "type", "param", "code") if k in data}
    elif isinstance(error, str) and error.strip():  # {"error": "text"} (llama.cpp and proxies)
        error = {"message": error}
    if not isinstance(error, dict):
        return None
    status = _error_status({"error": error})
    if status == 502:
        for name in (error.get("code"), error.get("type")):
            if isinstance(name, str) and name in _STREAM_CODE_STATUS:
                status = _STREAM_CODE_STATUS[name]
                break
        else:
            implied = implied_status(parse_error_text(orjson.dumps(error).decode(), 502))
            status = implied if implied is not None else 502
    body: dict[str, object] = data if kind == "error" and "error" in data else {"error": error}
    return status, body


def _bad(provider: str, what: str, status: int = 502) -> UpstreamFailure:
    """A failure of an upstream answer the gateway cannot use (retried as transient)."""
    return UpstreamFailure(status=status, provider=provider, type="api_error",
                           message=f"the upstream of model {provider!r} {what}")


_TRANSPORT_WORDS = (
    (aiohttp.ClientConnectorError, "could not be reached"),
    (aiohttp.ServerDisconnectedError, "closed the connection before answering"),
    (aiohttp.ClientPayloadError, "sent a malformed or truncated body"),
    (aiohttp.ClientResponseError, "sent a malformed HTTP answer"),
    (aiohttp.ClientOSError, "connection failed"),
    (ConnectionError, "connection failed"),
)


def _transport_failure(exc: BaseException, provider: str) -> UpstreamFailure:
    """A transport failure naming the model, never the upstream's address."""
    failure = failure_from_exception(exc, provider)
    if failure.status == 504:
        return replace(failure, message=f"the upstream of model {provider!r} timed out")
    what = next((words for kind, words in _TRANSPORT_WORDS if isinstance(exc, kind)),
                f"failed ({type(exc).__name__})")
    return replace(failure, message=f"the upstream of model {provider!r} {what}", body=b"")


def _error_status(error: Mapping[str, object]) -> int:
    """The HTTP status an in-body error states (``code``), else 502."""
    inner = error.get("error")
    code = inner.get("code") if isinstance(inner, dict) else None
    return code if isinstance(code, int) and 400 <= code < 600 else 502


class OpenAICompatProvider:
    """Sends Chat Completions bodies to ``{api_base}/chat/completions`` as they are."""

    stream_end_markers: tuple[bytes, ...] = (b"[DONE]",)
    answer_shape: AnswerShape = CHAT  # what a usable answer (and stream event) is
    # Events that open a stream before any output (a native wire's ``message_start``,
    # ``response.created``): held back with the first event until one that is output or a
    # failure arrives, so a refusal right after them still reaches the ladder.
    stream_opening: tuple[bytes, ...] = ()

    def __init__(
        self,
        name: str,
        *,
        api_base: str,
        api_key: str | None,
        pool: HttpPool,
        timeouts: UpstreamTimeouts,
        extra_headers: Mapping[str, str] | None = None,
        limits: UpstreamLimits | None = None,
        stream_timeouts: UpstreamTimeouts | None = None,
    ) -> None:
        self.name = name
        self.url = api_base.rstrip("/") + "/chat/completions"
        self._pool = pool
        self._timeout = timeouts.client_timeout()
        self._first_byte = timeouts.first_byte
        self._idle = (stream_timeouts or timeouts).read
        self._limits = limits or UpstreamLimits()
        self._stream_timeout = (stream_timeouts or timeouts).client_timeout()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        headers.update(extra_headers or {})
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        register_secrets([api_key])
        self._headers = headers
        self._stream_headers = {**headers, "Accept": "text/event-stream"}

    async def send(self, call: UpstreamCall) -> UpstreamResponse:
        """Send once; raise UpstreamError with a normalized failure on any refusal.

        Everything up to the answer's first byte for the client is bounded by the
        ``first_byte`` timeout; every failure names the model (not the upstream's URL) and
        has the configured secrets redacted.
        """
        limit = self._first_byte
        if call.deadline is not None:
            left = max(0.0, call.deadline - time.monotonic())
            limit = left if limit is None else min(limit, left)
        # (on the loop's clock: when the first byte is due, for a stream's held opening)
        due = None if limit is None else asyncio.get_running_loop().time() + limit
        try:
            async with asyncio.timeout(limit):
                return await self._exchange(call, due)
        except TimeoutError:
            raise UpstreamError(UpstreamFailure(
                status=504, provider=self.name,
                message=f"the upstream of model {self.name!r} timed out: no answer within "
                        f"{limit:g}s")) from None
        except UpstreamError as err:
            raise UpstreamError(redact_failure(err.failure)) from None

    async def _exchange(self, call: UpstreamCall, due: float | None = None,
                        ) -> UpstreamResponse:
        data = call.raw if call.raw is not None else dumps_request(call.body)
        headers = self._stream_headers if call.stream else self._headers
        if call.request_id:
            headers = {**headers, "X-Request-ID": call.request_id}
        if call.headers:  # trace context (traceparent) for the upstream's own tracing
            headers = {**headers, **dict(call.headers)}
        # A big body is sent from a buffer in chunks, yielding to the loop between them
        # (aiohttp writes raw bytes in one go and warns about it past 1 MiB).
        payload: bytes | io.BytesIO = io.BytesIO(data) if len(data) > _LARGE_BODY else data
        try:
            resp = await self._pool.session.post(
                self.url, data=payload, headers=headers, allow_redirects=False,
                timeout=self._stream_timeout if call.stream else self._timeout)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(_transport_failure(exc, self.name)) from None
        try:
            return await self._answer(call, resp, due)
        except UpstreamError:
            resp.close()
            raise
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            resp.close()
            raise UpstreamError(_transport_failure(exc, self.name)) from None
        except BaseException:
            resp.close()
            raise

    async def _answer(self, call: UpstreamCall, resp: aiohttp.ClientResponse,
                      due: float | None = None) -> UpstreamResponse:
        status = resp.status
        if 400 <= status <= 599:
            body = await self._read(resp, self._limits.max_error_bytes, truncate=True)
            raise UpstreamError(failure_from_http(status, resp.headers, body, self.name))
        if 300 <= status <= 399:
            raise UpstreamError(_bad(self.name, f"answered a redirect (HTTP {status}); the "
                                     "gateway does not follow redirects"))
        if status != 200:
            raise UpstreamError(_bad(self.name, f"answered HTTP {status} instead of 200"))
        ctype = resp.headers.get("Content-Type", "")
        if "text/event-stream" in ctype:
            if call.stream:
                return await self._open_stream(resp, due)
            raise UpstreamError(_bad(self.name, "sent an event stream to a non-stream "
                                     "request"))
        body = await self._read(resp, self._limits.max_body_bytes)
        resp.release()
        parsed = self._check_json(body, ctype, resp.headers)
        return BufferedResponse(body, status, ctype or "application/json",
                                relayed(resp.headers), parsed)

    def _check_json(self, body: bytes, ctype: str, headers: Mapping[str, str]
                    ) -> dict[str, Any]:
        """A 200 must carry a JSON object that is not an error and fits the endpoint's
        answer model (:mod:`gateway.providers.answers`): the object."""
        try:
            parsed = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            kind = (ctype.split(";")[0].strip() or "no content type") if body else "no body"
            raise UpstreamError(_bad(self.name, f"answered 200 with an unreadable body "
                                     f"({kind}, not a JSON object)"))
        error = parsed.get("error")
        if error is not None and "choices" not in parsed:
            from_body = failure_from_http(_error_status(parsed), headers, body, self.name)
            raise UpstreamError(replace(
                from_body, body=b"", message=f"the upstream of model {self.name!r} answered "
                f"200 with an error: {from_body.message}"))
        if _window_stop(parsed):
            raise UpstreamError(self._window_full())
        problem = self.answer_shape.whole_problem(parsed)
        if problem is not None:
            raise UpstreamError(_bad(self.name, f"answered 200 with a body that {problem}"))
        return parsed

    def _oversized(self, cap: int) -> UpstreamError:
        """A first event past the gateway's cap (nothing relayed yet: retried)."""
        return UpstreamError(_bad(self.name, "sent a first SSE event that exceeds the "
                                  f"gateway's cap of {cap} bytes"))

    def _window_full(self) -> UpstreamFailure:
        """An answer that stopped at the context window before any output, as the overflow
        it is (compacted by the ladder, not relayed as an empty answer)."""
        return UpstreamFailure(
            status=400, provider=self.name, type="invalid_request_error",
            message="prompt is too long: the model's context window was full before any "
                    "output (stop_reason model_context_window_exceeded)")

    def _opening(self, event: bytes) -> bool:
        """Whether ``event`` only opens the stream (no output yet, see ``stream_opening``;
        on a chat stream, a chunk with only the role: :func:`is_chat_opening`)."""
        data = parse_event(event).json()
        if self.answer_shape is CHAT:
            return is_chat_opening(data)
        if not self.stream_opening:
            return False
        return isinstance(data, dict) and str(data.get("type", "")).encode() in (
            self.stream_opening)

    async def _read(self, resp: aiohttp.ClientResponse, cap: int, *,
                    truncate: bool = False) -> bytes:
        """The body, decompressed, at most ``cap`` bytes: past it, an error (or with
        ``truncate``, the first ``cap`` bytes and the connection closed)."""
        length = resp.content_length
        if not truncate and length is not None and length > cap:
            raise UpstreamError(_bad(self.name, f"answer of {length} bytes exceeds the "
                                     f"gateway's cap of {cap} bytes"))
        body = bytearray()
        async for chunk in resp.content.iter_any():
            body += chunk
            if len(body) > cap:
                if truncate:
                    resp.close()
                    return bytes(body[:cap])
                raise UpstreamError(_bad(self.name, f"answer exceeds the gateway's cap of "
                                         f"{cap} bytes"))
        return bytes(body)

    async def _open_stream(self, resp: aiohttp.ClientResponse,
                           due: float | None = None) -> RelayedStream:
        """Wait for the first event carrying data (past the wire's opening events):
        scanned incrementally, comments and keep-alives before it dropped, its size capped.

        Opening events are held so that a failure right after them is still retried; when
        the first byte's deadline (``due``, on the loop's clock) is about to pass with only
        opening events in, the stream is relayed as it is: the upstream is answering, slowly
        (a reasoning model), and failing it would lose the answer."""
        buf = bytearray()
        held = scan = 0  # buf[:held]: opening events kept for the client
        cap = self._limits.max_event_bytes
        line_ends = LineEnds()
        # (Just before the caller's own timeout for ``due`` fires.)
        until = None if due is None else hold_until(due, asyncio.get_running_loop().time())
        while True:
            if held and until is not None:
                try:
                    async with asyncio.timeout_at(until) as scope:
                        chunk = await resp.content.readany()
                except TimeoutError:
                    if not scope.expired():
                        raise  # (the connection's own read timeout)
                    return self._relayed(resp, buf, line_ends)
            else:
                chunk = await resp.content.readany()
            if not chunk:
                break
            buf += line_ends.feed(chunk)
            end = _next_event_end(buf, scan)
            while end >= 0 and b"data:" not in buf[held:end]:
                del buf[held:end]  # a comment or keep-alive: not worth keeping
                end = _next_event_end(buf, held)
            while end >= 0:
                event = bytes(buf[held:end])
                if len(event) > cap:  # (one read brought it whole, with what follows it)
                    raise self._oversized(cap)
                if b"data:" not in event:  # a comment or keep-alive between opening events
                    held = end
                    end = _next_event_end(buf, held)
                    continue
                failed = _failure_in_event(event)
                if failed is not None:
                    status, error = failed
                    raise UpstreamError(failure_from_http(status, resp.headers,
                                                          orjson.dumps(error), self.name))
                if _WINDOW_STOP in event and _window_stop(parse_event(event).json()):
                    raise UpstreamError(self._window_full())
                # Nothing reached the client yet: an unusable first event can be retried.
                problem = event_problem(event.rstrip(b"\r\n"), self.answer_shape)
                if problem is None and _ONLY_DONE.fullmatch(event):
                    problem = "ended the stream without sending an answer"
                if problem is not None:
                    raise UpstreamError(_bad(self.name, problem))
                if not self._opening(event):
                    return self._relayed(resp, buf, line_ends)
                held = end
                end = _next_event_end(buf, held)
            if len(buf) - held > cap:
                raise self._oversized(cap)
            if held > cap:  # opening events without end: held no longer (bounded memory)
                return self._relayed(resp, buf, line_ends)
            scan = max(held, len(buf) - 3)
        # Ended before any output: nothing reached the client yet, so it can be retried.
        raise UpstreamError(_bad(self.name, "ended the stream before sending any output"
                                 if held else "ended the stream before sending any event"))

    def _relayed(self, resp: aiohttp.ClientResponse, buf: bytearray,
                 line_ends: LineEnds) -> RelayedStream:
        """The stream from here on, ``buf`` (what was read of it) first."""
        return RelayedStream(resp, bytes(buf), self.name, idle=self._idle,
                             max_event=self._limits.max_event_bytes,
                             relay_headers=relayed(resp.headers),
                             end_markers=self.stream_end_markers, shape=self.answer_shape,
                             line_ends=line_ends)
