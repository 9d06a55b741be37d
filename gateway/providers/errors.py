"""The one place that maps upstream errors (HTTP refusals, transport failures) to UpstreamFailure.

Providers answer errors in many shapes: OpenAI ``{"error": {...}}``, Anthropic
``{"type": "error", "error": {...}}``, Gemini ``{"error": {"code", "message", "status"}}``
(sometimes inside a list), vLLM/Mistral ``{"object": "error", "message": ...}``, Bedrock
``{"message": ...}`` / ``{"Message": ...}``, OpenRouter wrapping the raw provider body,
plain text, python-repr dicts, and all of these behind wrapper prefixes such as
``litellm.BadRequestError: AnthropicException - ``. This module digs out the provider's
own message, type, code and param; it never raises on garbage input.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import replace
from email.utils import parsedate_to_datetime
from http import HTTPStatus
from typing import Any

import aiohttp

from gateway.errors import error_body, sse_error_event
from gateway.providers.error_body import (
    MAX_MESSAGE_CHARS,
    decode_body,
    implied_status,
    parse_error_text,
    split_wrappers,
    strip_prefixes,
)
from gateway.providers.failure import UpstreamFailure

__all__ = [
    "failure_from_exception",
    "failure_from_http",
    "failure_sse_event",
    "openai_error_envelope",
    "parse_retry_after",
    "ratelimit_reset",
    "safe_headers",
]

# Headers worth relaying with a failure. Everything else (and anything secret-looking, even
# if listed here by mistake) is dropped.
_SAFE_HEADER_NAMES = frozenset(
    {
        "retry-after",
        "retry-after-ms",
        "x-should-retry",
        "x-request-id",
        "request-id",
        "x-amzn-requestid",
        "x-amzn-errortype",
        "apim-request-id",
        "x-ms-request-id",
        "content-type",
    }
)
_SAFE_HEADER_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-", "ratelimit-")
_SECRET_HEADER = re.compile(
    r"authori[sz]ation|cookie|api[-_]?key|token(?!s)|secret|session|signature|credential", re.I
)
_SECRET_TEXT = (
    (re.compile(r"([?&](?:key|api[_-]?key|token|access_token|sig)=)[^&\s\"']+", re.I), r"\1***"),
    (re.compile(r"(Bearer\s+)[\w.~+/=-]+", re.I), r"\1***"),
    (re.compile(r"\bsk-[\w-]{8,}"), "sk-***"),
)


def failure_from_http(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    provider: str,
    *,
    now: float | None = None,
) -> UpstreamFailure:
    """Normalize an upstream HTTP error response into an UpstreamFailure.

    ``now`` (epoch seconds, default: the current time) is only used to turn an HTTP-date
    ``Retry-After`` into seconds. Never raises: unreadable bodies become the plain text
    (or a generic "upstream returned HTTP ..." message).
    """
    try:
        status = int(status)
    except (TypeError, ValueError):
        status = 502
    return _normalize(status, _header_pairs(headers), body, provider, now)


def _normalize(
    status: int,
    pairs: list[tuple[str, str]],
    body: bytes,
    provider: str,
    now: float | None,
    code_hint: str | None = None,
) -> UpstreamFailure:
    text = decode_body(body)
    fields = parse_error_text(text, status, 0)
    message = fields.message or _generic_message(status)
    code = fields.code or code_hint
    if code is None:
        aws = _lookup(pairs, "x-amzn-errortype")
        if aws:
            code = aws.split(":", 1)[0] or None
    retry_after = parse_retry_after(pairs, now=now)
    if retry_after is None:
        retry_after = fields.retry_hint
    if retry_after is None:
        retry_after = ratelimit_reset(pairs)
    content_type = _lookup(pairs, "content-type") or (
        "application/json" if fields.structured else "text/plain; charset=utf-8"
    )
    return UpstreamFailure(
        status=status,
        provider=provider,
        message=message[:MAX_MESSAGE_CHARS],
        type=fields.type,
        code=code,
        param=fields.param,
        retry_after=retry_after,
        should_retry=_should_retry(pairs),
        body=bytes(body) if isinstance(body, bytes | bytearray | memoryview) else b"",
        content_type=content_type,
        headers=safe_headers(pairs),
    )


def failure_from_exception(exc: BaseException, provider: str) -> UpstreamFailure:
    """Normalize a transport failure or an SDK exception into an UpstreamFailure.

    Timeouts become 504 "upstream timed out"; connection failures 502 "upstream connection
    failed: ..."; objects that carry ``status_code`` and ``message`` (litellm, openai SDK
    errors; duck-typed, nothing is imported) become a failure read from their inner
    provider body, without the SDK's prefixes; anything else is a 502.

    For SDK errors the provider's own status wins over the SDK's relabelling: litellm's
    ``provider_status_code``, else a status the body states (Gemini's ``code``) or its error
    type names (Anthropic ``request_too_large`` is 413, ``overloaded_error`` 529). Headers
    come from litellm's ``litellm_response_headers`` and the attached response. An SDK error
    that only wraps a transport failure (litellm reports a refused connection to Anthropic
    as a 500) is the transport failure.
    """
    name = type(exc).__name__
    try:
        return _failure_from_exception(exc, name, provider)
    except Exception:  # a hostile __str__ or property: never let normalization fail
        message = f"upstream request failed: {name}"
        return UpstreamFailure(status=502, provider=provider, message=message)


def _failure_from_exception(exc: BaseException, name: str, provider: str) -> UpstreamFailure:
    failure = _safe_getattr(exc, "failure")
    if isinstance(failure, UpstreamFailure):  # UpstreamError already carries one
        return failure
    status = _int_status(_safe_getattr(exc, "status_code"))
    answered = status is not None and _received_response(exc)
    # litellm raises its Timeout for a provider's own 504 / 408 answer: that is a refusal.
    if not answered:
        found = _transport_behind(exc, provider)
        if found is not None:
            return found
    if status is not None and _unreadable_answer(exc):
        return UpstreamFailure(
            status=502, provider=provider, type="api_error",
            message=f"the upstream of model {provider!r} sent an answer the gateway cannot "
                    "use: its body is not JSON")
    if status is not None:
        return _failure_from_status_exception(exc, status, provider)
    detail = _exception_text(exc)
    message = f"upstream request failed: {name}" + (f": {detail}" if detail else "")
    return UpstreamFailure(status=502, provider=provider, message=message)


def openai_error_envelope(failure: UpstreamFailure) -> dict[str, Any]:
    """The failure as an OpenAI error body: ``{"error": {message, type, param, code}}``
    (:func:`gateway.errors.error_body`; the type defaults from the status)."""
    return error_body(failure.message or _generic_message(failure.status),
                      status=failure.status, type=failure.type, param=failure.param,
                      code=failure.code)


def failure_sse_event(failure: UpstreamFailure) -> bytes:
    """The SSE error event that ends a stream which failed after its first byte."""
    return sse_error_event(openai_error_envelope(failure))


def safe_headers(headers: Any) -> tuple[tuple[str, str], ...]:
    """The relayable subset of upstream headers (rate-limit, retry, request ids), lowercased.

    Credentials (authorization, api keys, cookies, tokens) are never kept.
    """
    kept: list[tuple[str, str]] = []
    for name, value in _header_pairs(headers):
        if _SECRET_HEADER.search(name):
            continue
        if name in _SAFE_HEADER_NAMES or name.startswith(_SAFE_HEADER_PREFIXES):
            kept.append((name, value))
    return tuple(kept)


def parse_retry_after(headers: Any, *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (milliseconds) or ``Retry-After``.

    ``Retry-After`` may be seconds or an HTTP date (relative to ``now``, epoch seconds).
    Returns None when absent or unreadable; never negative.
    """
    pairs = _header_pairs(headers)
    millis = _lookup(pairs, "retry-after-ms")
    if millis is not None:
        value = _finite(millis)
        if value is not None and value >= 0:
            return value / 1000.0
    raw = _lookup(pairs, "retry-after")
    if raw is None:
        return None
    seconds = _finite(raw)
    if seconds is not None:
        return seconds if seconds >= 0 else None
    try:
        when = parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?"
                       r"(?:(\d+(?:\.\d+)?)ms)?")


def ratelimit_reset(headers: Any) -> float | None:
    """Seconds until the used-up limit resets, from ``x-ratelimit-remaining-{requests,tokens}``
    of 0 and the matching ``x-ratelimit-reset-*`` (OpenAI's and Groq's durations: ``1s``,
    ``6m0s``, ``120ms``, ``7.66s``). The longest when both are used up; None when no limit
    is at 0 or its reset is unreadable (a limit with room left says nothing of the wait)."""
    pairs = _header_pairs(headers)
    waits = []
    for kind in ("requests", "tokens"):
        remaining = _finite(_lookup(pairs, f"x-ratelimit-remaining-{kind}") or "")
        reset = _duration(_lookup(pairs, f"x-ratelimit-reset-{kind}") or "")
        if remaining is not None and remaining <= 0 and reset is not None:
            waits.append(reset)
    return max(waits) if waits else None


def _duration(text: str) -> float | None:
    text = text.strip()
    seconds = _finite(text)
    if seconds is not None:
        return seconds if seconds >= 0 else None
    match = _DURATION.fullmatch(text)
    if not text or match is None:
        return None
    hours, minutes, secs, millis = (float(g) if g else 0.0 for g in match.groups())
    return hours * 3600 + minutes * 60 + secs + millis / 1000


# --- headers -------------------------------------------------------------------------


def _header_pairs(headers: Any) -> list[tuple[str, str]]:
    """Lowercased (name, value) pairs from a mapping, a multidict or a list of pairs."""
    pairs: list[tuple[str, str]] = []
    try:
        items = headers.items() if hasattr(headers, "items") else iter(headers or ())
        for item in items:
            name, value = item
            if isinstance(name, bytes):
                name = name.decode("latin-1")
            if isinstance(value, bytes):
                value = value.decode("latin-1")
            pairs.append((str(name).strip().lower(), str(value).strip()))
    except Exception:  # garbage headers: keep what was read
        return pairs
    return pairs


def _lookup(pairs: list[tuple[str, str]], name: str) -> str | None:
    for key, value in pairs:
        if key == name:
            return value
    return None


def _should_retry(pairs: list[tuple[str, str]]) -> bool | None:
    value = (_lookup(pairs, "x-should-retry") or "").lower()
    return True if value == "true" else False if value == "false" else None


def _finite(text: str) -> float | None:
    try:
        value = float(text.strip())
    except (TypeError, ValueError):
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None


# --- exceptions ----------------------------------------------------------------------

# Exception classes (matched by name anywhere in the class hierarchy, nothing is imported)
# that mean the upstream could not be reached or the connection broke.
_TRANSPORT_CLASS_NAMES = frozenset({"TransportError", "ConnectError", "RemoteProtocolError"})
_SDK_CONNECTION_CLASS = "APIConnectionError"  # openai's and litellm's
_TIMEOUT_SUFFIXES = ("Timeout", "TimeoutError", "TimeoutException")
_MAX_CAUSES = 12
# Where litellm turns a provider's answer into chat's: a failure raised inside one came after
# the answer, which the gateway cannot use (a 502), not before sending.
_ANSWER_READERS = frozenset({"transform_response", "convert_to_model_response_object",
                             "chunk_parser"})
# (and their provider-specific forms: Bedrock Converse's ``_transform_response``, its
# stream decoder's ``converse_chunk_parser``)
_ANSWER_READER_SUFFIXES = ("transform_response", "chunk_parser")


def _unreadable_answer(exc: BaseException) -> bool:
    """Whether litellm failed to decode a provider's answer (a 2xx that is an HTML page,
    invalid UTF-8, no body): a decoding error behind an error raised where it reads
    answers (it labels those 500s, "Unable to get json response")."""
    causes = _causes(exc)
    return any(isinstance(c, ValueError) for c in causes) and any(
        _raised_reading_answer(c) for c in (exc, *causes))


def _transport_behind(exc: BaseException, provider: str) -> UpstreamFailure | None:
    """The transport failure ``exc`` is or wraps, for an error that got no provider answer.

    An SDK's connection-error class (``APIConnectionError``) is believed when it wraps a
    transport failure or wraps nothing; litellm also raises it for its own failures before
    sending (a history it cannot translate), which become a local, not-retryable 500.
    """
    kind = _transport_kind(exc, top=True)
    if kind in ("timeout", "connection"):
        return _transport_failure(exc, provider, kind)
    causes = _causes(exc)
    for cause in causes:
        found = _transport_kind(cause, top=False)
        if found in ("timeout", "connection"):
            return _transport_failure(cause, provider, found)
    if kind != "wrapper":
        return None
    if not causes:
        return _transport_failure(exc, provider, "connection")
    detail = _exception_text(exc)
    if any(_raised_reading_answer(cause) for cause in (exc, *causes)):
        return UpstreamFailure(
            status=502, provider=provider, type="api_error",
            message=f"the upstream of model {provider!r} sent an answer the gateway cannot "
                    "use" + (f": {detail}" if detail else ""))
    message = "upstream request not sent" + (f": {detail}" if detail else "")
    return UpstreamFailure(status=500, provider=provider, message=message, should_retry=False)


def _raised_reading_answer(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside one of litellm's answer readers
    (:data:`_ANSWER_READERS`)."""
    frames = exc.__traceback__
    while frames is not None:
        name = frames.tb_frame.f_code.co_name
        if name in _ANSWER_READERS or name.endswith(_ANSWER_READER_SUFFIXES):
            return True
        frames = frames.tb_next
    return False


def _transport_kind(exc: BaseException, *, top: bool) -> str | None:
    """"timeout", "connection", "wrapper" (an SDK connection-error class, by name only) or
    None. ``top`` (the exception itself, not one of its causes) also counts any OSError."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if isinstance(exc, TimeoutError) or any(n.endswith(_TIMEOUT_SUFFIXES) for n in names):
        return "timeout"
    connection = aiohttp.ClientConnectionError | (OSError if top else ConnectionError)
    if isinstance(exc, connection) or names & _TRANSPORT_CLASS_NAMES:
        return "connection"
    return "wrapper" if _SDK_CONNECTION_CLASS in names else None


def _transport_failure(exc: BaseException, provider: str, kind: str) -> UpstreamFailure:
    if kind == "timeout":
        return UpstreamFailure(status=504, provider=provider, message="upstream timed out")
    detail = _exception_text(exc)
    message = "upstream connection failed" + (f": {detail}" if detail else "")
    return UpstreamFailure(status=502, provider=provider, message=message)


def _causes(exc: BaseException) -> list[BaseException]:
    """The exceptions behind ``exc``: ``__cause__``, ``__context__``, ``original_exception``,
    breadth first, each once, at most a dozen."""
    found: list[BaseException] = []
    queue: list[BaseException] = [exc]
    seen = {id(exc)}
    while queue and len(found) < _MAX_CAUSES:
        current = queue.pop(0)
        for nxt in (
            current.__cause__,
            current.__context__,
            _safe_getattr(current, "original_exception"),
        ):
            if isinstance(nxt, BaseException) and id(nxt) not in seen:
                seen.add(id(nxt))
                found.append(nxt)
                queue.append(nxt)
    return found


def _received_response(exc: BaseException) -> bool:
    """True when the SDK error carries something the provider actually answered."""
    if _header_pairs(_safe_getattr(exc, "litellm_response_headers")):
        return True
    response = _safe_getattr(exc, "response")
    content = _safe_getattr(response, "content") if response is not None else None
    return isinstance(content, bytes | bytearray) and bool(content)


def _failure_from_status_exception(
    exc: BaseException, status: int, provider: str
) -> UpstreamFailure:
    """An SDK exception that carries an HTTP status (litellm, openai, anthropic SDKs).

    The provider's body is taken, in order, from the attached response when it holds a
    structured error, from the SDK's parsed ``body``, from the exception message (litellm
    embeds the provider's text there, behind its prefixes), else from the raw response.
    """
    response = _safe_getattr(exc, "response")
    pairs = _header_pairs(_safe_getattr(exc, "litellm_response_headers"))
    if response is not None:
        known = {name for name, _ in pairs}
        extra = _header_pairs(_safe_getattr(response, "headers"))
        pairs += [(name, value) for name, value in extra if name not in known]
    content = _safe_getattr(response, "content") if response is not None else None
    raw = bytes(content) if isinstance(content, bytes | bytearray) else b""
    sdk_body = _safe_getattr(exc, "body")
    message = _safe_getattr(exc, "message")
    text = (_without_traceback(message) if isinstance(message, str) and message.strip()
            else _exception_text(exc))
    text, rpc = split_wrappers(_redact(text).strip())
    if raw and parse_error_text(decode_body(raw), status, 0).structured:
        body = raw
    elif isinstance(sdk_body, dict | list) and sdk_body:
        body = json.dumps(sdk_body).encode()
    elif text:
        body = text.encode()
    else:
        body = raw
    fields = parse_error_text(decode_body(body), status, 0)
    if rpc is not None and fields.code is None:  # litellm's "UNAVAILABLE - message" text
        fields = replace(fields, code=rpc)
    reported = _int_status(_safe_getattr(exc, "provider_status_code"))
    status = reported or implied_status(fields) or status
    return _normalize(status, pairs, body, provider, None, code_hint=rpc)


def _safe_getattr(obj: Any, name: str) -> Any:
    try:
        return getattr(obj, name, None)
    except Exception:  # properties of SDK objects may raise (e.g. unread responses)
        return None


def _int_status(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        status = int(value)
    except (TypeError, ValueError):
        return None
    return status if 100 <= status <= 599 else None


def _exception_text(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = ""
    return strip_prefixes(_redact(_without_traceback(text)).strip())[:MAX_MESSAGE_CHARS]


def _without_traceback(text: str) -> str:
    """``text`` up to a Python traceback: LiteLLM appends the traceback of its own failures
    to their text (and message); a client never sees it."""
    return text.split("Traceback (most recent call last)", 1)[0].rstrip()


def _redact(text: str) -> str:
    for pattern, replacement in _SECRET_TEXT:
        text = pattern.sub(replacement, text)
    return text


def _generic_message(status: int) -> str:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"upstream returned HTTP {status}" + (f" {phrase}" if phrase else "")
