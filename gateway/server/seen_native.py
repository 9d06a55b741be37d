"""Reading a Messages or Responses turn over the plain one its client sent before.

An agent on the Messages or Responses API resends its whole history every turn, and the
gateway read all of it every time: parsed, checked, its neutral view built, the wire's
rules run over every item. A plain body (nothing in it the wire's rules change:
:mod:`gateway.wires.anthropic_plain`, :mod:`gateway.wires.responses_plain`) is kept per
client and per worker, with where its last few messages end, its history, their view and
what its later turns are checked against. A new body that repeats a kept one's bytes up
to the end of one of those messages and the same fields after its history is that history
with items added: only those are parsed, checked and read into the view. On the Messages
wire the cut may fall before the last message, because clients move a cache breakpoint to
the newest message every turn (Claude Code does): the earlier messages the marker left
are read again. Anything unexpected (the added items not plain, other fields, bytes that
do not parse as whole items after a comma) reads the body whole.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from gateway.projection.fastpath import is_clean
from gateway.projection.invisible import may_hold
from gateway.projection.lazy_messages import (
    JSON_SPACE,
    LazyMessages,
    last_value_ends,
)
from gateway.providers.splice import MESSAGES_SENTINEL
from gateway.server.kept_slots import KeptSlots
from gateway.server.offload import INLINE_BYTES
from gateway.server.seen import history_bytes, shallow
from gateway.sessions.hashing import session_fingerprint
from gateway.telemetry.prefix import same_prompt
from gateway.wires.anthropic_deferred import deferred_after
from gateway.wires.anthropic_plain import plain_after
from gateway.wires.anthropic_view import AnthropicView, extend_view
from gateway.wires.base import WireView
from gateway.wires.chat_typed import body_messages
from gateway.wires.deferred import DeferredView
from gateway.wires.responses_deferred import deferred_after as deferred_input_after
from gateway.wires.responses_plain import plain_input_after
from gateway.wires.responses_view import extend_input


@dataclass(frozen=True, slots=True)
class NativeWire:
    """How a wire's turn is read over a kept one."""

    key: str  # the history's field
    ends: int  # how many of a kept body's last items a later turn may cut after
    # The body is plain, given that its first ``cut`` items are a plain body's (its state);
    # an added item it takes has the types the wire's shape checks want (they are skipped).
    plain_after: Callable[[dict[str, Any], Any, int], Any]
    extend: Callable[[Any, int, list[Any]], WireView]  # the view over a kept one's
    extensible: Callable[[list[Any]], bool]  # a history that ends so may be extended
    # The unbuilt view over a kept one's (the kept items after the cut, those added, the
    # whole history) and the neutral messages they share, or None; None: the wire has none.
    deferred_after: Callable[[Any, list[Any], list[Any], list[Any]],
                             tuple[WireView, int] | None] | None = None
    # What the plain check may take for a kept history's last item when its bytes are
    # not read (it reads only its kind; a history kept unparsed may end with it), or None.
    last_item: dict[str, Any] | None = None
    # Whether a turn with these top-level fields may be read with its history unparsed.
    unparsed_turns: Callable[[dict[str, Any]], bool] = lambda fields: True


def _messages_end(messages: list[Any]) -> bool:
    if isinstance(messages, LazyMessages):
        return True  # (read typed, so plain: it ends with a user message)
    item = messages[-1]
    return type(item) is dict and item.get("role") == "user"


def _input_end(items: list[Any]) -> bool:
    """A user's (or system's) words or a tool's output: no run of calls open."""
    if isinstance(items, LazyMessages):
        return True  # (read typed: its reader told, ``PlainItems.extensible``)
    item = items[-1]
    if type(item) is not dict:
        return False
    kind = item.get("type")
    if kind == "function_call_output":
        return True
    return kind in (None, "message") and item.get("role") in ("user", "system", "developer")


def _not_stored(fields: dict[str, Any]) -> bool:
    """A Responses turn whose answer is not kept (``store: false``, as Codex sends): a kept
    answer is stored over the one before it by their inputs' very objects."""
    return fields.get("store") is False


MESSAGES = NativeWire("messages", 4, plain_after, extend_view, _messages_end, deferred_after)
RESPONSES = NativeWire("input", 1, plain_input_after, extend_input, _input_end,
                       deferred_input_after, {"type": "message", "role": "user"}, _not_stored)

# Memory held per kept byte of JSON: the bytes, the parsed messages and their view.
_MEMORY_PER_BYTE = 4
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])


@dataclass(slots=True, eq=False)  # compared by identity: never field by field
class _Turn:
    """A plain body read before (its history's ``messages`` or ``input``)."""

    prefix: memoryview  # the body up to where its last message ends
    tail: bytes  # the rest: the closing bracket, the later top-level fields, the brace
    start: int  # where its messages array opens
    ends: tuple[int, ...]  # where its last messages end, ascending (the last: the prefix's)
    fields: dict[str, Any]  # the top-level fields, the history holding MESSAGES_SENTINEL
    messages: list[Any]  # its history
    view: WireView
    plain: Any  # what its later turns are checked against (the wire's plain state)
    size: int
    clean: bool  # its neutral history needs no projection (``projection.fastpath``)
    fingerprint: str  # the session fingerprint (final: a plain body opens with a user turn)
    invisible: bool  # its bytes may hold invisible characters (``projection.invisible``)
    answer: object | None = None  # the kept record of its answer (``note_answer``)

    @property
    def stable(self) -> int:
        """How many of its bytes a later turn repeats (at least)."""
        return self.ends[0]


@dataclass(slots=True)
class TurnReading:
    """A body read over a kept one: its body, view and plain state."""

    body: dict[str, Any]  # a fresh dict: callers may take fields out of it
    view: WireView
    plain: Any
    kept: _Turn
    ends: tuple[int, ...]  # where its messages after the cut end
    shared: int  # its leading neutral messages that are the kept body's very objects
    clean: bool
    invisible: bool


@dataclass(frozen=True, slots=True)
class Learned:
    """What reading a plain body learned, for the Flow (``KnownHistory``)."""

    clean: bool
    fingerprint: str
    invisible: bool
    turn: object | None  # the kept body it is (per-session telemetry's token), if kept
    written: memoryview | None  # its messages array's bytes, if kept


class SeenNative:
    """The plain bodies of a wire read lately, by client, in the store of kept bodies
    (``kept_slots``) all readers share."""

    def __init__(self, kept: KeptSlots, wire: NativeWire) -> None:
        self._kept = kept  # (shared with the other wires' readers: one memory budget)
        self.wire = wire
        self.extended = 0  # bodies read over a kept one
        self.unparsed = 0  # of those, read with their history left unparsed

    def read(self, raw: bytes, owner: str | None) -> TurnReading | None:
        """``raw`` read over a kept body it extends; None when none does (the caller reads
        it whole), or when what it adds is not plain."""
        for kept in self._kept.candidates(raw, (self.wire.key, owner)):
            if isinstance(kept, _Turn) and raw.startswith(kept.prefix[:kept.ends[0]]):
                reading = _extend(raw, kept, self.wire)
                if reading is not None:
                    self.extended += 1
                    self.unparsed += isinstance(reading.body[self.wire.key], LazyMessages)
                return reading
        return None

    def learn(self, raw: bytes, owner: str | None, body: dict[str, Any], view: WireView,
              plain: Any, reading: TurnReading | None, keep: bool = True,
              span: tuple[int, int] | None = None) -> Learned:
        """What the Flow may take as known of a plain body (``raw``, read whole or over a
        kept one); ``keep``: it was sent as it came (``body`` is its every field), then it
        is kept for the turns that extend it. ``span``: where its history's array opens and
        closes, when a typed read found it (``chat_typed.messages_span``)."""
        messages = body[self.wire.key]
        kept: _Turn | None = None
        keep = keep and self.wire.extensible(messages)
        if reading is not None:
            clean, fingerprint = reading.clean, reading.kept.fingerprint
            invisible = reading.invisible
            if keep:
                ends = reading.ends[-self.wire.ends:]
                # (its tail starts right after its last message: whitespace there too)
                kept = _Turn(memoryview(raw)[:ends[-1]], raw[ends[-1]:], reading.kept.start,
                             ends, reading.kept.fields, messages, view, plain,
                             _memory(raw, messages), clean, fingerprint, invisible)
        else:
            if isinstance(view, DeferredView):  # (known without building the view)
                clean, fingerprint = view.clean, session_fingerprint(view.lead)
            else:
                clean = is_clean(view.messages)
                fingerprint = session_fingerprint(view.messages)
            invisible = may_hold(raw)
            if keep:
                kept = _located(raw, body, self.wire.key, view, plain, clean, fingerprint,
                                invisible, self.wire.ends, span)
        if kept is not None:
            self._kept.keep((self.wire.key, owner), kept,
                            reading.kept if reading is not None else None)
        written = None if kept is None else history_bytes(raw, len(kept.prefix), kept.tail,
                                                            kept.start)
        return Learned(clean, fingerprint, invisible, kept, written)


def note_answer(turn: object | None, record: object) -> None:
    """Remember, with a kept body (``Learned.turn``), the kept record of its answer: the
    record of the next turn, read over that body, is stored over it."""
    if isinstance(turn, _Turn):
        turn.answer = record


def answer_to(turn: object | None) -> object | None:
    """The kept record of the answer to a kept body (``note_answer``), if any."""
    return turn.answer if isinstance(turn, _Turn) else None


def _extend(raw: bytes, kept: _Turn, wire: NativeWire) -> TurnReading | None:
    tail = kept.tail
    limit = len(raw) - len(tail)
    if limit < kept.ends[0] or limit - kept.ends[0] > INLINE_BYTES or not raw.endswith(tail):
        return None  # (a turn that adds that much is read whole, off the event loop)
    first = kept.ends[0]
    count = len(kept.messages)
    for k in range(len(kept.ends) - 1, -1, -1):  # the longest repeated prefix first
        end = kept.ends[k]
        if end > limit or not raw.startswith(kept.prefix[first:end], first):
            continue
        cut = count - (len(kept.ends) - 1 - k)
        added = _values(raw, end, limit)
        if added is None:
            return None
        values, ends = added
        if (wire.deferred_after is not None and values
                and isinstance(kept.messages, LazyMessages)
                and wire.unparsed_turns(kept.fields)):
            unparsed = _unparsed(raw, kept, wire, k, values, limit)
            if unparsed is not None:
                body, view, plain, shared, clean = unparsed
                invisible = kept.invisible or may_hold(raw[end:limit])
                return TurnReading(body, view, plain, kept, (*kept.ends[:k + 1], *ends),
                                   shared, kept.clean and clean, invisible)
        messages = kept.messages[:cut] + values
        body = dict(kept.fields)
        body[wire.key] = messages
        plain = wire.plain_after(body, kept.plain, cut)
        if plain is None:
            return None
        view = wire.extend(kept.view, cut, messages)
        shared = _shared(kept.view, view, cut)
        # The exchange check resumes at the last assistant turn before the cut (the calls
        # it made may be owed): every exchange before it was closed, the history clean.
        resume = shared
        while resume and view.messages[resume - 1].get("role") != "assistant":
            resume -= 1
        resume = max(resume - 1, 0)
        clean = kept.clean and is_clean(view.messages[resume:])
        invisible = kept.invisible or may_hold(raw[end:limit])
        return TurnReading(body, view, plain, kept, (*kept.ends[:k + 1], *ends), shared,
                           clean, invisible)
    return None


def _unparsed(raw: bytes, kept: _Turn, wire: NativeWire, k: int, values: list[Any],
              limit: int) -> tuple[dict[str, Any], WireView, Any, int, bool] | None:
    """A turn read over a kept history read unparsed (typed, or over such a one; something
    may have parsed it since) and left unparsed: the kept body's messages from the one
    before the cut (message ``k`` of those whose ends it knows) read from their bytes, the
    plain check run on those and the added ``values`` alone, the view unbuilt
    (``wire.deferred_after``). Its body, view, plain state, how many neutral messages it
    shares with the kept view and whether the added ones are clean after them; None when
    that cannot be told so (then the kept history is parsed)."""
    assert wire.deferred_after is not None
    count = len(kept.messages)
    if k == len(kept.ends) - 1 and wire.last_item is not None:
        previous, replaced = wire.last_item, []
    else:
        # (message ``cut - 1``, and those after it that this turn replaced, from their bytes:
        # after the end of the one before it, or from the array's start when the kept ends
        # are those of every kept message, as a session's first turn's one ask)
        whole = kept.prefix.obj
        if not isinstance(whole, bytes):
            return None
        if k:
            read = _values(whole, kept.ends[k - 1], kept.ends[-1])
            if read is None:
                return None
            after = read[0]
        elif len(kept.ends) == count:
            try:
                after = orjson.loads(whole[kept.start:kept.ends[-1]] + b"]")
            except orjson.JSONDecodeError:
                return None
        else:
            return None
        previous, replaced = after[0], after[1:]
    cut = count - len(replaced)
    # The plain check reads the message before the cut and those after it; the ones
    # before it stand in for the kept ones (a plain history's roles alternate).
    other = {"role": "user" if previous.get("role") == "assistant" else "assistant"}
    body = dict(kept.fields)
    body[wire.key] = [other] * (cut - 1) + [previous, *values]
    plain = wire.plain_after(body, kept.plain, cut)
    if plain is None:
        return None
    close = limit + kept.tail.index(b"]")
    messages = LazyMessages(memoryview(raw)[kept.start:close + 1], cut + len(values))
    deferred = wire.deferred_after(kept.view, replaced, values, messages)
    if deferred is None:
        return None
    body[wire.key] = messages
    view, shared = deferred
    if replaced and len(values) >= len(replaced) and all(map(same_prompt, replaced, values)):
        # (read again only for a moved breakpoint: the prompt repeats the kept one whole,
        # as per-session telemetry compares turns)
        shared = len(kept.view.messages)
    return body, view, plain, shared, isinstance(view, DeferredView) and view.clean


def _shared(old: WireView, new: WireView, cut: int) -> int:
    """How many leading neutral messages ``new`` (read over ``old`` cut after ``cut`` wire
    items) shares with it."""
    if isinstance(new, AnthropicView):
        return bisect_left(new.groups, cut)
    return len(old.messages)  # (a Responses input is only read over the whole kept one)


def _values(raw: bytes, start: int, limit: int) -> tuple[list[Any], list[int]] | None:
    """The messages in ``raw[start:limit]`` (after a message, before the array closes:
    nothing, or a comma and whole JSON values) and where each ends; None otherwise."""
    between = raw[start:limit]
    rest = between.strip(JSON_SPACE)
    if not rest:
        return [], []
    if rest[:1] != b"," or not shallow(between, 2):  # (inside the body and its history)
        return None
    try:
        parts = _RAWS.decode(b"[" + rest[1:] + b"]")
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    if not parts:
        return None
    values: list[Any] = []
    ends: list[int] = []
    at = start
    for part in parts:
        written = bytes(part)
        at = _skip(raw, at)
        if raw[at:at + 1] != b",":
            return None
        at = _skip(raw, at + 1)
        if not raw.startswith(written, at):
            return None
        at += len(written)
        try:
            values.append(orjson.loads(written))
        except orjson.JSONDecodeError:
            return None  # (what orjson refuses, a lone surrogate, is read whole)
        ends.append(at)
    if at > limit or raw[at:limit].strip(JSON_SPACE):  # (then only the kept tail)
        return None
    return values, ends


def _skip(raw: bytes, at: int) -> int:
    while at < len(raw) and raw[at] in JSON_SPACE:
        at += 1
    return at


def _located(raw: bytes, body: dict[str, Any], key: str, view: WireView, plain: Any,
             clean: bool, fingerprint: str, invisible: bool, most: int,
             span: tuple[int, int] | None) -> _Turn | None:
    """The kept form of a plain body read whole: where its messages array sits (``span``,
    else proved as ``chat_typed.body_messages`` proves it) and where its last messages
    end."""
    messages = body.get(key)
    if not isinstance(messages, list) or not messages:
        return None
    if span is None:  # (a typed read's span holds exactly its history; else its values prove it)
        found = body_messages(raw, body, key)
        if found is None:
            return None
        start, close = found[1:]
        try:
            parts = _RAWS.decode(raw[start:close + 1])
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return None
        if len(parts) != len(messages):
            return None
    else:
        start, close = span
    ends = last_value_ends(raw, start, close, most)
    if ends is None:
        return None
    fields = {**body, key: MESSAGES_SENTINEL}
    return _Turn(memoryview(raw)[:ends[-1]], raw[ends[-1]:], start, tuple(ends), fields,
                 messages, view, plain, _memory(raw, messages), clean, fingerprint, invisible)


def _memory(raw: bytes, messages: list[Any]) -> int:
    """What keeping a body costs: a history still unparsed is held as its bytes."""
    unparsed = isinstance(messages, LazyMessages) and not messages.parsed
    return len(raw) * (1 if unparsed else _MEMORY_PER_BYTE)
