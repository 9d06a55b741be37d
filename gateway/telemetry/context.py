"""What is in the window: a request's input tokens by source (issue 26), cheaply.

The breakdown is derived from sizes the request already has, never a second tokenization:
text is counted at four characters a token (the same estimate the budget level uses below
the trigger), images at the fixed estimates of ``gateway.compaction.tokens`` (base64 data
is never read), tool schemas from their serialized length. Sources:

``system``    system and developer messages (Responses ``instructions``, Anthropic ``system``)
``tools``     tool schemas (``tools`` / legacy ``functions``)
``history``   every earlier message (tool results, the summary and images within it too)
``tool_results`` / ``summary`` / ``images``  parts of ``history``
``turn``      the new turn: the messages after the last assistant message
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson

from gateway.projection.anomalies import Message
from gateway.projection.exchanges import turn_start
from gateway.projection.lazy_messages import LazyMessages

# The estimates of gateway.compaction.tokens (which telemetry must not import: compaction
# reports through telemetry).
MESSAGE_OVERHEAD = 3
CALL_OVERHEAD = 3  # tokens a tool call costs besides its name and arguments
UNKNOWN_ARGUMENTS_CHARS = 16  # a call whose arguments are not a string
TOOLS_OVERHEAD = 12
IMAGE_LOW_TOKENS = 85
UNKNOWN_IMAGE_TOKENS = 765
NON_TEXT_PART_TOKENS = 256
CHARS_PER_TOKEN = 4
SOURCES = ("system", "tools", "history", "tool_results", "summary", "images", "turn")
SYSTEM_ROLES = frozenset({"system", "developer"})
_IMAGE_TYPES = frozenset({"image_url", "input_image", "image"})
_OTHER_MEDIA = frozenset({"input_audio", "file", "input_file", "document"})


@dataclass(frozen=True, slots=True)
class ContextBreakdown:
    """Estimated input tokens by source, the window used (ratio) and the budget level."""

    system: int = 0
    tools: int = 0
    history: int = 0
    tool_results: int = 0
    summary: int = 0
    images: int = 0
    turn: int = 0
    level: str | None = None
    used: float | None = None  # (input + reserve) / window, as the compaction trigger sees it

    @property
    def total(self) -> int:
        """The estimated input tokens (system + tools + history + turn)."""
        return self.system + self.tools + self.history + self.turn

    def tokens(self) -> dict[str, int]:
        """Source -> tokens (the histogram's ``source`` label values)."""
        return {source: getattr(self, source) for source in SOURCES}

    def header(self) -> str:
        """``x-gateway-context``: the level word first (as before), then the numbers."""
        parts = [self.level or "unknown"]
        if self.used is not None:
            parts.append(f"used={self.used:.2f}")
        parts += [f"{source}={n}" for source, n in self.tokens().items()]
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """The inspector's and the access log's view."""
        return {"level": self.level, "used": None if self.used is None else round(self.used, 4),
                "total": self.total, **self.tokens()}


def _text_tokens(chars: int) -> int:
    return -(-chars // CHARS_PER_TOKEN)


def content_tokens(content: Any) -> tuple[int, int]:
    """(text tokens, image tokens) of one message's content."""
    if content is None:
        return 0, 0
    if isinstance(content, str):
        return _text_tokens(len(content)), 0
    if not isinstance(content, list):
        return _text_tokens(len(orjson.dumps(content, default=str))), 0
    text = images = 0
    for part in content:
        if isinstance(part, str):
            text += len(part)
        elif not isinstance(part, Mapping):
            continue
        elif isinstance(part.get("text"), str):
            text += len(part["text"])
        elif part.get("type") in _IMAGE_TYPES:
            image = part.get("image_url")
            low = isinstance(image, Mapping) and image.get("detail") == "low"
            images += IMAGE_LOW_TOKENS if low else UNKNOWN_IMAGE_TOKENS
        elif part.get("type") in _OTHER_MEDIA:
            images += NON_TEXT_PART_TOKENS
        else:
            inner_text, inner_images = content_tokens(part.get("content"))
            text += inner_text * CHARS_PER_TOKEN
            images += inner_images
    return _text_tokens(text), images


def _calls(message: Message) -> int:
    calls = message.get("tool_calls")
    if calls.__class__ is not list:
        return 0
    chars = 0
    for call in calls:  # (JSON objects are dicts: no Mapping checks on the hot path)
        function = call.get("function") if call.__class__ is dict else None
        if function.__class__ is dict:
            name, arguments = function.get("name"), function.get("arguments")
            chars += (len(name) if name.__class__ is str else len(str(name or ""))) + (
                len(arguments) if arguments.__class__ is str else UNKNOWN_ARGUMENTS_CHARS)
    return _text_tokens(chars) + CALL_OVERHEAD * len(calls)


# Estimated tokens of the messages before an index: all of them, system/developer ones,
# tool results; and image tokens.
Totals = tuple[int, int, int, int]
_ZERO: Totals = (0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class CountedMessages:
    """What the edge's read of a request counted while validating messages ``start`` up to
    the end (a new body from 0, an agent's next turn from the first message it added), on
    the estimate of :func:`_walk`: their ``totals``, and the totals up to ``turn``, the
    message after the last assistant one among them (-1 when none is). The breakdown then
    walks no message the edge has already read."""

    start: int
    totals: Totals
    turn: int = -1
    at_turn: Totals = _ZERO


@dataclass(frozen=True, slots=True)
class EdgeTurn:
    """Which body a turn's messages are, as the edge read it (``turn``), the kept body it
    was read over (``extends``: its first ``reused`` messages are that body's objects) and
    what the edge counted of them (``counted``)."""

    turn: object | None
    extends: object | None = None
    reused: int = 0
    counted: CountedMessages | None = None

    def reused_after(self, token: object | None) -> int | None:
        """How many leading messages this turn shares with the turn named ``token``, when
        it was read over that one (else None: compare the lists)."""
        return self.reused if token is not None and self.extends is token else None


@dataclass(slots=True)
class _Sums:
    """What one turn counted: ``marks[i]`` are the totals before message ``i``, for the
    indexes a breakdown reads (0, the stored compaction's end, the new turn's start, the
    end)."""

    messages: Sequence[Message]
    marks: dict[int, Totals]
    turn: int  # where the new turn starts (after the last assistant message)
    token: object | None = None  # the edge's name for the body these messages are
    # The tool schemas (``tools``, ``functions``) last counted, and their tokens.
    schemas: tuple[Any, Any] = (None, None)
    schema_tokens: int = 0


# Tool schemas serialized lately, by the identity of the values (each entry holds them, so
# an id is not reused while it is kept): a request's context count and, when its answer
# comes, its prefix digest read the same ones, with other requests' turns in between; an
# agent's next turn, read over the previous one, has the very same values.
_SCHEMAS_KEPT = 64
_schemas: OrderedDict[tuple[int, int], tuple[Any, Any, bytes]] = OrderedDict()


def serialized_schemas(tools: Any, functions: Any) -> bytes:
    """``tools`` and legacy ``functions`` (those given) serialized, b"" when neither is."""
    key = (id(tools), id(functions))
    kept = _schemas.get(key)
    if kept is not None and kept[0] is tools and kept[1] is functions:
        _schemas.move_to_end(key)
        return kept[2]
    present = [schema for schema in (tools, functions) if schema]
    raw = orjson.dumps(present, default=str) if present else b""
    _schemas[key] = (tools, functions, raw)
    if len(_schemas) > _SCHEMAS_KEPT:
        _schemas.popitem(last=False)
    return raw


def forget_schemas() -> None:
    """Drop the serialized tool schemas kept (a benchmark's cold start)."""
    _schemas.clear()


def _schema_tokens(sums: _Sums, body: Mapping[str, Any], previous: _Sums | None) -> int:
    """The tokens of ``body``'s tool schemas; the previous turn's count when they are its
    very objects (a turn read over the previous one shares its other fields)."""
    schemas = (body.get("tools"), body.get("functions"))
    if (previous is not None and previous.schemas[0] is schemas[0]
            and previous.schemas[1] is schemas[1]):
        tokens = previous.schema_tokens
    else:
        raw = serialized_schemas(*schemas)
        tokens = TOOLS_OVERHEAD + _text_tokens(len(raw)) if raw else 0
    sums.schemas, sums.schema_tokens = schemas, tokens
    return tokens


def _walk(messages: Sequence[Message], start: int, stop: int, totals: Totals) -> Totals:
    """``totals`` (before message ``start``) carried over the messages up to ``stop``: one
    flat loop over locals, no list kept (the memo keeps only a few marks)."""
    t, s, o, pictures = totals
    for message in messages[start:stop] if start or stop < len(messages) else messages:
        content = message.get("content")
        if content.__class__ is str:  # the usual case, without a call
            tokens = MESSAGE_OVERHEAD + -(-len(content) // CHARS_PER_TOKEN)
        else:
            text, images = content_tokens(content)
            tokens = MESSAGE_OVERHEAD + text + images
            pictures += images
        if "tool_calls" in message:
            tokens += _calls(message)
        t += tokens
        role = message.get("role")
        if role == "tool":
            o += tokens
        elif role in SYSTEM_ROLES:
            s += tokens
    return t, s, o, pictures


def common_prefix(old: Sequence[Any], new: Sequence[Any]) -> int:
    """How many leading items ``new`` shares with ``old`` (equal, identical ones at C speed:
    list comparison checks identity first), by halving. Two message lists still unparsed
    are compared by their bytes when those tell (``LazyMessages.leading_shared``)."""
    if isinstance(old, LazyMessages) and isinstance(new, LazyMessages):
        shared = old.leading_shared(new)
        if shared is not None:
            return shared
    n = min(len(old), len(new))
    if old[:n] == new[:n]:
        return n
    low, high = 0, n - 1  # old[:low] == new[:low]; item ``high`` or before differs
    while low < high:
        mid = (low + high + 1) // 2
        if old[low:mid] == new[low:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _sums(messages: Sequence[Message], frozen: int, previous: _Sums | None,
          reused: int | None = None, counted: CountedMessages | None = None) -> _Sums:
    """The totals a breakdown of ``messages`` reads, counted from the last mark of
    ``previous`` within the leading messages they share (an agent's next turn, read over
    the one before it, shares them all: only the added messages are counted). ``reused``:
    how many they share, when the edge knows (comparing the lists would touch every message
    object, cold in memory by then: ~60 µs at 600 messages); ``counted``: what the edge
    counted of the messages from some index on (then those are not walked again)."""
    n = len(messages)
    if counted is not None and (counted.turn >= 0 or counted.start == 0):
        turn = max(counted.turn, 0)  # the edge saw where it starts (0: no assistant at all)
    else:
        turn = turn_start(messages)
    # A stored compaction is history (its summary), never the new turn: right after one is
    # made no assistant message follows it.
    turn = max(turn, min(frozen, n))
    known: dict[int, Totals] = {0: _ZERO}
    points = sorted({0, min(frozen, turn), turn, n})
    if counted is not None and counted.start == 0:  # read whole: every total is the edge's
        _count_from(known, counted, n)
    if previous is not None and not known.keys() >= set(points):
        # (a body read whole needs no comparison: it is a deep one, message by message,
        # when the turns are not the same objects: ~150 us at 600 messages)
        shared = reused if reused is not None else common_prefix(previous.messages, messages)
        known.update((i, v) for i, v in previous.marks.items() if i <= shared)
    if counted is not None and counted.start != 0 and counted.start in known:
        _count_from(known, counted, n)
    marks: dict[int, Totals] = {}
    for point in points:
        base = max(i for i in known if i <= point)
        known[point] = marks[point] = (known[base] if base == point
                                       else _walk(messages, base, point, known[base]))
    return _Sums(messages, marks, turn)


def count_messages(messages: Sequence[Message]) -> CountedMessages:
    """What a breakdown counts of a whole history (:func:`_walk`), counted by an edge that
    has just built its messages (a body read whole: they are still in the CPU's caches,
    where a breakdown later finds them cold, at twice the cost)."""
    turn = turn_start(messages)
    at_turn = _walk(messages, 0, turn, _ZERO)
    return CountedMessages(0, _walk(messages, turn, len(messages), at_turn),
                           turn if turn else -1, at_turn)


def _count_from(known: dict[int, Totals], counted: CountedMessages, n: int) -> None:
    """The marks ``counted`` gives (the end, and where the new turn starts when it saw
    that), over the known totals before its first message."""
    before = known[counted.start]
    known[n] = _plus(before, counted.totals)
    if counted.turn >= 0:
        known[counted.turn] = _plus(before, counted.at_turn)


def _plus(a: Totals, b: Totals) -> Totals:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]


def counted_after(before: CountedMessages, counted: CountedMessages) -> CountedMessages:
    """``counted`` (messages from ``counted.start`` on) over ``before`` (the messages before
    them, counted from the first): the counts of them all, so a breakdown walks none of them
    even when the session's previous turn is no longer remembered."""
    base = before.totals
    totals = _plus(base, counted.totals)
    if counted.turn >= 0:
        return CountedMessages(0, totals, counted.turn, _plus(base, counted.at_turn))
    if before.turn >= 0:  # the new turn started before the added messages
        return CountedMessages(0, totals, before.turn, before.at_turn)
    return CountedMessages(0, totals)


def counted_messages(messages: Sequence[Message], start: int, totals: Totals
                     ) -> CountedMessages:
    """What the edge counted of ``messages`` (a request's messages from index ``start``, their
    ``totals`` on this module's estimate), with the totals up to the new turn when it starts
    among them: the few messages after the last assistant one are walked again."""
    turn = turn_start(messages)
    if turn == 0:  # no assistant message among them
        return CountedMessages(start, totals)
    after = _walk(messages, turn, len(messages), _ZERO)
    return CountedMessages(start, totals, start + turn,
                           (totals[0] - after[0], totals[1] - after[1],
                            totals[2] - after[2], totals[3] - after[3]))


def _breakdown(sums: _Sums, body: Mapping[str, Any], frozen: int, level: str | None,
               used: float | None, previous: _Sums | None = None) -> ContextBreakdown:
    n, start = len(sums.messages), sums.turn
    frozen = min(frozen, start)
    marks = sums.marks
    t_n, s_n, _, _ = marks[n]
    t_turn, s_turn, o_turn, images = marks[start]
    t_frozen, s_frozen, o_frozen, _ = marks[frozen]
    system = s_n
    turn = (t_n - t_turn) - (s_n - s_turn)
    history = t_turn - s_turn
    summary = t_frozen - s_frozen
    tool_results = o_turn - o_frozen
    for key in ("instructions", "system"):  # native Responses / Messages: not messages
        if body.get(key):
            system += MESSAGE_OVERHEAD + content_tokens(body[key])[0]
    tools = _schema_tokens(sums, body, previous)
    return ContextBreakdown(system, tools, history, tool_results, summary, images, turn,
                            level, used)


def context_breakdown(messages: Sequence[Message], body: Mapping[str, Any], *, frozen: int = 0,
                      level: str | None = None, used: float | None = None) -> ContextBreakdown:
    """The breakdown of the ``messages`` to send (the first ``frozen`` are a stored
    compaction: its non-system messages count as the summary) and ``body``'s tool schemas."""
    return _breakdown(_sums(messages, frozen, None), body, frozen, level, used)


T = TypeVar("T")

# Sessions seen once are kept in a short probation list: a stream of one-off requests must
# not keep dozens of parsed histories alive (the edge's history cache has a byte budget;
# these memos count sessions).
PROBATION = 8


# Keys of sessions dropped from the probation, remembered without their data (a few hundred
# KB): when such a session comes back it is no one-off, and goes to the main part.
GHOSTS = 4096


class RecentSessions(Generic[T]):
    """An LRU of sessions with a short probation for those seen once (a segmented LRU, as
    2Q): a session's entry moves to the main part when its next turn finds it, or finds its
    key among those the probation dropped (many sessions starting at once outrun it)."""

    def __init__(self, sessions: int, probation: int = PROBATION) -> None:
        self._main: OrderedDict[str, T] = OrderedDict()
        self._new: OrderedDict[str, T] = OrderedDict()
        self._ghosts: OrderedDict[str, None] = OrderedDict()
        self._sizes = (sessions, probation)

    def pop(self, key: str) -> T | None:
        """The session's entry, taken out (None when it is not kept)."""
        found = self._main.pop(key, None)
        return found if found is not None else self._new.pop(key, None)

    def put(self, key: str, value: T, *, again: bool) -> T | None:
        """Keep ``value`` for ``key`` (``again``: the session was found, so it goes to the
        main part); the entry that had to go, if any."""
        if not again and key in self._ghosts:
            del self._ghosts[key]
            again = True  # dropped from the probation before its next turn came
        part, size = (self._main, self._sizes[0]) if again else (self._new, self._sizes[1])
        part[key] = value
        if len(part) <= size:
            return None
        dropped_key, dropped = part.popitem(last=False)
        if not again:
            self._ghosts[dropped_key] = None
            if len(self._ghosts) > GHOSTS:
                self._ghosts.popitem(last=False)
        return dropped

    def __len__(self) -> int:
        return len(self._main) + len(self._new)


class ContextMemo:
    """:func:`context_breakdown` for the recent sessions, each turn counting only the
    messages that are not the previous turn's own objects (bounded LRU of sessions)."""

    def __init__(self, sessions: int = 32) -> None:
        self._last: RecentSessions[_Sums] = RecentSessions(sessions)

    def breakdown(self, key: str, messages: Sequence[Message], body: Mapping[str, Any], *,
                  frozen: int = 0, level: str | None = None, used: float | None = None,
                  edge: EdgeTurn | None = None,
                  extends: Sequence[Message] | None = None) -> ContextBreakdown:
        """The breakdown of this turn of session ``key`` (see :func:`context_breakdown`);
        ``edge``: which body ``messages`` are, as the edge read them; ``extends``: a list
        whose items (the very objects) begin ``messages``."""
        previous = self._last.pop(key)
        reused = edge.reused_after(previous.token) if edge and previous else None
        if reused is None and previous is not None and previous.messages is extends:
            reused = len(previous.messages)  # laid out over the previous turn's list
        sums = _sums(messages, frozen, previous, reused,
                     edge.counted if edge is not None else None)
        sums.token = edge.turn if edge is not None else None
        self._last.put(key, sums, again=previous is not None)
        return _breakdown(sums, body, frozen, level, used, previous)
