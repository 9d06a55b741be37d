"""Errors in each wire's own shape: Anthropic's ``{"type": "error", "error": {...}}`` on
the Messages routes, the OpenAI envelope (which the Responses API shares) elsewhere."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def is_anthropic_path(path: str) -> bool:
    """True for the Anthropic Messages routes (``/v1/messages``, ``.../count_tokens``)."""
    return path.rstrip("/").endswith(("/messages", "/messages/count_tokens"))


def anthropic_type(status: int, given: str | None = None) -> str:
    """The Anthropic error type for a status (a provider's own type wins, but for OpenAI's
    catch-all ``invalid_request_error`` on a status that has its own type: an OpenAI-style
    server's 401, 404 or 429 is an authentication, not-found or rate-limit error)."""
    if given == "invalid_request_error" and _ANTHROPIC_TYPES.get(status, given) != given:
        return _ANTHROPIC_TYPES[status]
    if given and given in {*_ANTHROPIC_TYPES.values(), "timeout_error", "billing_error"}:
        return given
    if status in _ANTHROPIC_TYPES:
        return _ANTHROPIC_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def anthropic_error(status: int, message: str, type: str | None = None,
                    extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An Anthropic error body."""
    body: dict[str, Any] = {"type": "error",
                            "error": {"type": anthropic_type(status, type), "message": message}}
    if extra:
        body.update(extra)
    return body


def anthropic_from_openai(status: int, body: Mapping[str, Any]) -> dict[str, Any]:
    """The gateway's give-up body (OpenAI envelope plus ``gateway``) in Anthropic's shape."""
    error = body.get("error") if isinstance(body.get("error"), dict) else {}
    assert isinstance(error, dict)
    message = error.get("message")
    extra = {k: v for k, v in body.items() if k != "error"}
    return anthropic_error(status, message if isinstance(message, str) else f"HTTP {status}",
                           error.get("type") if isinstance(error.get("type"), str) else None,
                           extra)


def anthropic_sse_error(status: int, message: str, type: str | None = None) -> bytes:
    """An Anthropic ``error`` SSE event (a stream that failed after it started)."""
    data = anthropic_error(status, message, type)
    return b"event: error\ndata: " + orjson.dumps(data) + b"\n\n"
