"""One reader for every server-sent-event stream the gateway reads (pure, no I/O).

The rules are the event-stream format's (WHATWG HTML, "Server-sent events"), the parts of it
an upstream's answer uses: an event ends at a blank line (``\\n\\n``, ``\\r\\n\\r\\n``); a line
is a field (``name: value``, one space after the colon dropped) or a comment (``:`` first);
an event's ``data`` is its ``data`` lines joined with ``\\n``, so a JSON object split over
several ``data:`` lines reads as one. ``data: [DONE]`` ends a Chat Completions stream.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

DONE = b"[DONE]"
FIELDS = frozenset({b"data", b"event", b"id", b"retry"})
# The end of an event: a blank line, in either line ending.
EVENT_END = re.compile(rb"\r?\n\r?\n")
BARE_CR = re.compile(rb"\r(?!\n)")
BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One event: its bytes as they came (the blank line that ended it included), its
    ``event`` name and ``data`` (None without such lines), and the first line that is no
    SSE field (None when every line is one)."""

    raw: bytes
    name: bytes | None
    data: bytes | None
    stray: bytes | None = None

    @property
    def done(self) -> bool:
        """``data: [DONE]``: the end of a Chat Completions stream."""
        return self.data == DONE

    def json(self) -> Any:
        """The event's data as JSON (None without data, at ``[DONE]`` or when it is not
        JSON)."""
        if self.data is None or self.data == DONE:
            return None
        try:
            return orjson.loads(self.data)
        except orjson.JSONDecodeError:
            return None


def parse_event(raw: bytes) -> SseEvent:
    """The fields of one event (``raw``: its lines, with or without the blank line)."""
    name: bytes | None = None
    data: list[bytes] = []
    stray: bytes | None = None
    for line in raw.split(b"\n"):
        line = line.rstrip(b"\r")
        if not line or line[:1] == b":":
            continue  # a comment or keep-alive
        field, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value
        elif field not in FIELDS and stray is None:
            stray = line
    return SseEvent(raw, name, b"\n".join(data) if data else None, stray)


# The ``type`` of events that only say a native stream is alive: Anthropic's ``ping``, the
# Responses API's ``response.in_progress``.
KEEP_ALIVE_TYPES = frozenset({"ping", "response.in_progress"})
# Bytes at least one keep-alive event holds (a cheap test before any event is parsed).
_KEEP_ALIVE_HINTS = (b'"ping"', b"response.in_progress", b'"delta":{}', b'"delta": {}',
                     b'"content":""', b'"content": ""')


def is_keep_alive(event: SseEvent) -> bool:
    """Whether ``event`` carries no output: no data (a comment, a blank event), Anthropic's
    ``ping``, a ``response.in_progress``, or a chat chunk whose deltas are all empty (no
    text, no call, no finish reason, no usage)."""
    if event.data is None:
        return True
    data = event.json()
    if not isinstance(data, dict):
        return False
    if data.get("type") in KEEP_ALIVE_TYPES:
        return True
    choices = data.get("choices")
    if "type" in data or not isinstance(choices, list) or not choices or data.get("usage"):
        return False
    return _deltas_empty(choices, but=None)


def _deltas_empty(choices: list[Any], *, but: str | None) -> bool:
    """Whether every choice is an unfinished delta that carries nothing (empty values),
    ``but`` (a key whose value is not output: the ``role``) aside."""
    for choice in choices:
        if not isinstance(choice, dict) or choice.get("finish_reason") is not None:
            return False
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return False
        if any(value for key, value in delta.items() if key != but):
            return False
    return True


def _no_tokens_yet(usage: Any, choices: Any) -> bool:
    """Whether a chunk's ``usage`` says nothing was generated yet: vLLM's role chunk with
    per-chunk usage (``continuous_usage_stats``, and ``include_usage`` on some versions)
    counts ``completion_tokens: 0``. A usage-only chunk (no choices) is the answer's end."""
    return (isinstance(usage, dict) and usage.get("completion_tokens") == 0
            and isinstance(choices, list) and bool(choices))


def is_chat_opening(data: Any) -> bool:
    """Whether a chat stream's chunk (parsed) only opens the answer: its deltas carry at
    most the ``role`` (``{"role": "assistant", "content": ""}``, as most servers send
    first), no finish reason, no usage (but a usage of no completion tokens yet); or it has
    no choices at all (Azure's ``prompt_filter_results`` chunk). Text, calls, reasoning
    and refusals are output."""
    if not isinstance(data, dict) or "type" in data or "error" in data:
        return False
    choices = data.get("choices")
    if data.get("usage") and not _no_tokens_yet(data["usage"], choices):
        return False
    return isinstance(choices, list) and _deltas_empty(choices, but="role")


def has_output(data: bytes) -> bool:
    """Whether the whole events of ``data`` include one that is not a keep-alive
    (:func:`is_keep_alive`): what shows that a stream is still making progress."""
    if b"data:" not in data:
        return False
    if not any(hint in data for hint in _KEEP_ALIVE_HINTS):
        return True
    start = 0
    for end in EVENT_END.finditer(data):
        if not is_keep_alive(parse_event(data[start:end.end()])):
            return True
        start = end.end()
    return bool(data[start:].strip()) and not is_keep_alive(parse_event(data[start:]))


def only_opening(data: bytes) -> bool:
    """Whether every whole event of ``data`` is a keep-alive (:func:`is_keep_alive`) or a
    chat chunk that only opens the answer (:func:`is_chat_opening`): a role chunk sent
    again and again is no progress."""
    start = 0
    for end in EVENT_END.finditer(data):
        event = parse_event(data[start:end.end()])
        start = end.end()
        if not (is_keep_alive(event) or is_chat_opening(event.json())):
            return False
    return True


def ends_with(data: bytes, markers: tuple[bytes, ...]) -> bool:
    """Whether the last whole event of ``data`` is a final one: ``data: [DONE]`` (when
    ``[DONE]`` is a marker), or an event whose name or JSON ``type`` is a marker (text that
    merely mentions one does not count)."""
    events = EVENT_END.split(data.rstrip(b"\r\n"))
    last = parse_event(events[-1]) if events else None
    if last is None or last.data is None:
        return False
    if last.done:
        return DONE in markers
    if last.name is not None:
        return last.name in markers
    payload = last.json()
    kind = payload.get("type") if isinstance(payload, dict) else None
    return isinstance(kind, str) and kind.encode() in markers


def first_oversized(data: bytes, cap: int) -> int | None:
    """The offset of the first event of ``data`` longer than ``cap`` bytes (None: none
    is)."""
    start = 0
    for end in EVENT_END.finditer(data):
        if end.end() - start > cap:
            return start
        start = end.end()
    return start if len(data) - start > cap else None


class SseReader:
    """Splits a stream's bytes, cut anywhere, into whole events."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events ``chunk`` completes (with the bytes pending before it)."""
        buf = self._pending + chunk if self._pending else chunk
        out: list[SseEvent] = []
        start = 0
        for end in EVENT_END.finditer(buf):
            out.append(parse_event(buf[start:end.end()]))
            start = end.end()
        self._pending = buf[start:]
        return out

    def rest(self) -> bytes:
        """The bytes after the last whole event (an event the stream did not finish)."""
        return self._pending


class LineEnds:
    """Rewrites bare CR line ends as LF in a stream's bytes, cut anywhere, and drops a
    leading UTF-8 byte order mark.

    The format allows CR alone as a line end (rare: some proxies and embedded servers) and
    one BOM before the first line; every splitter of the gateway knows LF and CRLF only, so
    a stream is read through this first. A CR that ends a chunk waits for the next one (it
    may start a CRLF)."""

    __slots__ = ("_cr", "_head")

    def __init__(self) -> None:
        self._cr = False
        self._head: bytes | None = b""  # the stream's first bytes, until past a BOM

    def feed(self, chunk: bytes) -> bytes:
        """``chunk`` with its bare CRs as LF (a final CR held back)."""
        if self._head is not None:
            chunk = self._head + chunk
            if len(chunk) < len(BOM) and BOM.startswith(chunk):
                self._head = chunk  # (maybe a BOM cut by the network)
                return b""
            self._head = None
            if chunk.startswith(BOM):
                chunk = chunk[len(BOM):]
        if self._cr:
            chunk = b"\r" + chunk
            self._cr = False
        if b"\r" not in chunk:
            return chunk
        if chunk[-1:] == b"\r":
            chunk = chunk[:-1]
            self._cr = True
        return BARE_CR.sub(b"\n", chunk)

    def flush(self) -> bytes:
        """At the stream's end: the line end of a CR held back (or the first bytes held as
        a possible BOM), else nothing."""
        if self._head:
            head, self._head = self._head, None
            return head
        if self._cr:
            self._cr = False
            return b"\n"
        return b""
