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

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import orjson

from gateway.projection.lazy_messages import JSON_SPACE, LazyMessages
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


_Parts = list[_TextPart | _ImagePart]


# One struct per role, told apart by "role" (msgspec's tagged union): each holds only what
# that role may carry in the common shapes, so the decode itself refuses the rest. A user,
# system or developer message without content, or a result without its call id, is never
# clean: refused here too, and read the general way.
class _Said(msgspec.Struct, tag_field="role", forbid_unknown_fields=True, gc=False):
    """A user, system or developer message (each role a subclass: its tag)."""

    content: str | _Parts
    name: str | msgspec.UnsetType = _UNSET


class _System(_Said, tag="system"):
    pass


class _Developer(_Said, tag="developer"):
    pass


class _User(_Said, tag="user"):
    pass


class _Assistant(msgspec.Struct, tag_field="role", tag="assistant",
                 forbid_unknown_fields=True, gc=False):
    content: str | _Parts | msgspec.UnsetType | None = _UNSET
    name: str | msgspec.UnsetType = _UNSET
    tool_calls: list[_Call] | msgspec.UnsetType | None = _UNSET


class _Tool(msgspec.Struct, tag_field="role", tag="tool", forbid_unknown_fields=True,
            gc=False):
    tool_call_id: str
    content: str | _Parts
    name: str | msgspec.UnsetType = _UNSET


_Message = _System | _Developer | _User | _Assistant | _Tool
_ROLE: dict[type, str] = {_System: "system", _Developer: "developer", _User: "user"}
_MESSAGES = msgspec.json.Decoder(list[_Message])
_TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])
_MESSAGES_KEY = re.compile(rb'"messages"\s*:\s*\[')


@dataclass(frozen=True, slots=True)
class CleanChat:
    """A body :func:`read_clean_chat` found valid and clean (see there)."""

    body: dict[str, Any]  # the top-level fields parsed; "messages" holds ``messages``
    messages: LazyMessages
    start: int  # offset of the messages array's opening bracket in the body
    close: int  # offset of its closing bracket
    tools: bytes | None  # the ``tools`` value's bytes (shared with bodies that send the same)
    tools_shared: bool  # ``tools`` is the list parsed (and checked) before from those bytes
    counted: CountedMessages | None  # the context counts (with ``count``)
    media_parts: int
    # What the session fingerprint hashes (role and content of the leading system messages
    # and the first user message) and whether a user message was among them (then it is
    # final: later turns hash the same).
    fingerprint_messages: list[dict[str, Any]]
    fingerprint_final: bool
    fields: int  # how many top-level fields the bytes hold
    systems: list[Any]  # the contents of its system and developer messages, in order


def top_level_fields(raw: bytes) -> dict[str, msgspec.Raw] | None:
    """A body's top-level fields as their JSON bytes (one scan that builds nothing else),
    or None when it is not a JSON object."""
    try:
        return _TOP_LEVEL.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


def body_messages(raw: bytes, body: dict[str, Any], key: str = "messages",
                  ) -> tuple[dict[str, msgspec.Raw], int, int] | None:
    """The top-level fields of ``raw`` as their JSON bytes and where its ``messages`` array
    (or the array named ``key``) opens and closes (:func:`messages_span`), when ``body``
    (``raw`` parsed) has those very fields; None otherwise."""
    if b'"' + key.encode() + b'"' not in raw:
        return None
    top = top_level_fields(raw)
    span = messages_span(raw, top, key) \
        if top is not None and top.keys() == body.keys() else None
    if top is None or span is None:
        return None
    return top, *span


def messages_span(raw: bytes, top: dict[str, msgspec.Raw], key: str = "messages",
                  ) -> tuple[int, int] | None:
    """Where the body's top-level ``messages`` array (or the array named ``key``) opens and
    closes (``top``: its fields, :func:`top_level_fields`), proved: the first
    ``"messages": [`` is the array's only when its bytes are there and it is the body's
    only top-level member of that key (:func:`_only_member`); None otherwise."""
    array = top.get(key)
    pattern = _MESSAGES_KEY if key == "messages" else _array_key(key)
    found = pattern.search(raw) if array is not None else None
    if array is None or found is None:
        return None
    start = found.end() - 1
    close = start + len(array) - 1
    if not raw.startswith(array, start) or not _only_member(raw, found.start(), close, key):
        return None
    return start, close


def _only_member(raw: bytes, opens: int, close: int, key: str) -> bool:
    """Whether the member of ``raw`` (a JSON object) whose key opens at ``opens`` and whose
    value closes at ``close`` is its only top-level member named ``key``: the bytes before
    it are the object's brace and whole members, those after it whole members and the
    closing brace, and no member among them is named ``key``, its name compared decoded (a
    nested array of the same bytes, or a duplicate spelled ``"m\\u0065ssages"``, is not
    it)."""
    head = raw[:opens].strip(JSON_SPACE)
    if head != b"{":
        if not head.endswith(b","):
            return False
        before = top_level_fields(head[:-1] + b"}")
        if before is None or key in before:
            return False
    tail = raw[close + 1:].strip(JSON_SPACE)
    if tail != b"}":
        if not tail.startswith(b","):
            return False
        after = top_level_fields(b"{" + tail[1:])
        if after is None or key in after:
            return False
    return True


@functools.cache
def _array_key(key: str) -> re.Pattern[bytes]:
    return re.compile(rb'"' + re.escape(key.encode()) + rb'"\s*:\s*\[')


def read_clean_chat(raw: bytes, *, count: bool,
                    shared_tools: Callable[[bytes], Any] | None = None) -> CleanChat | None:
    """``raw`` read as a Chat Completions body whose messages are valid and clean (project()
    returns them unchanged), without building them; None when it is not, or not in a shape
    this reader knows (then read it the general way). ``shared_tools``: a ``tools`` list
    parsed before from the same bytes, or None (then it is parsed here)."""
    decoded = decode_history(raw, _MESSAGES)
    if decoded is None:
        return None
    top, start, close, messages = decoded
    walked = _walk(messages, count)
    if walked is None:
        return None
    counted, media, fingerprint, final, systems = walked
    body: dict[str, Any] = {}  # (in the client's order; a key sent twice keeps its last value)
    tools_bytes: bytes | None = None
    tools_shared = False
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
                body[key], tools_shared = shared, True
                continue
        parsed = field_value(written)
        if parsed is UNREAD:
            return None
        body[key] = parsed
    return CleanChat(body, lazy, start, close, tools_bytes, tools_shared, counted, media,
                     fingerprint, final, len(top), systems)


def decode_history(raw: bytes, decoder: msgspec.json.Decoder[Any], key: str = "messages",
                   ) -> tuple[dict[str, msgspec.Raw], int, int, Any] | None:
    """The top-level fields of ``raw`` as their JSON bytes, where its ``messages`` array (or
    the array named ``key``) opens and closes (:func:`messages_span`) and that array as
    ``decoder`` decodes it; None when any of it fails (read the body the general way)."""
    top = top_level_fields(raw)
    span = messages_span(raw, top, key) if top is not None else None
    if top is None or span is None:
        return None
    try:
        return top, *span, decoder.decode(top[key])
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


UNREAD = object()  # what :func:`field_value` gives of a value it leaves to the general way


@dataclass(frozen=True, slots=True)
class HistoryBody:
    """A body whose history a typed reader decoded (:func:`read_history_body`)."""

    body: dict[str, Any]  # its top-level fields parsed, the history as ``lazy``
    lazy: LazyMessages  # the history, left unparsed
    start: int  # offset of the history array's opening bracket in the body
    close: int  # offset of its closing bracket
    decoded: list[Any]  # the history as the decoder decoded it (one item at least)


def read_history_body(raw: bytes, decoder: msgspec.json.Decoder[Any], key: str
                      ) -> HistoryBody | None:
    """``raw`` with its history (the array named ``key``) decoded by ``decoder``
    (:func:`decode_history`) and left unparsed in its body, whose other fields are parsed
    (in the client's order; a key sent twice keeps its last value); None when the history
    is empty or a value is left to the general way (:func:`field_value`)."""
    decoded = decode_history(raw, decoder, key)
    if decoded is None:
        return None
    top, start, close, items = decoded
    if not items:
        return None
    lazy = LazyMessages(memoryview(raw)[start:close + 1], len(items))
    body: dict[str, Any] = {}
    for name, value in top.items():
        if name == key:
            body[name] = lazy
            continue
        parsed = field_value(bytes(value))
        if parsed is UNREAD:
            return None
        body[name] = parsed
    return HistoryBody(body, lazy, start, close, items)


def field_value(written: bytes) -> Any:
    """A top-level field's JSON value (``written``, its bytes), or :data:`UNREAD` when it
    may be too deep or holds a number no double holds (the general way names those)."""
    if written.count(b"[") + written.count(b"{") + 1 > MAX_JSON_DEPTH:
        return UNREAD
    try:
        return orjson.loads(written)
    except orjson.JSONDecodeError:
        return UNREAD


def _walk(messages: list[_Message], count: bool
          ) -> tuple[CountedMessages | None, int, list[dict[str, Any]], bool, list[Any]] | None:
    """The verdict on decoded messages (None: not clean, or not surely), mirroring
    ``projection.fastpath.CleanScan`` and ``wires.chat_validation._common_shapes`` on the
    shapes decoded, with the context counts (``count``), what the fingerprint hashes and
    the system messages' contents.
    One flat loop over locals: it runs for every message of every new body."""
    t = s = o = pictures = media = 0
    turn = at_t = at_s = at_o = at_pictures = 0  # the totals before the new turn
    pending: list[_Call] = []
    owed = done = 0
    lead: list[dict[str, Any]] = []  # what the fingerprint hashes
    user_found = False
    systems: list[Any] = []
    overhead, per_token = MESSAGE_OVERHEAD, CHARS_PER_TOKEN
    tool, assistant, user = _Tool, _Assistant, _User  # (locals: looked up per message)
    for i, m in enumerate(messages):
        cls = m.__class__
        c = m.content
        if c.__class__ is str:
            tokens = overhead + (len(c) + per_token - 1) // per_token if count else 0
            blank = False  # (decided below: a result's text may be blank)
        elif c.__class__ is list:
            counted = _parts(c)
            if counted is None:
                return None
            text, images, others = counted
            tokens = overhead + (text + per_token - 1) // per_token + images
            pictures += images
            media += others
            blank = False
        else:  # null or left out: an assistant's
            tokens, blank = overhead, True
        if cls is tool:  # any string output, empty included, is valid as sent
            if done >= owed or m.tool_call_id != pending[done].id:  # type: ignore[union-attr]
                return None  # an orphan, a duplicate or a result out of order: look closer
            done += 1
            t += tokens
            o += tokens
            continue
        if done < owed:
            return None  # a call without its result
        if c.__class__ is str:
            blank = not c or c.isspace()
        if cls is assistant:
            calls = m.tool_calls  # type: ignore[union-attr]
            if calls.__class__ is list:
                if not calls:
                    return None  # ``tool_calls: []``: dropped
                pending, owed, done = calls, len(calls), 0
                if count:
                    chars = 0
                    for call in calls:
                        function = call.function
                        chars += len(function.name) + len(function.arguments)
                    tokens += (chars + per_token - 1) // per_token + CALL_OVERHEAD * owed
            elif blank:
                return None  # nothing to say and no call
            if count:
                t += tokens
                turn, at_t, at_s, at_o, at_pictures = i + 1, t, s, o, pictures
            continue
        if blank:
            return None
        t += tokens
        if cls is not user:
            s += tokens
            systems.append(_builtin(c))
        if not user_found:
            lead.append({"role": _ROLE[cls], "content": _builtin(c)})
            user_found = cls is user
    if done < owed:
        return None  # the last calls wait for their results
    counted_messages = None
    if count:
        totals = (t, s, o, pictures)
        counted_messages = (CountedMessages(0, totals) if turn == 0 else CountedMessages(
            0, totals, turn, (at_t, at_s, at_o, at_pictures)))
    return counted_messages, media, lead, user_found, systems


def _parts(parts: list[_TextPart | _ImagePart]) -> tuple[int, int, int] | None:
    """A part list's text characters, image tokens and non-text parts; None unless it is
    clean (``projection.content.parts_are_clean``: not empty, no blank text part)."""
    if not parts:
        return None
    text = images = others = 0
    for part in parts:
        if isinstance(part, _TextPart):
            words = part.text
            if not words or words.isspace():
                return None
            text += len(words)
        else:
            others += 1
            image = part.image_url
            images += (IMAGE_LOW_TOKENS if image.__class__ is _ImageURL
                       and image.detail == "low" else UNKNOWN_IMAGE_TOKENS)
    return text, images, others


def _builtin(content: Any) -> Any:
    """Decoded content as the client's JSON value (what the fingerprint hashes)."""
    if content.__class__ is list:
        return msgspec.to_builtins(content)
    return None if content is _UNSET else content


