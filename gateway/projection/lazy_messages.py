"""A request's messages parsed from the client's bytes only when something reads them.

``wires.chat_typed`` proves a new body valid and clean without building its messages; the
request then holds :class:`LazyMessages`, which the flow passes along like any message list
and which parse themselves the first time they are read (a refusal that climbs the ladder,
compaction, the inspector). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson


class LazyMessages(list[Any]):
    """The messages of a body read by ``wires.chat_typed``: a list that parses them from
    the client's bytes the first time anything reads it (then it is a plain list of the
    client's JSON, as a body read the general way holds). ``len()`` is known without that.

    Until then it holds one placeholder object that no serializer takes, so code that reads
    a list's storage directly from C (a serializer) fails loudly rather than seeing no
    messages; every list method parses first."""

    __slots__ = ("_count", "_source")

    def __init__(self, source: bytes | memoryview, count: int) -> None:
        super().__init__((_UNPARSED,))
        self._source: bytes | memoryview | None = source
        self._count = count

    @property
    def parsed(self) -> bool:
        """True once the messages were parsed (something read them)."""
        return self._source is None

    def unparsed_json(self) -> bytes | None:
        """The messages' JSON array, as the client wrote it, while they are unparsed (a
        writer may embed it as it is); None once parsed."""
        source = self._source
        return None if source is None else bytes(source)

    def twin(self) -> list[Any]:
        """An independent copy: unparsed while this one is (a list of its own parses them
        again when read), else a plain list."""
        source = self._source
        return LazyMessages(source, self._count) if source is not None else list(self)

    def leading_shared(self, other: LazyMessages) -> int | None:
        """How many leading messages this list and ``other`` share, told from their bytes
        alone while both are unparsed: when the shorter's array is the longer's cut right
        after a message (the same bytes up to a ``,`` between messages: a turn and the one
        that extends it, or an agent's history sent again from an earlier point), its
        length. None when the bytes do not tell (then compare the messages)."""
        short, long = self._source, other._source
        if short is None or long is None:
            return None
        count = self._count
        if len(short) > len(long):
            short, long, count = long, short, other._count
        return count if count == 0 or _cut_end(short, long) is not None else None

    def after_cut(self, cut: LazyMessages) -> list[Any] | None:
        """The messages of this list after those of ``cut``, parsed from their bytes alone,
        when ``cut`` (unparsed too) is this list's cut after a message
        (:meth:`leading_shared`); None otherwise."""
        mine, theirs = self._source, cut._source
        if mine is None or theirs is None:
            return None
        if cut._count == 0:
            rest = bytes(mine[1:])  # (every message is after an empty cut)
        else:
            end = _cut_end(theirs, mine)
            if end is None:
                return None
            rest = bytes(mine[end:]).lstrip(JSON_SPACE)
            if rest[:1] == b"]":
                return []  # (nothing after the cut)
            rest = rest[1:]  # (the "," after the cut)
        try:
            after: list[Any] = orjson.loads(b"[" + rest)
        except orjson.JSONDecodeError:
            return None
        return after

    def fill(self) -> None:
        """Parse the messages now (a no-op once they are)."""
        source = self._source
        if source is not None:
            # (parsed in full before it is marked so: a thread that reads it meanwhile parses
            # it too, and never sees the placeholder as a message)
            list.__setitem__(self, slice(None), orjson.loads(source))
            self._source = None

    def __len__(self) -> int:
        return self._count if self._source is not None else list.__len__(self)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        # Copied and pickled as the plain list of its messages.
        self.fill()
        return list, (list(self),)

    def __repr__(self) -> str:
        return (f"LazyMessages(<{self._count} messages, unparsed>)" if self._source is not None
                else list.__repr__(self))


JSON_SPACE = b" \t\r\n"  # the whitespace JSON allows between values


def last_value_end(array: bytes | memoryview, close: int) -> int:
    """Where an array's last value ends: its closing bracket (at ``close``), less the
    whitespace before it (a later turn writes its comma there)."""
    while array[close - 1] in JSON_SPACE:
        close -= 1
    return close


# A JSON token read backwards, over the bytes reversed: a string (its closing quote first;
# a quote inside it is escaped, an odd run of backslashes before it, so after it here), a
# bracket, a brace or a comma; or a lone quote, whose string the window cut.
_BACKWARDS = re.compile(rb'"[^"]*(?:"(?=\\(?:\\\\)*(?!\\))[^"]*)*"|[][{},"]')
_FIRST_WINDOW = 16 * 1024


class _Cut(Exception):
    """The values reach before the window read: read a larger one."""


def last_value_ends(array: bytes, start: int, close: int, most: int) -> list[int] | None:
    """Where the last ``most`` values of the JSON array between ``start`` (its opening
    bracket) and ``close`` (its closing one; one value at least) end, ascending (fewer when
    it holds fewer): each value's last byte + 1, as :func:`last_value_end` measures the
    last. Read backwards from the end only as far as those values reach (a history's last
    messages, not the whole array). ``array[start:close + 1]`` must be a valid JSON array
    (a typed read proved it); None when the bytes say otherwise."""
    window = _FIRST_WINDOW
    while True:
        # (a window that cuts a string, or the run of backslashes before a quote, misreads
        # only its far end: the values found before it are right, the rest is _Cut)
        begin = max(start + 1, close - window)
        try:
            return _ends_backwards(array, begin, close, most, begin == start + 1)
        except _Cut:
            window *= 4


def _ends_backwards(array: bytes, begin: int, close: int, most: int,
                    whole: bool) -> list[int] | None:
    """:func:`last_value_ends` over ``array[begin:close]`` (``whole``: the array's every
    value); raises ``_Cut`` when the values reach before ``begin``."""
    ends = [last_value_end(array, close)]
    if most <= 1:
        return ends
    backwards = array[begin:close][::-1]
    depth = 0
    for token in _BACKWARDS.finditer(backwards):
        at = token.start()
        char = backwards[at]
        if char == 0x22:  # (a string, skipped whole; a lone quote: cut, or not JSON)
            if token.end() - at == 1:
                if whole:
                    return None
                raise _Cut
        elif char in b"]}":
            depth += 1
        elif char in b"[{":
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0:  # a comma between two of the array's values
            end = close - 1 - at
            while array[end - 1] in JSON_SPACE:
                end -= 1
            ends.insert(0, end)
            if len(ends) == most:
                return ends
    if not whole:
        raise _Cut
    return ends if depth == 0 else None


def _cut_end(short: bytes | memoryview, long: bytes | memoryview) -> int | None:
    """The offset in ``long`` right after ``short``'s last message, when the array
    ``short`` (with messages) is ``long`` cut there, after a message; None otherwise."""
    end = last_value_end(short, len(short) - 1)
    if len(long) <= end:
        return None
    # (bytes.startswith compares in C at once; comparing memoryviews goes byte by byte)
    if not (long if long.__class__ is bytes else bytes(long)).startswith(short[:end]):
        return None
    rest = bytes(long[end:end + 64]).lstrip(JSON_SPACE)
    return end if rest[:1] in (b",", b"]") else None


class _Unparsed:
    """The placeholder an unparsed :class:`LazyMessages` holds (see there)."""

    __slots__ = ()


_UNPARSED = _Unparsed()


def _parsing(name: str) -> Callable[..., Any]:
    method = getattr(list, name)

    def parsed_first(self: LazyMessages, *args: Any) -> Any:
        self.fill()
        return method(self, *args)

    parsed_first.__name__ = name
    return parsed_first


_LIST_METHODS = ("__iter__", "__getitem__", "__setitem__", "__delitem__", "__contains__",
                 "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__add__",
                 "__iadd__", "__mul__", "__rmul__", "__imul__", "__reversed__", "append",
                 "extend", "insert", "pop", "remove", "index", "count", "copy", "sort",
                 "reverse", "clear")
for _name in _LIST_METHODS:
    setattr(LazyMessages, _name, _parsing(_name))
LazyMessages.__hash__ = None


class DeferredMessages(list[Any]):
    """Messages that ``build`` makes the first time anything reads them: a wire adapter's
    neutral view of a history it proved plain without building it (``wires``). ``len()``
    is known without that. ``built`` is what ``build`` returned (the whole view), whose
    ``messages`` this list then holds (the same objects).

    Until then it holds the placeholder :class:`LazyMessages` holds (a serializer that
    reads a list's storage from C fails loudly); every list method builds first."""

    __slots__ = ("_build", "_count", "_origin", "built")

    def __init__(self, build: Callable[[], Any], count: int,
                 origin: DeferredMessages | None = None) -> None:
        super().__init__((_UNPARSED,))
        self._build: Callable[[], Any] | None = build
        self._count = count
        self._origin = origin
        self.built: Any = None

    @property
    def parsed(self) -> bool:
        """True once the messages were built (something read them)."""
        return self._build is None

    def twin(self) -> list[Any]:
        """A copy: unbuilt while this list is (it holds this list's very messages once
        built), else a plain list."""
        if self._build is None:
            return list(self)
        return DeferredMessages(self._copy, self._count, self)

    def _copy(self) -> Any:
        self.fill()
        return self

    def is_twin_of(self, other: list[Any]) -> bool:
        """True when this list is an unbuilt :meth:`twin` of ``other`` (nothing changed it:
        any change builds it first)."""
        return self._origin is other and self._build is not None

    def fill(self) -> None:
        """Build the messages now (a no-op once they are)."""
        build = self._build
        if build is not None:
            made = build()
            origin = self._origin
            if origin is not None and made is origin:  # (a twin: the origin's messages)
                list.__setitem__(self, slice(None), list(origin))
                made = origin.built
            else:
                list.__setitem__(self, slice(None), made.messages)
            self.built, self._build, self._origin = made, None, None

    def __len__(self) -> int:
        return self._count if self._build is not None else list.__len__(self)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        self.fill()
        return list, (list(self),)

    def __repr__(self) -> str:
        return (f"DeferredMessages(<{self._count} messages, unbuilt>)"
                if self._build is not None else list.__repr__(self))


def _building(name: str) -> Callable[..., Any]:
    method = getattr(list, name)

    def built_first(self: DeferredMessages, *args: Any) -> Any:
        self.fill()
        return method(self, *args)

    built_first.__name__ = name
    return built_first


for _name in _LIST_METHODS:
    setattr(DeferredMessages, _name, _building(_name))
DeferredMessages.__hash__ = None


def copy_messages(messages: list[Any]) -> list[Any]:
    """A copy of a message list (unparsed while :class:`LazyMessages` are, unbuilt while
    :class:`DeferredMessages` are)."""
    if isinstance(messages, LazyMessages | DeferredMessages):
        return messages.twin()
    return list(messages)


def dumps_request(body: dict[str, Any]) -> bytes:
    """``orjson.dumps(body)`` for a request body whose history (``messages``, ``input``)
    may be :class:`LazyMessages`: an unparsed one is written as the client's JSON (a
    serializer reads a list's storage directly, and would find the placeholder)."""
    out = body
    for key, value in body.items():
        if value.__class__ is LazyMessages:
            written = value.unparsed_json()
            if written is not None:
                out = {**out, key: orjson.Fragment(written)}
    return orjson.dumps(out)
