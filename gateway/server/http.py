"""The HTTP layer under the app: parse errors in the OpenAI envelope, bounded header and body
reads.

aiohttp answers a request it cannot parse (an oversized or malformed header, a bad request
line, ``Content-Length`` with ``Transfer-Encoding``, a bad chunk, an undecodable
``Content-Encoding``) from its protocol object, before any middleware runs, with a plain-text
page and a logged traceback. :class:`GatewayRunner` serves the app with a protocol that
answers those in the OpenAI error envelope with one quiet log line, and that gives a client
``header_timeout`` seconds to send its request headers (answered ``408``, then closed).
:func:`read_body` reads a request body within ``body_timeout`` seconds and turns every
decoding failure into a 4xx. The private aiohttp members this needs are used only through
:mod:`gateway.server.aiohttp_private`.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from gateway.server import aiohttp_private as private
from gateway.server.errors import ClientError, wire_error_response

log = logging.getLogger("gateway.server")

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 60.0
DEFAULT_KEEPALIVE_TIMEOUT = 75.0  # idle keep-alive connections (aiohttp's own default is 1 h)
# What a client may name in Content-Encoding (aiohttp decodes these; br needs the optional
# brotli library, and is refused with a ContentEncodingError without it).
KNOWN_ENCODINGS = frozenset({"", "identity", "gzip", "x-gzip", "deflate", "br", "zstd"})
_MAX_DETAIL = 200
_REASONS = {400: "Bad Request", 408: "Request Timeout", 413: "Payload Too Large",
            415: "Unsupported Media Type", 431: "Request Header Fields Too Large",
            500: "Internal Server Error"}


# The request line at the start of a request head: its path names the wire to answer in.
_REQUEST_LINE = re.compile(rb"\s*[A-Za-z]+ +([^ \r\n?]+)")
_HEAD_KEPT = 512  # bytes of a request head's start remembered for that


def envelope_bytes(status: int, message: str, *, code: str | None = None,
                   path: str = "") -> bytes:
    """The error body for ``status`` as JSON bytes: Anthropic's for a Messages ``path``,
    else the OpenAI envelope."""
    body = wire_error_response(path, ClientError(status, message, code=code)).body
    assert isinstance(body, bytes)
    return body


def _path_of(head: bytes) -> str:
    """The path of the request line ``head`` starts with ("" when it does not)."""
    found = _REQUEST_LINE.match(head)
    return found.group(1).decode("latin-1") if found else ""


# The request bytes a parser error quotes (``b'x-api-key sk-...' ^``, a line too long's
# preview): a key the gateway does not know, a header written without its colon, a query's
# ``?key=`` may be among them, so none is shown (a closed quote, or one cut off at the end).
_QUOTED_BYTES = re.compile(r"""\bb(['"])(?:\\.|(?!\1).)*\1(?:\s*\^)?|\bb['"].*$""")


def _parse_error(exc: BaseException | None, message: str | None) -> tuple[int, str, str]:
    """Status, client message and code for an HTTP parse error (never the request's own
    bytes: :data:`_QUOTED_BYTES`)."""
    detail = (getattr(exc, "message", None) or message or "malformed request")
    detail = " ".join(str(detail).split())
    detail = _QUOTED_BYTES.sub("(the request's bytes are not shown)", detail)[:_MAX_DETAIL]
    lowered = detail.lower()
    if (isinstance(exc, LineTooLong) and "status line" not in lowered) or "too many headers" in (
            lowered):
        return 431, f"request headers are too large: {detail}", "request_headers_too_large"
    if "content-encoding" in lowered:
        return 415, f"unsupported Content-Encoding: {detail}", "unsupported_content_encoding"
    return 400, f"malformed HTTP request: {detail}", "bad_http_request"


class GatewayProtocol(RequestHandler):
    """aiohttp's request handler with envelope parse errors and a header-read timeout."""

    def __init__(self, manager: Any, *, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout = header_timeout
        self._header_timer: asyncio.TimerHandle | None = None
        self.closes_after_response = False  # the body could not be read: no next request
        self._partial = False  # bytes of an unfinished request head were received
        self._head = b""  # the start of the latest request head (its request line)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start the clock for the first request's headers."""
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        """Stop the header clock."""
        self._cancel_header_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Parse as usual; keep the header clock running while only part of a head came."""
        before = private.requests_started(self)
        if data and self._awaiting_request():
            # A parse error is answered in the wire of the path the client asked for.
            self._head = (self._head + data if self._partial else data)[:_HEAD_KEPT]
        super().data_received(data)
        if private.requests_started(self) != before:
            self._partial = False
            self._cancel_header_timer()
        elif data and self._awaiting_request():
            self._partial = True
            if self._header_timer is None:
                self._arm_header_timer()

    def _awaiting_request(self) -> bool:
        return private.awaiting_request(self)

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        self._header_timer = private.protocol_loop(self).call_later(self._header_timeout,
                                                                    self._headers_late)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self._awaiting_request() or self.transport is None:
            return  # a request is being served: its own deadlines apply
        if self._partial:
            log.info("closing a connection whose request headers took over %gs",
                     self._header_timeout)
            body = envelope_bytes(408, f"request headers not received within "
                                  f"{self._header_timeout:g}s", code="request_timeout",
                                  path=_path_of(self._head))
            self.transport.write(_raw_response(408, body))
        self.force_close()

    def stop_lingering(self) -> None:
        """Close right after the response instead of reading the rest of a stalled body
        (the response says so: a keep-alive client sends its next request elsewhere)."""
        private.stop_lingering(self)
        self.closes_after_response = True

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """A request aiohttp could not parse (or serve): an error body in the wire of the
        path the request line named (the OpenAI envelope when none), one log line."""
        if request.writer.output_size > 0:
            raise ConnectionError("response already started: cannot send an error response")
        if status == 500 and not isinstance(exc, HttpProcessingError):
            self.log_exception("error handling request", exc_info=exc)
            body = envelope_bytes(500, "internal gateway error", path=request.path)
        else:
            status, text, code = _parse_error(exc, message)
            log.info("refused a malformed HTTP request from %s: %s", request.remote, text)
            body = envelope_bytes(status, text, code=code, path=_path_of(self._head))
        resp = web.Response(status=status, body=body, content_type="application/json")
        resp.force_close()
        return resp


def _raw_response(status: int, body: bytes) -> bytes:
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n")
    return head.encode() + body


class GatewayServer(web.Server):
    """aiohttp's low-level server, building :class:`GatewayProtocol` connections."""

    def __init__(self, *args: Any, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout

    def __call__(self) -> RequestHandler:
        """A protocol object for a new connection."""
        return private.new_protocol(self, GatewayProtocol, header_timeout=self.header_timeout)


class GatewayRunner(private.ServerSwappingRunner):
    """An AppRunner serving through :class:`GatewayServer` (same arguments as AppRunner)."""

    def __init__(self, app: web.Application, *, header_timeout: float = DEFAULT_HEADER_TIMEOUT,
                 **kwargs: Any) -> None:
        kwargs.setdefault("keepalive_timeout", DEFAULT_KEEPALIVE_TIMEOUT)
        super().__init__(app, **kwargs)
        self._header_timeout = header_timeout

    def swap_server(self, server: web.Server) -> web.Server:
        """The app's server, rebuilt to make :class:`GatewayProtocol` connections."""
        return self.rebuild(server, GatewayServer, header_timeout=self._header_timeout)


async def read_body(request: web.Request, *, timeout: float = DEFAULT_BODY_TIMEOUT) -> bytes:
    """The request body, decoded, within ``timeout`` seconds.

    Raises ClientError: 415 for an unknown Content-Encoding, 400 for a body that does not
    decode, 408 when the client stalls (the connection is then closed after the answer).
    The size limit (413) is aiohttp's ``client_max_size``, counted after decompression.
    """
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in KNOWN_ENCODINGS:
        raise ClientError(415, f"unsupported Content-Encoding {encoding[:40]!r}; send the body "
                          "as identity, gzip, deflate, br or zstd",
                          code="unsupported_content_encoding")
    protocol = request.protocol
    try:
        if request.content.is_eof():  # all of it is in memory already: nothing to wait for
            return await request.read()
        async with asyncio.timeout(timeout):
            return await request.read()
    except TimeoutError:
        if isinstance(protocol, GatewayProtocol):
            protocol.stop_lingering()
        raise ClientError(408, f"request body not received within {timeout:g}s",
                          code="request_timeout") from None
    except (HttpProcessingError, web.RequestPayloadError) as exc:
        if isinstance(protocol, GatewayProtocol):
            protocol.stop_lingering()  # the rest of the body cannot be parsed either
        cause = exc.__cause__ if isinstance(exc.__cause__, HttpProcessingError) else exc
        detail = str(getattr(cause, "message", "") or cause).strip()[:_MAX_DETAIL]
        if encoding not in ("", "identity") and "encoding" in detail.lower():
            message = (f"request body could not be decoded (Content-Encoding {encoding}): "
                       f"{detail}")
            raise ClientError(400, message, code="bad_content_encoding") from None
        raise ClientError(400, f"malformed request body: {detail}",
                          code="bad_request_body") from None
