"""Token usage from an upstream answer, without parsing the whole answer.

Only the ``"usage": {...}`` object is decoded: found by a byte search (inside JSON strings a
quote is escaped, so ``"usage"`` followed by a colon can only be a key), cut out by counting
braces and parsed alone. Streams are scanned chunk by chunk and only a chunk that mentions
``"usage"`` is looked at; OpenAI's ``"usage": null`` on every chunk is skipped by the same
search. Works for OpenAI (``prompt_tokens``/``completion_tokens``) and Anthropic-style
(``input_tokens``/``output_tokens``) objects.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

_USAGE = re.compile(rb'"usage"\s*:\s*\{')
_MODEL = re.compile(rb'"model"\s*:\s*"([^"\\]{1,200})"')
_BRACE = re.compile(rb"[{}]")
_MAX_EVENT = 64 * 1024


@dataclass(slots=True)
class Usage:
    """Tokens the upstream reported (None when it did not)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    # Prompt caching: tokens read from the provider's cache (OpenAI ``cached_tokens``,
    # Anthropic ``cache_read_input_tokens``) and written to it (Anthropic
    # ``cache_creation_input_tokens``). Anthropic counts both apart from ``input_tokens``.
    cache_read: int | None = field(default=None, compare=False)
    cache_write: int | None = field(default=None, compare=False)
    cache_apart: bool = field(default=False, compare=False)

    def merge(self, other: Usage) -> None:
        """Take the fields ``other`` reports."""
        if other.input_tokens is not None:
            self.input_tokens = other.input_tokens
        if other.output_tokens is not None:
            self.output_tokens = other.output_tokens
        if other.cache_read is not None:
            self.cache_read = other.cache_read
        if other.cache_write is not None:
            self.cache_write = other.cache_write
        self.cache_apart = self.cache_apart or other.cache_apart

    @property
    def prompt_tokens(self) -> int | None:
        """Every input token of the request, cached or not (None when not reported)."""
        if self.input_tokens is None:
            return None
        if not self.cache_apart:
            return self.input_tokens
        return self.input_tokens + (self.cache_read or 0) + (self.cache_write or 0)


def _object_end(data: bytes, start: int) -> int:
    """Index just past the JSON object opening at ``start``, or -1 when incomplete.

    Only braces are visited (a usage object's keys and numbers hold none); a brace inside a
    string value would at worst make the slice unparseable, and the usage is then skipped.
    """
    depth = 0
    for match in _BRACE.finditer(data, start, min(len(data), start + _MAX_EVENT)):
        if match.group() == b"{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return match.end()
    return -1


def _int(value: object) -> int | None:
    # (a negative count is no count: a meter cannot go back, and the request's record
    # would be lost with it)
    return (value if isinstance(value, int) and not isinstance(value, bool) and value >= 0
            else None)


def _from_object(raw: bytes) -> Usage | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return usage_of(obj)


def usage_of(obj: object) -> Usage | None:
    """The tokens of a parsed ``usage`` object (None when it is not an object)."""
    if not isinstance(obj, dict):
        return None
    inp = _int(obj.get("prompt_tokens"))
    if inp is None:
        inp = _int(obj.get("input_tokens"))
    out = _int(obj.get("completion_tokens"))
    if out is None:
        out = _int(obj.get("output_tokens"))
    usage = Usage(inp, out)
    details = obj.get("prompt_tokens_details") or obj.get("input_tokens_details")
    if isinstance(details, dict):
        usage.cache_read = _int(details.get("cached_tokens"))
    read, write = obj.get("cache_read_input_tokens"), obj.get("cache_creation_input_tokens")
    if read is not None or write is not None:
        usage.cache_read, usage.cache_write = _int(read), _int(write)
        usage.cache_apart = True
    return usage


def usage_in(data: bytes) -> tuple[Usage | None, bool]:
    """The last complete usage object in ``data``; the flag is True when a usage object
    starts but is cut off (more bytes are needed)."""
    found: Usage | None = None
    incomplete = False
    for match in _USAGE.finditer(data):
        brace = match.end() - 1
        end = _object_end(data, brace)
        if end < 0:
            incomplete = len(data) - brace < _MAX_EVENT
            continue
        incomplete = False
        usage = _from_object(data[brace:end])
        if usage is not None:
            if found is None:
                found = usage
            else:
                found.merge(usage)
    return found, incomplete


def answer_usage(data: bytes, parsed: Mapping[str, Any] | None) -> tuple[Usage | None, str]:
    """Usage and model of a whole (non-stream) answer: from its parsed object when the caller
    has one (its top-level ``usage`` and ``model``), else found in its bytes."""
    if parsed is None or "usage" not in parsed:
        return usage_in(data)[0], response_model(data)
    model = parsed.get("model")
    return usage_of(parsed["usage"]), model if isinstance(model, str) else ""


def response_model(data: bytes) -> str:
    """The ``model`` an answer names (first occurrence), or empty."""
    match = _MODEL.search(data, 0, 4096)
    return match.group(1).decode("utf-8", "replace") if match else ""


class StreamUsage:
    """Finds usage while an SSE stream is relayed; feed it every chunk."""

    __slots__ = ("_pending", "_tail", "model", "usage")

    def __init__(self) -> None:
        self.usage = Usage()
        self.model = ""
        self._tail = b""
        self._pending: bytes | None = None

    def feed(self, chunk: bytes) -> None:
        """Look at one relayed chunk (cheap unless it mentions ``"usage"``)."""
        if not self.model:
            self.model = response_model(chunk)
        if self._pending is not None:
            data = self._pending + chunk
        elif b'"usage"' in chunk:
            data = self._tail + chunk
        elif self._tail and b'"usage"' in self._tail + chunk[:16]:
            data = self._tail + chunk  # the key was split across two chunks
        else:
            self._tail = chunk[-16:] if len(chunk) >= 16 else (self._tail + chunk)[-16:]
            return
        found, incomplete = usage_in(data)
        if found is not None:
            self.usage.merge(found)
        if incomplete:
            start = data.rfind(b'"usage"')
            self._pending = data[start:]
        else:
            self._pending = None
        self._tail = data[-16:]
