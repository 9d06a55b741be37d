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
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import orjson

from gateway.projection.byte_search import SEARCH_FROM, holds, rust_pattern

_TAIL = 512  # the last bytes searched for a trailing ``"model": "..."`` member


def client_bytes(
    raw: bytes, client: dict[str, Any], upstream: dict[str, Any], messages: Any,
    history: str = "messages",
) -> bytes | None:
    """``raw`` (or ``raw`` with the model spliced in) when ``upstream`` is ``client`` with at
    most the model renamed and ``messages`` put back unchanged; None when it must be
    serialized. ``messages`` is the history (field ``history``: a Responses body's is its
    ``input``) the caller knows to equal the client's (None for a body without one)."""
    if len(upstream) != len(client) or upstream.get(history) is not messages:
        return None
    for key, value in upstream.items():
        if key != "model" and key != history and client.get(key) is not value:
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


def with_messages_json(body: dict[str, Any], messages_json: Sequence[bytes | memoryview],
                       skeletons: SkeletonCache | None = None,
                       history: str = "messages") -> bytes:
    """``orjson.dumps(body)`` where ``body[history]`` (its ``messages``, a Responses body's
    ``input``) serializes to ``b"".join(messages_json)`` (already serialized, in pieces):
    the rest of the body is serialized (or taken from ``skeletons``) and the history spliced
    in, in one copy."""
    rest = (skeletons.json_of(body, history) if skeletons is not None
            else _skeleton_json(body, history))
    return _around(rest, messages_json)


def with_client_history(sent: bytes, body: dict[str, Any], written: memoryview,
                        skeletons: SkeletonCache | None = None,
                        history: str = "messages") -> bytes:
    """:func:`with_messages_json` with ``written``, the client's own history bytes (of
    ``sent``, its body), and the client's integers past 64 bits as written
    (:func:`exact_integers`): only the rest of the body, serialized from parsed values, can
    write one as a float, so only the rest is searched (not the whole history again)."""
    rest = (skeletons.json_of(body, history) if skeletons is not None
            else _skeleton_json(body, history))
    out = _around(rest, (written,))
    return exact_integers(sent, out) if _e_notation(rest) else out


def _around(rest: bytes, messages_json: Sequence[bytes | memoryview]) -> bytes:
    """``rest`` with its messages sentinel replaced by ``messages_json``, in one copy."""
    at = rest.index(MESSAGES_SENTINEL_JSON)
    view = memoryview(rest)
    return b"".join((view[:at], *messages_json, view[at + len(MESSAGES_SENTINEL_JSON):]))


def _skeleton_json(body: dict[str, Any], history: str) -> bytes:
    skeleton = dict(body)
    skeleton[history] = MESSAGES_SENTINEL
    return orjson.dumps(skeleton)


_SCALARS = (str, int, float, bool, type(None))


class SkeletonCache:
    """Bodies serialized without their messages, found again by the identity of their other
    values (bounded, least recently used first out).

    An agent's turns share their top-level fields (``tools``, ``response_format``, ...: the
    same parsed objects, see ``gateway/server/seen.py``). Serializing those again on every
    repaired turn costs little when they sit in the CPU cache and about ten times more when
    they do not, which is the usual case between two turns of a session: a 5 KB ``tools``
    array took ~30 µs instead of ~4. Objects of a body are never edited in place (a change
    makes a new one), so the same objects serialize the same; the entry holds them, so their
    ids cannot be reused while it lives.
    """

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._entries: OrderedDict[tuple[Any, ...], tuple[list[Any], bytes]] = OrderedDict()

    def json_of(self, body: dict[str, Any], history: str = "messages") -> bytes:
        """``orjson.dumps(body)`` with the messages sentinel in place of ``body[history]``."""
        held: list[Any] = []
        key_parts: list[Any] = [history]
        for name, value in body.items():
            if name == history:
                key_parts.append(name)
            elif value.__class__ in _SCALARS:
                key_parts.append((name, value.__class__, value))
            else:
                key_parts.append((name, id(value)))
                held.append(value)
        key = tuple(key_parts)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry[1]
        rest = _skeleton_json(body, history)
        self._entries[key] = (held, rest)
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return rest


# orjson reads an integer outside [-2**63, 2**64) as the nearest float and writes that float
# in e-notation ("1.2345678901234568e+29"); a number written by the client, outside a string.
_INTEGER_LITERAL = re.compile(rb"(?<![\w.\-+])-?[0-9]{19,}(?![\w.])")
_SMALLEST, _PAST_LARGEST = -(2**63), 2**64
# Whether a body holds a number in e-notation at all. ``b"e+" in out`` stops at every "e" of
# the text (~0.7 ns a byte: a quarter of a millisecond for a 300 KB history, on every body
# the gateway serializes); the vectorized search takes ~0.07.
_E_NOTATION = rust_pattern(r"[0-9]e\+[0-9]")


def _e_notation(out: bytes) -> bool:
    """Whether serialized JSON holds a number in e-notation (or text that looks like one)."""
    return holds(_E_NOTATION, out) if len(out) >= SEARCH_FROM else b"e+" in out


def exact_integers(sent: bytes, out: bytes) -> bytes:
    """``out`` (a body serialized from ``sent`` parsed) with every integer ``sent`` wrote
    past 64 bits (a hash or an id sent as a number, a JSON-schema bound) back as written,
    where the parse made it the nearest float. Costs a search unless ``out`` holds a number
    in e-notation."""
    if not _e_notation(out):
        return out
    floats: dict[bytes, bytes] = {}
    for found in _INTEGER_LITERAL.finditer(sent):
        literal = found.group()
        if not _SMALLEST <= int(literal) < _PAST_LARGEST:
            floats.setdefault(orjson.dumps(float(literal)), literal)
    if not floats:
        return out
    # (each as a number token: after ``:``, ``[`` or ``,``, before ``,``, ``]`` or ``}``)
    numbers = re.compile(rb"(?<=[:\[,])(" + b"|".join(map(re.escape, floats))
                         + rb")(?=[,\]}])")
    return numbers.sub(lambda found: floats[found.group(1)], out)
