"""Reading upstream error bodies of every known shape: message, type, code, param, hints.

Used by ``gateway.providers.errors`` (the public entry points). Pure text work; never
raises on garbage.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

__all__ = [
    "MAX_MESSAGE_CHARS",
    "RPC_STATUS",
    "BodyFields",
    "decode_body",
    "implied_status",
    "parse_error_text",
    "split_wrappers",
    "strip_prefixes",
]

MAX_MESSAGE_CHARS = 8_000
_MAX_BODY_CHARS = 100_000  # larger bodies are examined only up to here
_MAX_DEPTH = 3  # wrapped bodies (litellm -> OpenRouter -> provider) nest this deep at most
_MAX_CANDIDATES = 6  # '{' / '[' positions tried when a body embeds structured data

# google.rpc canonical status names (Gemini, Vertex AI) and the HTTP status each maps to.
RPC_STATUS: dict[str, int] = {
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
    "UNAUTHENTICATED": 401,
}
# Error types / codes that name exactly one HTTP status. An SDK that re-labels a status
# (litellm turns Anthropic 413 into 400 and 529 into 500) is corrected by them.
_KIND_STATUS: dict[str, int] = {
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "overloaded_error": 529,
    **{name: code for name, code in RPC_STATUS.items() if name not in ("UNKNOWN", "CANCELLED")},
}

# Wrapper prefixes put in front of the provider's text by SDKs and proxies.
_PREFIXES = (
    re.compile(r"^litellm\.[A-Za-z]+:\s*"),
    # AnthropicException - , AnthropicError - , vertex_ai_betaException - ,
    # GeminiException InternalServerError -
    re.compile(r"^[A-Za-z_]*(?:Exception|Error)(?:\s+[A-Z][A-Za-z]*)?\s+-\s+"),
    re.compile(r"^(?:[a-z_][\w]*\.)+[A-Z]\w*(?:Error|Exception):\s*"),  # pkg.mod.ClientError:
    re.compile(r"^[A-Z]\w*(?:Error|Exception):\s+"),  # ValidationException: ...
    re.compile(r"^An error occurred \(\w+\) when calling the \w+ operation:\s*"),
    # (not Cloudflare's four-digit codes: "error code: 1015" stays the message)
    re.compile(r"^(?:Error code|Status code|Error)\s*:?\s*\d{3}(?!\d)\s*[-.:]?\s*", re.I),
    re.compile(
        r"^\[?\d{3}(?:\s+(?:(?-i:[A-Z][A-Z_]{2,})|"
        + "|".join(re.escape(s.phrase) for s in HTTPStatus if s.phrase)
        + r"))?\]?[.:]?\s+",
        re.I,
    ),
    re.compile(r"^Error:\s+"),
)
# A google.rpc status name in front of the message ("UNAVAILABLE - The model is overloaded.").
_RPC_PREFIX = re.compile(r"^(" + "|".join(RPC_STATUS) + r")\s+-\s+")
# Wrapper suffixes: litellm's advice and its repeat of the original exception. Found with
# str.rfind / str.find, then checked: an unanchored regex would be quadratic on long text.
_HANDLE_WITH = "Handle with `litellm."
_HANDLE_TAIL = re.compile(r"Handle with `litellm\.\w+`\.?\s*")
_ORIGINAL = "Original exception:"
# A python bytes repr of a body (``b'{"error": ...}'``), as litellm prints raw stream bodies.
_BYTES_REPR = re.compile(r"^b(['\"]).*\1$", re.S)
_BOTO_CODE = re.compile(r"An error occurred \((\w+)\) when calling")
_HTML = re.compile(r"^\s*<(?:!doctype|html|head|body)", re.I)
_HTML_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)

_DURATION_PART = re.compile(
    r"(\d+(?:\.\d+)?)\s*(ms|milliseconds?|hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s)(?![a-z])",
    re.I,
)
# Last resort for truncated or JS-style bodies: a quoted ``message`` / ``type`` field.
_LOOSE_MESSAGE = re.compile(
    r"""["']?(?:message|errorMessage|Message)["']?\s*:\s*(?:"((?:[^"\\]|\\.)+)"|'((?:[^'\\]|\\.)+)')"""
)
_LOOSE_TYPE = re.compile(r"""["']?type["']?\s*:\s*["']([A-Za-z_]+)["']""")
_RETRY_HINT = re.compile(
    r"(?:try again|retry)\s+(?:in|after)\s+((?:\d+(?:\.\d+)?\s*[a-z]+\s*)+)", re.I
)
_MAX_HINT_SECONDS = 10.0**9  # an absurd hint still means "much too long", never infinity


@dataclass(frozen=True, slots=True)
class BodyFields:
    """What could be read from an error body."""

    message: str | None = None
    type: str | None = None
    code: str | None = None
    param: str | None = None
    retry_hint: float | None = None
    structured: bool = False
    status: int | None = None  # an HTTP status the body states (Gemini's numeric ``code``)


def decode_body(body: Any) -> str:
    """The body as text (UTF-8, bad bytes replaced), cut to the examined size."""
    if isinstance(body, str):
        return body[:_MAX_BODY_CHARS]
    try:
        return bytes(body[:_MAX_BODY_CHARS]).decode("utf-8", errors="replace")
    except Exception:
        return ""


def parse_error_text(text: str, status: int, depth: int = 0) -> BodyFields:
    """Read an error body (or an SDK message) of any known shape.

    ``status`` lets an integer ``code`` that merely repeats it be dropped; ``depth`` bounds
    the unwrapping of bodies nested inside messages.
    """
    text = text.strip()
    if not text:
        return BodyFields()
    if _HTML.match(text):
        title = _HTML_TITLE.search(text)
        return BodyFields(message=" ".join(title.group(1).split()) if title else None)
    stripped, rpc = split_wrappers(text)
    boto = _BOTO_CODE.search(text)
    value = _find_structured(stripped)
    if value is not None:
        fields = _from_value(value, status, depth)
        if fields.message:
            return fields
    loose = _loose_fields(stripped)
    if loose is not None:
        return loose
    return BodyFields(
        message=stripped or text,
        code=boto.group(1) if boto else rpc,
        retry_hint=_retry_hint(stripped),
    )


def implied_status(fields: BodyFields) -> int | None:
    """The HTTP status the body states or its error type / code names, if any.

    For SDK exceptions whose own status is a relabelling (litellm reports Anthropic's 413
    as 400, its 529 and Gemini's 503 as 500); never used for a status read off the wire.
    """
    if fields.status is not None:
        return fields.status
    for name in (fields.type, fields.code):
        if name is not None and name in _KIND_STATUS:
            return _KIND_STATUS[name]
    return None


def _loose_fields(text: str) -> BodyFields | None:
    """Fields read by pattern from a body that does not parse (truncated, JS-style)."""
    match = _LOOSE_MESSAGE.search(text)
    if match is None:  # maybe a JSON body quoted inside a string: {\"message\":\"...\"}
        text = text.replace('\\"', '"')
        match = _LOOSE_MESSAGE.search(text)
    if match is None:
        return None
    message = (match.group(1) or match.group(2) or "").replace('\\"', '"').strip()
    if not message:
        return None
    kinds = [k for k in _LOOSE_TYPE.findall(text) if k != "error"]
    return BodyFields(message=message, type=kinds[0] if kinds else None)


def strip_prefixes(text: str) -> str:
    """``text`` without SDK/proxy wrappers: prefixes (``litellm.X: YException - `` and kin,
    a google.rpc status name), litellm's suffixes (``Handle with `litellm.X```, ``Original
    exception: ...``) and a python bytes repr around the body."""
    return split_wrappers(text)[0]


def split_wrappers(text: str) -> tuple[str, str | None]:
    """``strip_prefixes(text)`` and the google.rpc status name it removed, if any
    (``UNAVAILABLE - The model is overloaded.`` -> the message and ``UNAVAILABLE``)."""
    rpc: str | None = None
    text = _strip_suffixes(text)
    for _ in range(10):
        shorter = text
        for pattern in _PREFIXES:
            shorter = pattern.sub("", text, count=1)
            if shorter != text and shorter.strip():
                break
        else:
            match = _RPC_PREFIX.match(text)
            if match is not None and text[match.end() :].strip():
                rpc, shorter = match.group(1), text[match.end() :]
            else:
                shorter = _unwrap_bytes_repr(text)
        if shorter == text or not shorter.strip():
            break
        text = shorter.strip()
    return text, rpc


def _strip_suffixes(text: str) -> str:
    marker = text.rfind(_HANDLE_WITH)
    if marker > 0 and _HANDLE_TAIL.fullmatch(text, marker):
        cut = text[:marker].rstrip()
        cut = cut[:-1] if cut.endswith(".") else cut  # litellm writes "{text}. Handle with"
        text = cut.strip() or text
    marker = text.find(_ORIGINAL)
    if marker > 0 and text[marker - 1].isspace() and text[:marker].strip():
        text = text[:marker].strip()
    return text


def _unwrap_bytes_repr(text: str) -> str:
    if not _BYTES_REPR.match(text) or len(text) > _MAX_BODY_CHARS:
        return text
    try:
        value = ast.literal_eval(text)  # a bytes literal only: matched above, never evaluated
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else text


def _find_structured(text: str) -> Any:
    """The first JSON / python-literal object or list found in ``text``, else None."""
    starts = [i for i, ch in enumerate(text[:2000]) if ch in "{["][:_MAX_CANDIDATES]
    decoder = json.JSONDecoder(strict=False)  # bodies quoted by hand carry raw newlines
    for start in starts:
        chunk = text[start:]
        for candidate in (chunk, chunk.replace('\\"', '"')):
            try:
                value, _ = decoder.raw_decode(candidate)
            except (ValueError, RecursionError):
                continue
            if _is_body(value):
                return value
        literal = _balanced(chunk)
        if literal is not None:
            try:
                value = ast.literal_eval(literal)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if _is_body(value):
                return value
    return None


def _is_body(value: Any) -> bool:
    if isinstance(value, list):
        return any(isinstance(item, dict) for item in value)
    return isinstance(value, dict)


def _balanced(text: str) -> str | None:
    """The bracket-balanced prefix of ``text`` (quotes respected), or None."""
    depth = 0
    quote = ""
    escaped = False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return text[: i + 1]
    return None


def _from_value(value: Any, status: int, depth: int) -> BodyFields:
    """Fields from a parsed body, whatever the provider's shape."""
    if isinstance(value, list):
        value = next((item for item in value if isinstance(item, dict)), None)
    if not isinstance(value, dict):
        return BodyFields()
    err = value.get("error")
    boto = value.get("Error")
    if isinstance(err, dict):
        node: dict[str, Any] = err
    elif isinstance(boto, dict):
        node = boto
    else:
        node = value
    message = _first(node, "message", "Message", "errorMessage", "detail", "error_message")
    if message is None and isinstance(err, str):
        message = err
    kind = _text(node.get("type"))
    if kind == "error":  # Anthropic's envelope marker, not an error type
        kind = None
    code = _code(node.get("code"), status)
    if code is None or code.isdigit():
        code = _text(node.get("status")) or _text(node.get("Code")) or code
    code = code or _text(value.get("__type")) or _text(node.get("errorType"))
    fields = BodyFields(
        message=message,
        type=kind,
        code=code,
        param=_text(node.get("param")),
        retry_hint=_retry_delay(node.get("details")) or _retry_hint(message or ""),
        structured=True,
        status=_http_status(node.get("code")),
    )
    inner = _inner_body(node, message, status, depth)
    if inner is not None and inner.message:
        return BodyFields(
            message=inner.message,
            type=inner.type or fields.type,
            code=inner.code or fields.code,
            param=inner.param or fields.param,
            retry_hint=inner.retry_hint or fields.retry_hint,
            structured=True,
            status=inner.status or fields.status,
        )
    return fields


def _http_status(value: Any) -> int | None:
    """A numeric error ``code`` that is an HTTP error status (Gemini: ``"code": 503``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) == 3:
        value = int(value.strip())
    return value if isinstance(value, int) and 400 <= value <= 599 else None


def _inner_body(
    node: dict[str, Any], message: str | None, status: int, depth: int
) -> BodyFields | None:
    """A provider body wrapped inside another body (OpenRouter ``metadata.raw``, litellm)."""
    if depth >= _MAX_DEPTH:
        return None
    metadata = node.get("metadata")
    raw = metadata.get("raw") if isinstance(metadata, dict) else None
    if isinstance(raw, dict) and raw:  # OpenRouter's ``raw`` may be an object, not text
        raw = json.dumps(raw, ensure_ascii=False, default=str)
    if isinstance(raw, str) and raw.strip():
        inner = parse_error_text(raw, status, depth + 1)
        if inner.message:
            return inner
    if message and ("{" in message or message != strip_prefixes(message)):
        inner = parse_error_text(message, status, depth + 1)
        if inner.structured or inner.message != message:
            return inner
    return None


def _first(node: dict[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = node.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, list | dict) and value:
            return json.dumps(value, ensure_ascii=False, default=str)
    return None


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _code(value: Any, status: int) -> str | None:
    """A provider code as text; an integer that only repeats the HTTP status is noise."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return None if value == status else str(value)
    if isinstance(value, str) and value.strip():
        return None if value.strip() == str(status) else value.strip()
    return None


def _retry_delay(details: Any) -> float | None:
    """Gemini's ``google.rpc.RetryInfo`` ``retryDelay`` ("40s"), when present."""
    if not isinstance(details, list):
        return None
    for item in details:
        if isinstance(item, dict) and isinstance(item.get("retryDelay"), str):
            return _duration(item["retryDelay"])
    return None


def _retry_hint(message: str) -> float | None:
    """A wait hinted in the text: "try again in 3.89s", "retry after 60 seconds"."""
    match = _RETRY_HINT.search(message)
    return _duration(match.group(1)) if match else None


def _duration(text: str) -> float | None:
    total = 0.0
    found = False
    for number, unit in _DURATION_PART.findall(text):
        unit = unit.lower()
        if unit.startswith(("ms", "milli")):
            scale = 0.001
        elif unit.startswith("h"):
            scale = 3600.0
        elif unit.startswith("m"):
            scale = 60.0
        else:
            scale = 1.0
        total += float(number) * scale
        found = True
    return min(total, _MAX_HINT_SECONDS) if found else None
