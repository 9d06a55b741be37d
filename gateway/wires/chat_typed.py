"""Reading a new Chat Completions body that needs nothing done, without building it.

Most bodies a gateway sees are valid and clean: the projection would return their messages
unchanged, and the client's bytes go upstream as they are. Parsing such a body into Python
objects (thousands of dicts and strings for an agent's history), walking them to learn that,
and freeing them later is most of what a body the gateway never saw costs. Here the messages
are decoded into typed structs instead (``msgspec``: shapes checked in C, unknown keys
refused), walked once for the verdict and the context counts, and the request gets
:class:`LazyMessages`: the client's messages, parsed from their bytes only when something
reads them (a refusal that climbs the ladder, compaction, the inspector).

It only ever says "clean and valid" for the message shapes it knows; anything else (an
unknown field or role, a result out of order, a blank turn, bytes it cannot decode) returns
None, and the caller reads the body the general way, which names a problem or repairs it.
The verdict must never differ from that way's: ``tests/wires/test_chat_typed.py`` checks
both on the same bodies.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import orjson

from gateway.projection.lazy_messages import LazyMessages
from gateway.telemetry.context import (
    CALL_OVERHEAD,
    CHARS_PER_TOKEN,
    IMAGE_LOW_TOKENS,
    MESSAGE_OVERHEAD,
    UNKNOWN_IMAGE_TOKENS,
    CountedMessages,
)
from gateway.wires.chat_validation import MAX_JSON_DEPTH

_UNSET = msgspec.UNSET


class _Function(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    name: str
    arguments: str


class _Call(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    id: str
    function: _Function
    type: Literal["function"] | msgspec.UnsetType = _UNSET


class _ImageURL(msgspec.Struct, forbid_unknown_fields=True, gc=False, omit_defaults=True):
    url: str
    detail: str | msgspec.UnsetType = _UNSET


class _TextPart(msgspec.Struct, tag_field="type", tag="text", forbid_unknown_fields=True,
                gc=False):
    text: str


class _ImagePart(msgspec.Struct, tag_field="type", tag="image_url",
                 forbid_unknown_fields=True, gc=False):
    image_url: str | _ImageURL


class _Message(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_TextPart | _ImagePart] | msgspec.UnsetType | None = _UNSET
    name: str | msgspec.UnsetType = _UNSET
    tool_calls: list[_Call] | msgspec.UnsetType | None = _UNSET
    tool_call_id: str | msgspec.UnsetType = _UNSET


_MESSAGES = msgspec.json.Decoder(list[_Message])
_TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])
_MESSAGES_KEY = re.compile(rb'"messages"\s*:\s*\[')
_SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class CleanChat:
    """A body :func:`read_clean_chat` found valid and clean (see there)."""

    body: dict[str, Any]  # the top-level fields parsed; "messages" holds ``messages``
    messages: LazyMessages
    start: int  # offset of the messages array's opening bracket in the body
    close: int  # offset of its closing bracket
    tools: bytes | None  # the ``tools`` value's bytes (shared with bodies that send the same)
    counted: CountedMessages | None  # the context counts (with ``count``)
    media_parts: int
    # What the session fingerprint hashes (role and content of the leading system messages
    # and the first user message) and whether a user message was among them (then it is
    # final: later turns hash the same).
    fingerprint_messages: list[dict[str, Any]]
    fingerprint_final: bool
    fields: int  # how many top-level fields the bytes hold


def read_clean_chat(raw: bytes, *, count: bool,
                    shared_tools: Callable[[bytes], Any] | None = None) -> CleanChat | None:
    """``raw`` read as a Chat Completions body whose messages are valid and clean (project()
    returns them unchanged), without building them; None when it is not, or not in a shape
    this reader knows (then read it the general way). ``shared_tools``: a ``tools`` list
    parsed before from the same bytes, or None (then it is parsed here)."""
    try:
        top = _TOP_LEVEL.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    array = top.get("messages")
    if array is None:
        return None
    found = _MESSAGES_KEY.search(raw)
    if found is None:
        return None
    start = found.end() - 1
    close = start + len(array) - 1
    # The first ``"messages": [`` is the top-level array's only when its bytes are there and
    # the key occurs nowhere after it (not a nested key, not a duplicate).
    if not raw.startswith(array, start) or _MESSAGES_KEY.search(raw, close) is not None:
        return None
    try:
        messages = _MESSAGES.decode(array)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    walked = _walk(messages, count)
    if walked is None:
        return None
    counted, media, fingerprint, final = walked
    body: dict[str, Any] = {}  # (in the client's order; a key sent twice keeps its last value)
    tools_bytes: bytes | None = None
    lazy = LazyMessages(memoryview(raw)[start:close + 1], len(messages))
    for key, value in top.items():
        if key == "messages":
            body[key] = lazy
            continue
        written = bytes(value)
        if key == "tools" and shared_tools is not None:
            tools_bytes = written
            shared = shared_tools(written)
            if shared is not None:
                body[key] = shared
                continue
        if written.count(b"[") + written.count(b"{") + 1 > MAX_JSON_DEPTH:
            return None  # maybe too deep: the general way names it
        body[key] = orjson.loads(written)
    return CleanChat(body, lazy, start, close, tools_bytes, counted, media, fingerprint, final,
                     len(top))


Totals = tuple[int, int, int, int]


def _walk(messages: list[_Message], count: bool
          ) -> tuple[CountedMessages | None, int, list[dict[str, Any]], bool] | None:
    """The verdict on decoded messages (None: not clean, or not surely), mirroring
    ``projection.fastpath.CleanScan`` and ``wires.chat_validation._common_shapes`` on the
    shapes decoded, with the context counts and what the fingerprint hashes."""
    t = s = o = pictures = media = 0
    turn, at_turn = 0, (0, 0, 0, 0)
    pending: list[_Call] = []
    done = 0
    lead: list[dict[str, Any]] = []  # what the fingerprint hashes
    user_found = False
    per_token = CHARS_PER_TOKEN
    for i, m in enumerate(messages):
        role, c = m.role, m.content
        if role == "tool":
            if done >= len(pending) or m.tool_call_id != pending[done].id:
                return None  # an orphan, a duplicate or a result out of order: look closer
            done += 1
            if c.__class__ is str:
                pass  # any string output, empty included, is valid as sent
            elif c.__class__ is not list or not _parts_clean(c):
                return None
        else:
            if done < len(pending):
                return None  # a call without its result
            calls = m.tool_calls
            if role == "assistant":
                if calls.__class__ is list:
                    if not calls:
                        return None  # ``tool_calls: []``: dropped
                    pending, done = calls, 0
                    if c.__class__ is list and not _parts_clean(c):
                        return None
                elif not _has_words(c):
                    return None
            elif not _has_words(c):
                return None
            elif not user_found and (role == "user" or role in _SYSTEM_ROLES):
                lead.append({"role": role, "content": _builtin(c)})
                user_found = role == "user"
        if c.__class__ is list:
            text = images = 0
            for part in c:
                if isinstance(part, _TextPart):
                    text += len(part.text)
                else:
                    media += 1
                    image = part.image_url
                    images += (IMAGE_LOW_TOKENS if image.__class__ is _ImageURL
                               and image.detail == "low" else UNKNOWN_IMAGE_TOKENS)
            tokens = MESSAGE_OVERHEAD + (text + per_token - 1) // per_token + images
            pictures += images
        elif c.__class__ is str:
            tokens = MESSAGE_OVERHEAD + (len(c) + per_token - 1) // per_token
        else:
            tokens = MESSAGE_OVERHEAD
        calls = m.tool_calls
        if calls.__class__ is list:
            chars = 0
            for call in calls:
                chars += len(call.function.name) + len(call.function.arguments)
            tokens += (chars + per_token - 1) // per_token + CALL_OVERHEAD * len(calls)
        t += tokens
        if role == "tool":
            o += tokens
        elif role in _SYSTEM_ROLES:
            s += tokens
        if role == "assistant":
            turn, at_turn = i + 1, (t, s, o, pictures)
    if done < len(pending):
        return None  # the last calls wait for their results
    counted = None
    if count:
        totals = (t, s, o, pictures)
        counted = (CountedMessages(0, totals) if turn == 0
                   else CountedMessages(0, totals, turn, at_turn))
    return counted, media, lead, user_found


def _has_words(content: Any) -> bool:
    """The content of a message that must say something: a non-blank string or a clean
    part list."""
    if content.__class__ is str:
        return bool(content) and not content.isspace()
    return content.__class__ is list and _parts_clean(content)


def _parts_clean(parts: list[_TextPart | _ImagePart]) -> bool:
    """``projection.content.parts_are_clean`` on decoded parts."""
    if not parts:
        return False
    for part in parts:
        if part.__class__ is _TextPart:
            text = part.text
            if not text or text.isspace():
                return False
    return True


def _builtin(content: Any) -> Any:
    """Decoded content as the client's JSON value (what the fingerprint hashes)."""
    if content.__class__ is list:
        return msgspec.to_builtins(content)
    return None if content is _UNSET else content


