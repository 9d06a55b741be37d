"""The upstream body's bytes without serializing it again, when it is the client's body.

A valid request whose projection changed nothing is forwarded as the bytes the client sent
(serializing 300 KB again costs about as much as validating it). When only the model is
renamed, the name is spliced into the client's bytes if the ``model`` member provably is the
top-level object's last member; anywhere else, finding it would take a scan of the whole body
that costs more than serializing, so the body is serialized instead.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

import orjson

_TAIL = 512  # the last bytes searched for a trailing ``"model": "..."`` member


def client_bytes(
    raw: bytes, client: dict[str, Any], upstream: dict[str, Any], messages: list[Any]
) -> bytes | None:
    """``raw`` (or ``raw`` with the model spliced in) when ``upstream`` is ``client`` with at
    most the model renamed and ``messages`` put back unchanged; None when it must be
    serialized. ``messages`` is the list the caller knows to equal the client's."""
    if len(upstream) != len(client) or upstream.get("messages") is not messages:
        return None
    for key, value in upstream.items():
        if key != "model" and key != "messages" and client.get(key) is not value:
            return None
    sent, model = client.get("model"), upstream.get("model")
    if model == sent:
        return raw
    if not isinstance(sent, str) or not isinstance(model, str):
        return None
    return splice_trailing_model(raw, sent, model)


def splice_trailing_model(raw: bytes, sent: str, model: str) -> bytes | None:
    """``raw`` with the value of its last top-level member ``"model": sent`` replaced.

    The match must end the document (``}`` then only whitespace) and its opening quote must
    follow ``{`` or ``,``: in valid JSON that quote then opens a key of the outermost object
    (an escaped quote follows a backslash; a closing quote cannot be followed by ``model``).
    A client that spelled the name with escapes simply gets its body serialized.
    """
    pattern = re.compile(rb'[,{]\s*"model"\s*:\s*(' + re.escape(orjson.dumps(sent))
                         + rb')\s*\}\s*\Z')
    found = pattern.search(raw, max(0, len(raw) - _TAIL))
    if found is None:
        return None
    start, end = found.span(1)
    return raw[:start] + orjson.dumps(model) + raw[end:]


# Stands in for a body's messages array while the rest of the body is parsed or serialized:
# drawn at start-up, so no client can have sent it.
MESSAGES_SENTINEL = "\x00gw-messages-" + secrets.token_hex(8)
MESSAGES_SENTINEL_JSON = orjson.dumps(MESSAGES_SENTINEL)


def with_messages_json(body: dict[str, Any], messages_json: bytes) -> bytes:
    """``orjson.dumps(body)`` where ``body["messages"]`` serializes to ``messages_json``
    (already serialized): the rest of the body is serialized and the messages spliced in."""
    skeleton = dict(body)
    skeleton["messages"] = MESSAGES_SENTINEL
    rest = orjson.dumps(skeleton)
    at = rest.index(MESSAGES_SENTINEL_JSON)
    return b"".join((rest[:at], messages_json, rest[at + len(MESSAGES_SENTINEL_JSON):]))
