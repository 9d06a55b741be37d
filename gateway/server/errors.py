"""Error responses in the client's wire format: core errors mapped to HTTP.

The envelope and the status -> type table live in :mod:`gateway.errors` (the core raises
:class:`ClientError` from there too); this module only turns them into aiohttp responses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

from gateway.errors import ClientError, error_body
from gateway.redact import mask_credential_headers, redact
from gateway.wires.errors import anthropic_error, is_anthropic_path

__all__ = ["ClientError", "clean_message", "error_response", "json_response", "status_response",
           "wire_error_response"]


def clean_message(message: str) -> str:
    """``message`` with configured secrets and quoted credential header values masked."""
    return mask_credential_headers(redact(message))


def _cleaned(err: ClientError) -> ClientError:
    clean = clean_message(err.message)
    if clean == err.message:
        return err
    return ClientError(err.status, clean, param=err.param, code=err.code, type=err.type)


def json_response(
    body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A JSON response serialized with orjson."""
    return web.Response(
        body=orjson.dumps(body), status=status, content_type="application/json", headers=headers
    )


def error_response(err: ClientError, headers: Mapping[str, str] | None = None) -> web.Response:
    """The OpenAI-envelope response for a refused request (secrets it quotes masked)."""
    err = _cleaned(err)
    return json_response(err.body(), status=err.status, headers=headers)


def status_response(
    status: int, message: str, *, code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """An OpenAI-envelope response whose type follows from ``status``."""
    return json_response(error_body(clean_message(message), status=status, code=code),
                         status=status, headers=headers)


def wire_error_response(path: str, err: ClientError,
                        headers: Mapping[str, str] | None = None) -> web.Response:
    """A refused request in the wire format of the route that was called (a configured
    secret the message quotes, e.g. a key sent as the model name, masked)."""
    err = _cleaned(err)
    if is_anthropic_path(path):
        return json_response(anthropic_error(err.status, err.message, None), status=err.status,
                             headers=headers)
    return error_response(err, headers)
