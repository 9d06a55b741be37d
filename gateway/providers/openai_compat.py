"""Passthrough to upstreams that speak OpenAI Chat Completions, over one pooled session.

No translation: the body goes out as bytes, the answer comes back as bytes. For a stream, the
provider waits for the upstream's status and first SSE event before returning, so a refusal
(including an error sent as the first event of a 200 stream) can still be recovered; after
that, chunks are relayed as they arrive with no parsing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import aiohttp
import orjson

from gateway.providers.base import UpstreamCall, UpstreamError, UpstreamResponse
from gateway.providers.errors import (
    failure_from_exception,
    failure_from_http,
    failure_sse_event,
)
from gateway.providers.failure import UpstreamFailure


@dataclass(frozen=True, slots=True)
class UpstreamTimeouts:
    """Seconds: connect, longest gap between two chunks, whole request (None: unbounded)."""

    connect: float = 10.0
    read: float = 600.0
    total: float | None = None

    def client_timeout(self) -> aiohttp.ClientTimeout:
        """The aiohttp form."""
        return aiohttp.ClientTimeout(total=self.total, sock_connect=self.connect,
                                     connect=self.connect, sock_read=self.read)


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

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield the body once."""
        yield self.body

    async def aclose(self) -> None:
        """Nothing to release."""


@dataclass(slots=True)
class RelayedStream:
    """An SSE stream that already delivered its first event; the rest is relayed raw."""

    response: aiohttp.ClientResponse
    head: bytes
    provider: str
    status: int = 200
    content_type: str = "text/event-stream"
    relay_headers: tuple[tuple[str, str], ...] = ()
    _done: bool = field(default=False)

    async def chunks(self) -> AsyncIterator[bytes]:
        """Yield the first event, then every chunk as it arrives."""
        try:
            if self.head:
                yield self.head
            async for chunk in self.response.content.iter_any():
                yield chunk
            self._done = True
            self.response.release()  # complete: the connection goes back to the pool
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            yield failure_sse_event(failure_from_exception(exc, self.provider))
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Release (or, if unfinished, abort) the upstream connection."""
        if not self._done:
            self._done = True
            self.response.close()


_RELAYED_PREFIXES = ("x-ratelimit-", "openai-processing-ms", "openai-version")


def relayed(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The upstream headers a client may use: rate-limit state, processing time, and the
    upstream's own request id (as ``x-upstream-request-id``: ``x-request-id`` is the
    gateway's). Never anything that could carry a credential."""
    out = [(k, v) for k, v in headers.items() if k.lower().startswith(_RELAYED_PREFIXES)]
    upstream_id = headers.get("x-request-id")
    if upstream_id:
        out.append(("x-upstream-request-id", upstream_id))
    return tuple(out)


def relayed_failure_headers(pairs: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The relayable headers of a refusal (its rate-limit state and upstream request id)."""
    headers = {k.lower(): v for k, v in pairs}
    out = {k: v for k, v in headers.items()
           if k.startswith(_RELAYED_PREFIXES) or k.startswith("anthropic-ratelimit-")}
    if headers.get("x-request-id"):
        out["x-upstream-request-id"] = headers["x-request-id"]
    return out


def _first_event_end(buf: bytes) -> int:
    """Index just past the first SSE event carrying data, or -1 while incomplete."""
    start = 0
    while True:
        end = buf.find(b"\n\n", start)
        end_crlf = buf.find(b"\r\n\r\n", start)
        if end < 0 and end_crlf < 0:
            return -1
        if end < 0 or (0 <= end_crlf < end):
            end, sep = end_crlf, 4
        else:
            sep = 2
        event = buf[start:end]
        if b"data:" in event:
            return end + sep
        start = end + sep  # a comment or keep-alive: keep looking


def _error_in_event(event: bytes) -> dict[str, object] | None:
    """The ``error`` object of an SSE event that reports a failure, if it is one."""
    if b'"error"' not in event:
        return None
    for line in event.splitlines():
        if line.startswith(b"data:"):
            try:
                data = orjson.loads(line[5:].strip())
            except orjson.JSONDecodeError:
                return None
            if isinstance(data, dict) and isinstance(data.get("error"), dict):
                return data
    return None


class OpenAICompatProvider:
    """Sends Chat Completions bodies to ``{api_base}/chat/completions`` as they are."""

    def __init__(
        self,
        name: str,
        *,
        api_base: str,
        api_key: str | None,
        pool: HttpPool,
        timeouts: UpstreamTimeouts,
        extra_headers: Mapping[str, str] | None = None,
        stream_timeouts: UpstreamTimeouts | None = None,
    ) -> None:
        self.name = name
        self.url = api_base.rstrip("/") + "/chat/completions"
        self._pool = pool
        self._timeout = timeouts.client_timeout()
        self._stream_timeout = (stream_timeouts or timeouts).client_timeout()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        headers.update(extra_headers or {})
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._headers = headers
        self._stream_headers = {**headers, "Accept": "text/event-stream"}

    async def send(self, call: UpstreamCall) -> UpstreamResponse:
        """Send once; raise UpstreamError with a normalized failure on any refusal."""
        data = call.raw if call.raw is not None else orjson.dumps(call.body)
        headers = self._stream_headers if call.stream else self._headers
        if call.request_id:
            headers = {**headers, "X-Request-ID": call.request_id}
        if call.headers:  # trace context (traceparent) for the upstream's own tracing
            headers = {**headers, **dict(call.headers)}
        try:
            resp = await self._pool.session.post(
                self.url, data=data, headers=headers,
                timeout=self._stream_timeout if call.stream else self._timeout)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(failure_from_exception(exc, self.name)) from None
        try:
            if resp.status >= 400:
                body = await resp.read()
                raise UpstreamError(failure_from_http(resp.status, resp.headers, body, self.name))
            ctype = resp.headers.get("Content-Type", "")
            if call.stream and "text/event-stream" in ctype:
                return await self._open_stream(resp)
            body = await resp.read()
            resp.release()
            return BufferedResponse(body, resp.status, ctype or "application/json",
                                    relayed(resp.headers))
        except UpstreamError:
            resp.release()
            raise
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            resp.close()
            raise UpstreamError(failure_from_exception(exc, self.name)) from None
        except BaseException:
            resp.close()
            raise

    async def _open_stream(self, resp: aiohttp.ClientResponse) -> RelayedStream:
        buf = b""
        while True:
            chunk = await resp.content.readany()
            if not chunk:
                break
            buf += chunk
            end = _first_event_end(buf)
            if end >= 0:
                error = _error_in_event(buf[:end])
                if error is not None:
                    resp.close()
                    err = error["error"]
                    code = err.get("code") if isinstance(err, dict) else None
                    status = code if isinstance(code, int) and 400 <= code < 600 else 502
                    raise UpstreamError(
                        failure_from_http(status, resp.headers, orjson.dumps(error), self.name)
                    )
                break
        if b"data:" not in buf:
            # Ended before any event: nothing reached the client yet, so it can be retried.
            resp.close()
            raise UpstreamError(UpstreamFailure(
                status=502, provider=self.name,
                message="upstream ended the stream before sending any event"))
        return RelayedStream(resp, buf, self.name, relay_headers=relayed(resp.headers))
