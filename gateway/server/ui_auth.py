"""Client auth for the inspector's pages: a browser cannot add a Bearer header to a page it
navigates to, so under ``/ui`` the client key is also accepted as the password of HTTP Basic
auth, and a refusal carries the ``WWW-Authenticate`` challenge that makes browsers ask."""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

from gateway.server.errors import status_response

UI_PREFIX = "/ui"


def is_ui_path(path: str) -> bool:
    """True for the inspector's pages, assets and API."""
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


def basic_password(token: str) -> bytes:
    """The password of a Basic credential (any user name), or empty."""
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (binascii.Error, ValueError):
        return b""
    _, sep, password = decoded.partition(b":")
    return password if sep else b""


def challenge() -> web.Response:
    """401 with a Basic challenge: the browser asks for the key (as the password)."""
    response = status_response(401, "the inspector needs a client key: give it as the "
                               "password (any user name)", code="invalid_api_key")
    response.headers["WWW-Authenticate"] = 'Basic realm="gateway inspector", charset="UTF-8"'
    return response
