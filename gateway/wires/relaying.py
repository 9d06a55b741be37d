"""How each wire answers a client, for the one relay every model route shares.

The relay (``gateway.server.relay``) runs the Flow and writes what these objects make of
the upstream's answer; a wire plugs in only its own part:

- :class:`ChatAnswer`: Chat Completions relayed as they come (a stream ends with
  ``data: [DONE]``; a failure with ``data: {"error": ...}`` and then ``data: [DONE]``);
- :class:`NativeAnswer`: an upstream that speaks the client's wire (Anthropic Messages,
  Responses), relayed as it comes; a failure ends with Anthropic's ``event: error``, or the
  Responses ``error`` event followed by ``response.failed``;
- :class:`TranslatedAnswer`: a chat answer translated to Anthropic Messages or Responses
  (``anthropic_answer`` / ``responses_answer``), ending the same way.

Each also renders the gateway's give-up in the wire's error shape. A stream, once started,
always ends with the wire's own terminal event: its end, or its error event.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from gateway.errors import error_body, sse_error_event
from gateway.providers.sse import EVENT_END, parse_event
from gateway.wires.anthropic_answer import AnthropicAnswer
from gateway.wires.errors import anthropic_error, anthropic_from_openai, anthropic_type
from gateway.wires.responses_answer import (
    ResponsesAnswer,
    responses_failed_event,
    responses_failure_events,
)
from gateway.wires.sse import ChunkReader, chunk_from_completion
from gateway.wires.whole_stream import WholeAsStream

DONE = b"data: [DONE]\n\n"


class UnusableAnswer(Exception):
    """An upstream answer the wire cannot be given (answered ``502``)."""


class StreamShape(Protocol):
    """One streamed answer on its way to the client (see the module docstring)."""

    ended: bool  # the wire's terminal event was made: nothing more is sent

    def feed(self, chunk: bytes) -> list[bytes]:
        """What to write for one upstream chunk (whole SSE events)."""
        ...

    def finish(self) -> list[bytes]:
        """What to write when the upstream stream is over (its terminal event, if none)."""
        ...

    def failed(self, status: int, message: str) -> list[bytes]:
        """The wire's terminal error event(s) for a failure after the first byte."""
        ...


class WireAnswer(Protocol):
    """A wire's way of answering, plugged into the shared relay."""

    def error(self, status: int, body: dict[str, Any]) -> dict[str, Any]:
        """The gateway's error body (OpenAI envelope plus extras) in the wire's shape."""
        ...

    def whole(self, body: bytes, content_type: str) -> tuple[bytes, str]:
        """The body and content type to send for a whole upstream answer (raises
        :class:`UnusableAnswer` or any error when it cannot be given to the client)."""
        ...

    def stream(self, sse: bool) -> StreamShape | None:
        """How to stream this answer (``sse``: the upstream streams), or None to send it
        whole."""
        ...


def split_events(chunk: bytes) -> list[bytes]:
    """The SSE events of ``chunk`` (whole events), each with the blank line that ends it."""
    out: list[bytes] = []
    start = 0
    for match in EVENT_END.finditer(chunk):
        out.append(chunk[start:match.end()])
        start = match.end()
    if start < len(chunk):
        out.append(chunk[start:])
    return out


def error_of(data: bytes | None) -> dict[str, Any] | None:
    """The ``error`` object of an OpenAI-shaped failure event's data (``{"error": {...}}``,
    the gateway's own late-failure event or an upstream's), else None."""
    if data is None or b'"error"' not in data:
        return None
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict) and (
            "choices" not in parsed):
        return parsed["error"]  # type: ignore[no-any-return]
    return None


def _message(error: dict[str, Any]) -> str:
    message = error.get("message")
    return message if isinstance(message, str) and message else "the upstream stream failed"


def _status(error: dict[str, Any]) -> int:
    # An upstream's late failure may state its status as its code (LiteLLM's proxy sends
    # "429" as a string): a rate limit stays one on the client's wire.
    code = error.get("code")
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600:
        return code
    return 504 if error.get("type") == "timeout_error" else 502


def _event_type(data: bytes) -> bytes | None:
    """The ``type`` of an event's JSON data, as an event name."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    kind = parsed.get("type") if isinstance(parsed, dict) else None
    return kind.encode() if isinstance(kind, str) else None


# What makes a chat chunk worth parsing: its end, a failure, fields an SDK may trip on.
_CHAT_LOOKED_AT = (b"[DONE]", b'"error"', b"event:", b"retry:", b"id:")
_NO_COMMENT = re.compile(rb"(?m)^[^:\r\n]")  # a line that is a field, not a comment


class ChatRelay:
    """A Chat Completions stream relayed byte for byte (events are looked into only when
    they may end it)."""

    def __init__(self) -> None:
        self.ended = False

    def feed(self, chunk: bytes) -> list[bytes]:
        """The chunk as it came, up to the stream's end (``[DONE]`` or an error event,
        which is followed by ``[DONE]``)."""
        if self.ended:
            return []
        if not any(mark in chunk for mark in _CHAT_LOOKED_AT):
            return [chunk]
        out: list[bytes] = []
        for event in split_events(chunk):
            data = parse_event(event).data
            if data is None and _NO_COMMENT.search(event):
                # An event of fields without data (``event:``, ``retry:``, ``id:``) is
                # nothing in the SSE format, but the OpenAI SDK parses its empty data as
                # JSON and fails: it is not relayed (comments, keep-alives, still are).
                continue
            out.append(event)
            if data == b"[DONE]":
                self.ended = True
                break
            if error_of(data) is not None:
                out.append(DONE)
                self.ended = True
                break
        return out

    def finish(self) -> list[bytes]:
        """An error event when the stream ended without ``[DONE]``."""
        if self.ended:
            return []
        return self.failed(502, "the upstream stream ended without its final event")

    def failed(self, status: int, message: str) -> list[bytes]:
        """``data: {"error": ...}`` then ``data: [DONE]``."""
        self.ended = True
        return [sse_error_event(error_body(message, status=status)), DONE]


class ChatAnswer:
    """Chat Completions, relayed as the upstream answered."""

    def error(self, status: int, body: dict[str, Any]) -> dict[str, Any]:
        """The envelope as it is."""
        return body

    def whole(self, body: bytes, content_type: str) -> tuple[bytes, str]:
        """The body as it came (checked by the provider's answer model)."""
        return body, content_type

    def stream(self, sse: bool) -> StreamShape | None:
        """Relayed as the upstream streams; a whole answer to a streamed request becomes
        the stream's one chunk (``whole_stream``)."""
        return ChatRelay() if sse else WholeAsStream("chat")


_NUMBER = re.compile(rb'"sequence_number"\s*:\s*(\d+)')


def _next_number(chunk: bytes, counted: int) -> int:
    """The next Responses sequence number after ``chunk`` (whole events): one past the
    last number it carries, when an upstream's numbers run ahead of the events counted
    (``counted``, gaps in its numbering)."""
    at = chunk.rfind(b'"sequence_number"')
    found = _NUMBER.match(chunk, at) if at >= 0 else None
    return max(counted, int(found[1]) + 1) if found else counted


ANTHROPIC_ENDS = (b"message_stop", b"error")
RESPONSES_ENDS = (b"response.completed", b"response.failed", b"response.incomplete", b"error")


class NativeRelay:
    """A native Anthropic Messages or Responses stream relayed byte for byte, up to its
    terminal event; the gateway's own late-failure event becomes the wire's error event."""

    def __init__(self, anthropic: bool) -> None:
        self.ended = False
        self._anthropic = anthropic
        self._ends = ANTHROPIC_ENDS if anthropic else RESPONSES_ENDS
        self._response: dict[str, Any] | None = None  # Responses: the streamed object
        self._seq = 0  # Responses: the next sequence number

    def feed(self, chunk: bytes) -> list[bytes]:
        """The chunk as it came, up to the stream's terminal event."""
        if self.ended:
            return []
        if (b"error" not in chunk and not any(end in chunk for end in self._ends)
                and (self._anthropic or b"response.created" not in chunk)):
            if not self._anthropic:  # one data line an event (JSON holds no raw newline)
                self._seq = _next_number(chunk, self._seq + chunk.count(b"\ndata:")
                                         + chunk.startswith(b"data:"))
            return [chunk]
        out: list[bytes] = []
        for event in split_events(chunk):
            fields = parse_event(event)
            name, data = fields.name, fields.data
            if name is None and data is not None:
                error = error_of(data)
                if error is not None:  # the gateway's own (OpenAI-shaped) late failure
                    return [*out, *self.failed(_status(error), _message(error))]
                name = _event_type(data)  # a stream of data lines only: the type says
            out.append(event)
            if data is not None and not self._anthropic:
                self._seq = _next_number(data, self._seq + 1)
            if name == b"response.created" and data is not None:
                self._keep_response(data)
            if name in self._ends:
                self.ended = True
                if name == b"error" and not self._anthropic and data is not None:
                    # The upstream's own error event ends its stream: the terminal
                    # response.failed follows, as after the gateway's own late failure.
                    out.append(self._failed_after(data))
                break
        return out

    def _failed_after(self, data: bytes) -> bytes:
        """The ``response.failed`` that ends a Responses stream after the upstream's own
        ``error`` event (``data``), with its code and message."""
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            parsed = None
        error = parsed if isinstance(parsed, dict) else {}
        code = error.get("code")
        response = self._response or {"id": "resp_failed", "object": "response",
                                      "output": []}
        return responses_failed_event(response, self._seq,
                                      code if isinstance(code, str) and code else
                                      "server_error", _message(error))

    def _keep_response(self, data: bytes) -> None:
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if isinstance(parsed, dict) and isinstance(parsed.get("response"), dict):
            self._response = parsed["response"]

    def finish(self) -> list[bytes]:
        """An error event when the stream ended without its terminal event."""
        if self.ended:
            return []
        return self.failed(502, "the upstream stream ended without its final event")

    def failed(self, status: int, message: str) -> list[bytes]:
        """Anthropic's ``error`` event, or the Responses ``error`` + ``response.failed``."""
        self.ended = True
        if self._anthropic:
            data = anthropic_error(status, message, anthropic_type(status))
            return [b"event: error\ndata: " + orjson.dumps(data) + b"\n\n"]
        response = self._response or {"id": "resp_failed", "object": "response",
                                       "output": []}
        return responses_failure_events(response, self._seq, status, message)


class NativeAnswer:
    """An answer from an upstream that speaks the client's wire, relayed as it came."""

    def __init__(self, anthropic: bool) -> None:
        self._anthropic = anthropic

    def error(self, status: int, body: dict[str, Any]) -> dict[str, Any]:
        """Anthropic's error shape on Messages; the OpenAI envelope on Responses."""
        return anthropic_from_openai(status, body) if self._anthropic else body

    def whole(self, body: bytes, content_type: str) -> tuple[bytes, str]:
        """The body as it came (checked by the native sender's answer model)."""
        return body, content_type

    def stream(self, sse: bool) -> StreamShape | None:
        """Relayed as the upstream streams; a whole answer to a streamed request becomes
        the wire's events (``whole_stream``)."""
        if sse:
            return NativeRelay(self._anthropic)
        return WholeAsStream("anthropic" if self._anthropic else "responses")


class TranslatedRelay:
    """Chat chunks (an SSE stream, or one whole ``chat.completion``) as the wire's events."""

    def __init__(self, answer: AnthropicAnswer | ResponsesAnswer, sse: bool) -> None:
        self.ended = False
        self._answer = answer
        self._reader = ChunkReader() if sse else None
        self._whole = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        """The wire's events for the chat chunks in ``chunk``."""
        if self.ended:
            return []
        if self._reader is None:
            self._whole += chunk
            return []
        return self._translate(self._reader.feed(chunk))

    def _translate(self, chunks: list[Any]) -> list[bytes]:
        out: list[bytes] = []
        for chunk in chunks:
            error = chunk.get("error") if isinstance(chunk, dict) else None
            if isinstance(error, dict):
                return [*out, *self.failed(_status(error), _message(error))]
            out += self._answer.feed(chunk)
        return out

    def finish(self) -> list[bytes]:
        """The closing events (after the whole answer's, when it came whole)."""
        if self.ended:
            return []
        out: list[bytes] = []
        if self._reader is None:
            try:
                body = orjson.loads(self._whole)
            except orjson.JSONDecodeError:
                body = None
            out = self._translate([chunk_from_completion(body)])
            if self.ended:
                return out
        self.ended = True
        return out + self._answer.finish()

    def failed(self, status: int, message: str) -> list[bytes]:
        """The wire's error event(s); on Responses, ``response.failed`` follows."""
        self.ended = True
        if isinstance(self._answer, AnthropicAnswer):
            return [self._answer.error_event({"message": message,
                                              "type": anthropic_type(status)})]
        return self._answer.fail(status, message)


class TranslatedAnswer:
    """A chat answer translated to the client's wire."""

    def __init__(self, answer: AnthropicAnswer | ResponsesAnswer,
                 final: Callable[[], dict[str, Any]]) -> None:
        self._answer = answer
        self._final = final

    @property
    def anthropic(self) -> bool:
        """True on the Messages wire."""
        return isinstance(self._answer, AnthropicAnswer)

    def error(self, status: int, body: dict[str, Any]) -> dict[str, Any]:
        """Anthropic's error shape on Messages; the OpenAI envelope on Responses."""
        return anthropic_from_openai(status, body) if self.anthropic else body

    def whole(self, body: bytes, content_type: str) -> tuple[bytes, str]:
        """The finished wire object for a whole chat answer."""
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            parsed = None
        chunk = chunk_from_completion(parsed)
        error = chunk.get("error")
        if isinstance(error, dict):
            raise UnusableAnswer(_message(error))
        self._answer.feed(chunk)
        self._answer.finish()
        return orjson.dumps(self._final()), "application/json"

    def stream(self, sse: bool) -> StreamShape | None:
        """Always streamed (a whole chat answer becomes the wire's events)."""
        return TranslatedRelay(self._answer, sse)
