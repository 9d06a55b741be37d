"""Error responses in the client's wire format (the OpenAI error envelope)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    504: "timeout_error",
}


class ClientError(Exception):
    """A request the gateway refuses before any upstream is contacted."""

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
        self.type = type or _TYPE_BY_STATUS.get(status, "invalid_request_error")


def envelope(
    message: str,
    *,
    type: str,
    param: str | None = None,
    code: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` plus optional top-level extras."""
    body: dict[str, Any] = {
        "error": {"message": message, "type": type, "param": param, "code": code}
    }
    if extra:
        body.update(extra)
    return body


def json_response(
    body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A JSON response serialized with orjson."""
    return web.Response(
        body=orjson.dumps(body), status=status, content_type="application/json", headers=headers
    )


def error_response(err: ClientError, headers: Mapping[str, str] | None = None) -> web.Response:
    """The OpenAI-envelope response for a refused request."""
    body = envelope(err.message, type=err.type, param=err.param, code=err.code)
    return json_response(body, status=err.status, headers=headers)


def status_type(status: int) -> str:
    """The OpenAI error type conventionally paired with an HTTP status."""
    if status >= 500:
        return "timeout_error" if status == 504 else "api_error"
    return _TYPE_BY_STATUS.get(status, "invalid_request_error")
