"""The text of an upstream failure worth reading: every string of the error body.

Providers put the real reason in many places: ``error.message``, a string ``error`` field,
``detail`` / ``details[].reason`` lists, a nested wrapped body, or plain text around a JSON
object (a proxy's prefix, a log line). Some put a placeholder in ``message`` (a generic
sentence, another language) and the reason elsewhere. So the classifier reads all of it.

Values of keys that echo the client's own request (``input``, ``messages``, ``prompt``,
...) are skipped, and so are strings that hold a JSON document of their own under such
keys: a request echoed back inside an error must not steer the verdict. Pure text work.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.providers.failure import UpstreamFailure

MAX_BODY_CHARS = 100_000
MAX_STRINGS = 400
# Keys whose values are the client's request as echoed back, not the provider's words.
ECHO_KEYS = frozenset({
    "input", "inputs", "messages", "prompt", "contents", "request", "request_body",
    "arguments", "tools", "tool_calls", "parameters", "instances",
})


def failure_texts(failure: UpstreamFailure) -> list[str]:
    """Message, type and code of ``failure``, then every string of its body (deduplicated,
    in order)."""
    seen: dict[str, None] = {}
    for part in (failure.message, failure.type, failure.code):
        if part:
            seen.setdefault(part, None)
    for text in body_texts(failure.body):
        if len(seen) >= MAX_STRINGS:
            break
        seen.setdefault(text, None)
    return list(seen)


def body_texts(body: bytes | str) -> list[str]:
    """The strings of an error body: JSON values (echo keys skipped) and the text around
    the first JSON object; the whole text when there is none."""
    try:
        text = body if isinstance(body, str) else bytes(body[:MAX_BODY_CHARS]).decode(
            "utf-8", errors="replace")
    except Exception:  # a body of the wrong type: nothing to read
        return []
    text = text[:MAX_BODY_CHARS].strip()
    if not text:
        return []
    found = _first_json(text)
    if found is None:
        return [text]
    value, start, end = found
    out: list[str] = []
    before, after = text[:start].strip(), text[end:].strip()
    if before:
        out.append(before)
    _walk(value, out, depth=0)
    if after:
        out.append(after)
    return out


def _first_json(text: str) -> tuple[Any, int, int] | None:
    decoder = json.JSONDecoder(strict=False)
    starts = [i for i, ch in enumerate(text[:4000]) if ch in "{["][:6]
    for start in starts:
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict | list):
            return value, start, end
    return None


def _walk(value: Any, out: list[str], *, depth: int) -> None:
    if len(out) >= MAX_STRINGS or depth > 12:
        return
    if isinstance(value, str):
        if value.strip():
            out.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and key.lower() in ECHO_KEYS:
                continue
            _walk(item, out, depth=depth + 1)
    elif isinstance(value, list):
        for item in value:
            _walk(item, out, depth=depth + 1)
