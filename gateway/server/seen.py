"""Reading a Chat Completions body incrementally over the history its client sent before.

Agents resend their whole history on every call: turn N+1's body is turn N's with a few
messages added. The gateway keeps, per client and per worker, the bodies it read lately
(bounded by ``gateway.history_cache_mb``):
where each one's ``messages`` array closes, its top-level fields, its parsed messages and
what was learned of them (valid, the repair check's state, media parts, the session
fingerprint). A new body that starts with a kept body's bytes up to that point is the same
history plus what follows: only the added messages (and the top-level fields, when they
changed) are parsed and checked. Nothing else is trusted: the added bytes are parsed, the
array's end is found by a scan that builds nothing (msgspec), the top-level structure is
proved with a sentinel parse, and anything unexpected makes the caller read the body from
scratch. Parsed messages are shared between requests; nothing in
the gateway mutates a client's message (projection never does).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import msgspec
import orjson

from gateway.compaction.session_view import KnownHistory, media_parts
from gateway.projection.fastpath import CleanScan
from gateway.projection.incremental import TurnLayouts
from gateway.projection.invisible import may_hold
from gateway.projection.lazy_messages import (
    JSON_SPACE,
    LazyMessages,
    copy_messages,
    last_value_end,
)
from gateway.providers.prompt_cache import system_contents
from gateway.providers.splice import MESSAGES_SENTINEL, MESSAGES_SENTINEL_JSON
from gateway.server.kept_slots import KeptSlots
from gateway.sessions.hashing import session_fingerprint
from gateway.telemetry.context import CountedMessages, counted_after
from gateway.wires.chat_typed import CleanChat, body_messages
from gateway.wires.chat_validation import MAX_JSON_DEPTH

# Memory held per kept byte of JSON: the bytes themselves, their parsed messages and, for a
# repaired history, its projection and that projection's JSON.
_MEMORY_PER_BYTE = 4
_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")
_WS = JSON_SPACE
_RAW = msgspec.json.Decoder(msgspec.Raw)


@dataclass(slots=True, eq=False)  # compared by identity: never field by field
class _Seen:
    """A body read before: its bytes up to where the last message ends, and what follows."""

    prefix: memoryview  # the body up to where its last message ends
    tail: bytes  # the rest: the closing bracket, the later top-level fields, the brace
    start: int  # offset of the messages' opening bracket
    fields: dict[str, Any]  # the top-level fields, "messages" holding MESSAGES_SENTINEL
    messages: list[Any]
    scan: CleanScan  # the repair check's state after the messages (not finished)
    media: int
    fingerprint: str | None  # final once the messages hold a user message
    size: int  # the memory it holds (estimated)
    layouts: TurnLayouts  # its projection (made when it was not clean), for the next turn
    invisible: bool = True  # its bytes may hold invisible characters (projection.invisible)
    counted: CountedMessages | None = None  # the context counts of all its messages
    systems: list[Any] | None = None  # its system messages' contents (when collected)
    token: object = field(default_factory=object)  # names it to the telemetry of its turns

    @property
    def stable(self) -> int:
        """How many of its bytes a later turn repeats (where it is kept: ``kept_slots``)."""
        return len(self.prefix)


@dataclass(slots=True)
class Reading:
    """A body read over a seen one: the parsed body and what the reader still has to learn."""

    body: dict[str, Any]  # a fresh dict: callers may take fields out of it
    seen: _Seen
    added: list[Any]  # the messages that follow the seen ones
    prefix_end: int  # where this body's messages close
    tail: bytes
    fields: dict[str, Any]

    @property
    def checked(self) -> int:
        """How many leading messages were validated before."""
        return len(self.seen.messages)


class SeenBodies:
    """The bodies read lately, by client and probe bytes (``kept_slots``), the least
    recently used going first past ``max_bytes`` (estimated memory)."""

    def __init__(self, max_bytes: int, kept: KeptSlots | None = None) -> None:
        self.max_bytes = max_bytes
        # (``kept``: the store shared with the other wires' readers, within ``max_bytes``)
        self._kept = kept if kept is not None else KeptSlots(max_bytes)
        # Tool lists read lately, by their JSON bytes: every session of an agent sends the
        # same tools, and a body read whole takes the one parsed before (see _locate).
        self._tools: OrderedDict[bytes, Any] = OrderedDict()
        self.extended = 0  # bodies read over a seen one

    def read(self, raw: bytes, owner: str | None) -> Reading | None:
        """The body parsed over a seen one it extends; None when none matches (the caller
        then parses it whole) or anything about it is unexpected."""
        for seen in self._kept.candidates(raw, owner):
            if isinstance(seen, _Seen) and raw.startswith(seen.prefix):
                reading = _extend(raw, seen)
                self.extended += reading is not None
                return reading
        return None

    def learn(self, raw: bytes, owner: str | None, body: dict[str, Any],
              messages: list[Any], reading: Reading | None,
              counted: CountedMessages | None = None) -> KnownHistory:
        """What the validated ``messages`` of ``raw`` are (read whole or over a seen body),
        keeping the body for the requests that extend it; ``counted``: what validating them
        counted for the context report (from the first added message; made to count them
        all when the kept body's counts are known)."""
        kept: _Seen | None
        systems: list[Any] | None = None
        if reading is not None:
            seen = reading.seen
            if seen.systems is not None:
                systems = seen.systems + system_contents(reading.added)
            if (counted is not None and seen.counted is not None
                    and counted.start == len(seen.messages)):
                counted = counted_after(seen.counted, counted)
            scan = seen.scan.copy()
            scan.feed(reading.added)
            media = seen.media + media_parts(reading.added)
            fingerprint = seen.fingerprint or _fingerprint(messages)
            layouts = TurnLayouts(seen.layouts.current, reading.added)
            # Only the bytes this turn added are searched (the rest was, the turn before).
            invisible = seen.invisible or may_hold(raw[len(seen.prefix):])
            if not reading.added and reading.tail is seen.tail:
                kept = seen  # the very same body again (a retry): keep the one copy
                kept.layouts = layouts
            else:  # (a copy of the list: the request's own may be edited while it runs)
                copied = copy_messages(messages)
                size = len(raw) * (1 if isinstance(copied, LazyMessages) else _MEMORY_PER_BYTE)
                kept = _Seen(memoryview(raw)[:reading.prefix_end], reading.tail, seen.start,
                             reading.fields, copied, scan, media, fingerprint, size, layouts,
                             invisible, _from_first(counted), systems)
        else:
            scan = CleanScan()
            scan.feed(messages)
            media = media_parts(messages)
            fingerprint = _fingerprint(messages)
            layouts = TurnLayouts()
            invisible = may_hold(raw)
            kept = _locate(raw, body, messages, scan, media, fingerprint, layouts,
                           self._tools if self.max_bytes > 0 else None)
            if kept is not None:
                kept.invisible, kept.counted = invisible, _from_first(counted)
        known = KnownHistory(scan.finish(), media,
                             fingerprint or session_fingerprint(messages), layouts, invisible,
                             kept.token if kept is not None else None,
                             reading.seen.token if reading is not None else None,
                             len(reading.seen.messages) if reading is not None else 0,
                             counted, systems, _written(raw, kept))
        if kept is not None:
            self._kept.keep(owner, kept, reading.seen if reading else None)
        return known

    def shared_tools(self, written: bytes) -> Any:
        """The tool list parsed before from the same bytes (every session of an agent sends
        the same tools), or None."""
        return _shared_tools(self._tools, written)

    def learn_clean(self, raw: bytes, owner: str | None, clean: CleanChat) -> KnownHistory:
        """:meth:`learn` for a body read whole by ``wires.chat_typed`` (valid and clean, its
        messages not parsed): it is kept with them unparsed, as :class:`LazyMessages`."""
        fingerprint = session_fingerprint(clean.fingerprint_messages)
        invisible = may_hold(raw)
        layouts = TurnLayouts()
        kept: _Seen | None = None
        body = clean.body
        # (not kept when fields were taken out of the body: a later turn's bytes hold them)
        if self.max_bytes > 0 and clean.messages and len(body) == clean.fields:
            if clean.tools is not None and not clean.tools_shared:
                _keep_tools(self._tools, clean.tools, body["tools"])
            cut = last_value_end(raw, clean.close)
            # (the messages stay unparsed: the kept body holds about its own bytes)
            fields = {**body, "messages": MESSAGES_SENTINEL}
            kept = _Seen(memoryview(raw)[:cut], raw[cut:], clean.start, fields,
                         clean.messages.twin(), CleanScan(), clean.media_parts,
                         fingerprint if clean.fingerprint_final else None, len(raw), layouts,
                         invisible, clean.counted, clean.systems)
        known = KnownHistory(True, clean.media_parts, fingerprint, layouts, invisible,
                             kept.token if kept is not None else None, None, 0, clean.counted,
                             clean.systems, _written(raw, kept))
        if kept is not None:
            self._kept.keep(owner, kept, None)
        return known


def _written(raw: bytes, kept: _Seen | None) -> memoryview | None:
    """The bytes of the messages array of ``raw`` (kept as ``kept``), or None."""
    return None if kept is None else history_bytes(raw, len(kept.prefix), kept.tail,
                                                   kept.start)


def history_bytes(raw: bytes, end: int, tail: bytes, start: int) -> memoryview:
    """The bytes of the history array of ``raw`` that opens at ``start``, whose last item
    ends at ``end``, ``tail`` following it (whitespace, then the closing bracket)."""
    return memoryview(raw)[start:end + tail.index(b"]") + 1]


def _from_first(counted: CountedMessages | None) -> CountedMessages | None:
    """``counted`` when it counts all the messages (from the first), else None."""
    return counted if counted is not None and counted.start == 0 else None


def _fingerprint(messages: list[Any]) -> str | None:
    """The session fingerprint when it is final (a user message is in ``messages``)."""
    for message in messages:
        if message.__class__ is dict and message.get("role") == "user":
            return session_fingerprint(messages)
    return None


def _extend(raw: bytes, seen: _Seen) -> Reading | None:
    if not seen.messages:  # a comma cannot follow the opening bracket: never extended
        return None
    cut = len(seen.prefix)
    if len(raw) >= cut + len(seen.tail) and raw.endswith(seen.tail):
        # The usual turn: the same later fields, messages added before them.
        between = raw[cut:len(raw) - len(seen.tail)]
        added = _added(between)
        if added is None:
            return None
        fields, tail, end = seen.fields, seen.tail, len(raw) - len(seen.tail)
    else:
        close = _value_end(raw, seen.start)
        if close is None or close < cut:
            return None
        added = _added(raw[cut:close])
        fields_or_none = _fields(raw, seen.start, close)
        if added is None or fields_or_none is None:
            return None
        fields, end = fields_or_none, last_value_end(raw, close)
        tail = raw[end:]
    body = dict(fields)
    kept = seen.messages
    if isinstance(kept, LazyMessages) and not kept.parsed:
        # Kept unparsed (proved clean as it was read): this body's messages stay unparsed
        # too, the added ones parsed (they are checked) and read again when needed.
        close = end + tail.index(b"]")
        body["messages"] = LazyMessages(memoryview(raw)[seen.start:close + 1],
                                        len(kept) + len(added))
    else:
        body["messages"] = kept + added if added else list(kept)
    return Reading(body, seen, added, end, tail, fields)


def _added(between: bytes) -> list[Any] | None:
    """The messages in the bytes between a seen body's last message and the closing
    bracket: nothing (whitespace), or a comma and complete JSON values."""
    rest = between.strip(_WS)
    if not rest:
        return []
    if rest[:1] != b",":
        return None
    inner = rest[1:]
    if not shallow(inner, 2):  # (inside the body's object and its messages array)
        return None
    try:
        added = orjson.loads(b"[" + inner + b"]")
    except orjson.JSONDecodeError:
        return None
    return added if added else None


def _value_end(raw: bytes, start: int) -> int | None:
    """Offset of the bracket that closes the array opening at ``start`` (one scan, nothing
    built), or None."""
    try:
        _RAW.decode(memoryview(raw)[start:])
    except msgspec.DecodeError as err:
        found = _TRAILING.search(str(err))
        if found is None:
            return None
        close = start + int(found.group(1)) - 2  # the byte reported is 1-based
        while close > start and raw[close] in _WS:
            close -= 1
        return close if raw[close] == 0x5D else None  # ]
    return None  # the array ends the body: not an object's member


def _fields(raw: bytes, start: int, close: int) -> dict[str, Any] | None:
    """The top-level fields around the messages array at ``start``..``close``, parsed with
    the sentinel in its place (finding it as the top-level "messages", which no client can
    send, proves where the array sits): None unless that array is the body's "messages"."""
    outside = raw[:start] + raw[close + 1:]
    if not shallow(outside, 0):
        return None
    try:
        fields = orjson.loads(b"".join((raw[:start], MESSAGES_SENTINEL_JSON, raw[close + 1:])))
    except orjson.JSONDecodeError:
        return None
    if fields.__class__ is not dict or fields.get("messages") != MESSAGES_SENTINEL:
        return None
    return fields


def shallow(fragment: bytes, enclosing: int) -> bool:
    """True when JSON ``fragment``, inside ``enclosing`` levels, cannot be nested deeper
    than MAX_JSON_DEPTH (it has too few brackets); a deeper-looking one is read whole."""
    return fragment.count(b"[") + fragment.count(b"{") + enclosing <= MAX_JSON_DEPTH


def _locate(raw: bytes, body: dict[str, Any], messages: list[Any], scan: CleanScan,
            media: int, fingerprint: str | None, layouts: TurnLayouts,
            tools: OrderedDict[bytes, Any] | None = None) -> _Seen | None:
    """The kept form of a body read whole: where its messages array sits, found with one
    scan that builds nothing but the top-level fields' raw bytes, and proved by them: the
    first ``"messages": [`` is where the top-level array's bytes are, and the key occurs
    nowhere after it (then it is not a nested key with the same array, nor a duplicate).

    With ``tools`` (the tool lists read lately, by their bytes), a body whose ``tools`` are
    written byte for byte as a recent one's takes that one's parsed list (the same JSON
    value, validated then): every session of an agent sends the same tools, and one list
    shared by them is counted and digested once, not built, kept and freed per session."""
    found = body_messages(raw, body) if messages else None
    if found is None:
        return None
    top, start, close = found
    if tools is not None and (written := top.get("tools")) is not None:
        _share_tools(body, bytes(written), tools)
    # The later turns' body dicts are made from these fields: the parsed body's own
    # values (nothing changes a client's JSON in place), the array held by the sentinel.
    fields = {**body, "messages": MESSAGES_SENTINEL}
    cut = last_value_end(raw, close)
    return _Seen(memoryview(raw)[:cut], raw[cut:], start, fields, list(messages), scan, media,
                 fingerprint, len(raw) * _MEMORY_PER_BYTE, layouts)


_TOOLS_KEPT = 16  # tool lists shared (agents served at once, each with its own)
_TOOLS_MAX_BYTES = 256 * 1024  # a bigger list is not kept for sharing (bounded memory)


def _share_tools(body: dict[str, Any], written: bytes, tools: OrderedDict[bytes, Any]) -> None:
    """``body["tools"]`` replaced by the list parsed from the same bytes before, or kept as
    the one for those bytes."""
    if len(written) > _TOOLS_MAX_BYTES:
        return
    shared = _shared_tools(tools, written)
    if shared is not None:
        body["tools"] = shared
        return
    value = body.get("tools")
    # Checked once per list kept (a body may name "tools" twice: the bytes read here must
    # be the value the body holds).
    if value is not None and orjson.loads(written) == value:
        _keep_tools(tools, written, value)


def _shared_tools(tools: OrderedDict[bytes, Any], written: bytes) -> Any:
    """The list kept for the tools written as ``written``, or None."""
    shared = tools.get(written)
    if shared is not None:
        tools.move_to_end(written)
    return shared


def _keep_tools(tools: OrderedDict[bytes, Any], written: bytes, value: Any) -> None:
    """``value`` (checked) kept as the list for the tools written as ``written``."""
    if len(written) <= _TOOLS_MAX_BYTES:
        tools[written] = value
        if len(tools) > _TOOLS_KEPT:
            tools.popitem(last=False)
