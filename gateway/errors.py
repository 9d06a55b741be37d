"""Errors the core raises and the one OpenAI error envelope every error is rendered in.

Neutral ground: nothing here imports another gateway module, so the core (flow, compaction,
providers) and the server share it without pointing up. The server maps :class:`ClientError`
to an HTTP response; everything else builds bodies with :func:`error_body` and the one
status -> type table :func:`error_type` (client errors, give-ups, timeouts and the SSE error
event that ends a stream that failed after its first byte, on both provider paths).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["TYPE_BY_STATUS", "ClientError", "error_body", "error_type", "sse_error_event"]

# The one status -> ``error.type`` table, used when nobody (client error, provider) named
# a type. OpenAI's names where it has one; Anthropic's published names for 413 and 504.
TYPE_BY_STATUS: Mapping[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
}


def error_type(status: int) -> str:
    """The ``error.type`` conventionally paired with an HTTP status."""
    named = TYPE_BY_STATUS.get(status)
    if named is not None:
        return named
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def error_body(
    message: str,
    *,
    status: int = 400,
    type: str | None = None,
    param: str | None = None,
    code: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` plus optional top-level extras.

    ``type`` defaults from ``status`` through :func:`error_type`.
    """
    body: dict[str, Any] = {
        "error": {"message": message, "type": type or error_type(status), "param": param,
                  "code": code}
    }
    if extra:
        body.update(extra)
    return body


def sse_error_event(body: Mapping[str, Any]) -> bytes:
    """The SSE event that ends a stream which failed after its first byte:
    ``data: {"error": {...}}`` followed by a blank line (the OpenAI streaming shape)."""
    return b"data: " + orjson.dumps({"error": body["error"]}) + b"\n\n"


class ClientError(Exception):
    """A request the gateway refuses before (or instead of) contacting an upstream.

    Raised by the edge validation and by the core (an archive read that is not allowed);
    the server renders it as ``status`` with :func:`error_body`.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or error_type(status)

    def body(self) -> dict[str, Any]:
        """The error in the OpenAI envelope."""
        return error_body(self.message, status=self.status, type=self.type, param=self.param,
                          code=self.code)
