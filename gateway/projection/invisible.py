"""Invisible characters: the text a person cannot see and a model reads (pure, no I/O).

What counts (:func:`kind_at`):

- ``tag``: the Unicode tag block U+E0000-E007F ("ASCII smuggling": each tag character
  mirrors an ASCII one, so a hidden instruction decodes back to text, :func:`decode_tags`).
  A subdivision flag (U+1F3F4 followed by tag letters and the cancel tag) is an emoji.
- ``bidi``: embeddings, overrides and isolates (U+202A-202E, U+2066-2069), which make a
  text read differently on screen than in the model's input. The marks of normal
  right-to-left text (LRM, RLM, ALM) are not counted.
- ``zero_width``: ZWSP, word joiner, BOM / ZWNBSP, the Mongolian vowel separator, and ZWJ /
  ZWNJ outside the scripts that need them: a ZWJ between two emoji (a family, a profession)
  and a ZWJ or ZWNJ after a letter of a joining script (Arabic, Persian, Syriac, the
  Indic scripts...) are text.
- ``other``: the remaining default-ignorable format characters that no text needs
  (invisible math operators, deprecated format controls, Hangul fillers, shorthand and
  musical format controls, unassigned tag-plane code points) and the interlinear
  annotation controls. Variation selectors, the soft hyphen and the combining grapheme
  joiner are text.

:func:`scan` finds them in a wire body's text (``roots``: the fields the model reads),
:func:`strip` removes them; neither touches signed content (thinking blocks, encrypted
reasoning, signatures) nor base64 data. A precheck runs over the raw request bytes
first (:func:`may_hold`: UTF-8 and JSON ``\\u`` escapes): a body it does not match holds
nothing to find.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any

from gateway.projection.byte_search import SEARCH_FROM, holds, rust_pattern

INVISIBLE_CHARS_STRIPPED = "invisible_chars_stripped"

TAG, BIDI, ZERO_WIDTH, OTHER = "tag", "bidi", "zero_width", "other"

# Every code point that may count (context decides ZWJ, ZWNJ and tags).
_BMP_CANDIDATES = (
    "\u180e\u200b-\u200d\u2060-\u2064\u206a-\u206f\u202a-\u202e\u2066-\u2069\ufeff"
    "\u115f\u1160\u17b4\u17b5\u3164\uffa0\ufff9-\ufffb"
)
_CANDIDATES = _BMP_CANDIDATES + "\U000e0000-\U000e00ff"
CANDIDATE = re.compile(f"[{_CANDIDATES}]")

# The same set over raw request bytes, by UTF-8 lead byte (each searched only when that
# byte occurs: a memchr), and as JSON escapes (a high surrogate stands for the tag block).
# A match says "look closer" only.
_PRECHECK_UTF8 = (
    (b"\xe2", re.compile(rb"\xe2(?:\x80[\x8b-\x8d\xaa-\xae]|\x81[\xa0-\xa4\xa6-\xaf])")),
    (b"\xef", re.compile(rb"\xef(?:\xbb\xbf|\xbe\xa0|\xbf[\xb9-\xbb])")),
    (b"\xf3", re.compile(rb"\xf3\xa0[\x80-\x83][\x80-\xbf]")),
    (b"\xe1", re.compile(rb"\xe1(?:\xa0\x8e|\x85[\x9f\xa0]|\x9e[\xb4\xb5])")),
    (b"\xe3", re.compile(rb"\xe3\x85\xa4")),
)
_PRECHECK_ESCAPED = re.compile(
    rb"\\u(?:200[b-dB-D]|202[a-eA-E]|206[0-46-9a-fA-F]|[fF][eE][fF][fF]|180[eE]|115[fF]|1160"
    rb"|17[bB][45]|3164|[fF][fF][aA]0|[fF][fF][fF][9a-bA-B]|[dD][bB]40)"
)
# Whether ASCII bytes hold a ``\u`` at all. ``re`` walks them byte by byte (~0.3 ns a byte:
# JSON text has a backslash every few dozen bytes, so no memchr skips far); the Rust regex
# finds the literal with a vectorized substring search (~0.02 ns a byte).
_HAS_ESCAPE = rust_pattern(r"\\u")


def _alternatives(members: str) -> str:
    """A character class's members (``x`` and ``a-c`` items) as an alternation: the Rust
    regex keeps its fast literal search for that form, not for one large class (~25x)."""
    items, i = [], 0
    while i < len(members):
        if members[i + 1:i + 2] == "-":
            items.append(f"[{members[i:i + 3]}]")
            i += 3
        else:
            items.append(members[i])
            i += 1
    return "|".join(items)


# UTF-8 bytes (given as bytes: pydantic-core reads them as UTF-8 without a copy) searched
# at once for an escaped candidate or a literal one of the Basic Multilingual Plane, by
# the Rust regex (~0.1 ns a byte; ``re`` needs a pass per lead byte, ~0.5 ns a byte where
# punctuation such as dashes and quotes shares the lead byte). The tag block is left out
# (its astral range makes the search ~30x slower): its lead byte F3 is rare and has a
# memchr of its own.
_MAY_HOLD_UTF8 = rust_pattern(_PRECHECK_ESCAPED.pattern.decode() + "|"
                              + _alternatives(_BMP_CANDIDATES))
_TAG_LEAD = b"\xf3"

_ZWNJ, _ZWJ = "\u200c", "\u200d"
_BLACK_FLAG = "\U0001f3f4"
_CANCEL_TAG = "\U000e007f"
# Scripts whose letters join or conjoin, where ZWJ and ZWNJ shape the text: Arabic,
# Syriac, Thaana, N'Ko, Mandaic, Arabic supplements, the Indic scripts, Sinhala, Thai..
# Tibetan, Myanmar, Khmer, Mongolian, and the Arabic presentation forms.
_JOINING = re.compile(
    "[\u0600-\u06ff\u0700-\u074f\u0750-\u077f\u0780-\u07bf\u07c0-\u07ff\u0840-\u085f"
    "\u0860-\u086f\u0870-\u089f\u08a0-\u08ff\u0900-\u0dff\u0e00-\u0fff\u1000-\u109f"
    "\u1780-\u17ff\u1800-\u18af\ua8e0-\ua8ff\ufb50-\ufdff\ufe70-\ufeff"
    "\U00010a00-\U00010a5f\U00011000-\U000111ff]"
)
_EMOJI_TAIL = re.compile("[\ufe0f\U0001f3fb-\U0001f3ff\u20e3]")


def _is_emoji(char: str) -> bool:
    cp = ord(char)
    return (0x1F000 <= cp <= 0x1FAFF or 0x2600 <= cp <= 0x27BF or 0x2B00 <= cp <= 0x2BFF
            or cp in (0x00A9, 0x00AE, 0x203C, 0x2049, 0x2122, 0x2139, 0x3030, 0x303D)
            or 0x2190 <= cp <= 0x21FF or 0x2300 <= cp <= 0x23FF)


def _emoji_before(text: str, at: int) -> bool:
    """True when an emoji (with its modifiers or presentation selector) ends at ``at``."""
    i = at - 1
    while i >= 0 and _EMOJI_TAIL.match(text[i]):
        i -= 1
    return i >= 0 and _is_emoji(text[i])


def _joining_before(text: str, at: int) -> bool:
    """True when the letter before ``at`` (combining marks skipped) is of a joining script."""
    i = at - 1
    while i >= 0 and unicodedata.category(text[i]) in ("Mn", "Mc"):
        i -= 1
    return i >= 0 and _JOINING.match(text[i]) is not None


def _in_flag(text: str, at: int) -> bool:
    """True when the tag character at ``at`` belongs to a subdivision flag: U+1F3F4, tag
    letters or digits, the cancel tag."""
    start = at
    while start > 0 and "\U000e0020" <= text[start - 1] <= "\U000e007e":
        start -= 1
    if start == 0 or text[start - 1] != _BLACK_FLAG:
        return False
    end = at
    while end < len(text) and ("\U000e0030" <= text[end] <= "\U000e0039"
                               or "\U000e0061" <= text[end] <= "\U000e007a"):
        end += 1
    return end < len(text) and text[end] == _CANCEL_TAG and end - start >= 1


def kind_at(text: str, at: int) -> str | None:
    """The kind of invisible character at ``text[at]``, or None when it is text (or not a
    candidate at all)."""
    char = text[at]
    cp = ord(char)
    if 0xE0000 <= cp <= 0xE007F:
        return None if _in_flag(text, at) else TAG
    if 0x202A <= cp <= 0x202E or 0x2066 <= cp <= 0x2069:
        return BIDI
    if char == _ZWJ:
        if _emoji_before(text, at) and at + 1 < len(text) and _is_emoji(text[at + 1]):
            return None
        return None if _joining_before(text, at) else ZERO_WIDTH
    if char == _ZWNJ:
        return None if _joining_before(text, at) else ZERO_WIDTH
    if cp in (0x200B, 0x2060, 0xFEFF, 0x180E):
        return ZERO_WIDTH
    if CANDIDATE.match(char):
        return OTHER
    return None


def decode_tags(text: str) -> str:
    """The ASCII text that tag characters mirror (others left out)."""
    return "".join(chr(ord(c) - 0xE0000) for c in text if 0xE0020 <= ord(c) <= 0xE007E)


@dataclass(frozen=True, slots=True)
class Finding:
    """One run of invisible characters of one kind in one string.

    ``path`` names the string in the body (``messages[3].content[0].text``); ``offset`` is
    the run's first character in it; ``hidden`` is the text a run of tag characters spells.
    """

    path: str
    offset: int
    kind: str
    count: int
    code_points: tuple[str, ...] = ()
    hidden: str = ""

    @property
    def where(self) -> str:
        """The message or item the string belongs to (``messages[3]``, ``system``)."""
        return where_of(self.path)

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of reports (the inspector, the dry run, a ``400``)."""
        out: dict[str, Any] = {"path": self.path, "offset": self.offset, "kind": self.kind,
                               "count": self.count, "code_points": list(self.code_points)}
        if self.hidden:
            out["hidden_text"] = self.hidden
        return out


def where_of(path: str) -> str:
    """The first element of ``path``: ``messages[3]`` of ``messages[3].content``."""
    head, dot, _rest = path.partition(".")
    return head if dot or "[" in head else path


@dataclass(frozen=True, slots=True)
class Scan:
    """What one body holds: its findings, in body order."""

    findings: tuple[Finding, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)  # kind -> characters

    @property
    def total(self) -> int:
        """Invisible characters found."""
        return sum(f.count for f in self.findings)

    def places(self) -> list[str]:
        """The messages or items holding them, in order, each once."""
        return list(dict.fromkeys(f.where for f in self.findings))

    def hidden_text(self) -> list[dict[str, str]]:
        """The decoded tag-character messages, with where each was."""
        return [{"path": f.path, "text": f.hidden} for f in self.findings if f.hidden]


NOTHING = Scan()


def header(scan: Scan, limit: int = 6) -> str:
    """``x-gateway-invisible``: ``<count> in <where>`` (the first ``limit`` places)."""
    places = scan.places()
    shown = ",".join(places[:limit])
    more = f" and {len(places) - limit} more" if len(places) > limit else ""
    return f"{scan.total} in {shown}{more}"


# Keys whose values are never text for the model (ids, types, URLs) or must not change
# (signatures, encrypted content, base64 data).
_SKIP_KEYS = frozenset({
    "id", "type", "role", "name", "model", "call_id", "tool_call_id", "tool_use_id",
    "signature", "encrypted_content", "data", "url", "image_url", "file_data", "file_id",
    "image", "input_audio", "cache_control", "media_type", "status", "detail",
    "partial_json",
})
# Objects left whole: signed or encrypted content.
_SIGNED_TYPES = frozenset({"thinking", "redacted_thinking", "reasoning", "compaction"})


def _text_source(node: dict[str, Any]) -> bool:
    """An Anthropic document source whose ``data`` is plain text (the model reads it)."""
    return node.get("type") == "text" and isinstance(node.get("data"), str)


_MAX_HIDDEN = 4000  # characters of decoded tag text kept per run (reports stay small)


def _runs(text: str, path: str) -> list[Finding]:
    found: list[Finding] = []
    run_kind: str | None = None
    run_start = 0
    run: list[str] = []

    def close() -> None:
        if run_kind is not None and run:
            hidden = decode_tags("".join(run[:_MAX_HIDDEN])) if run_kind == TAG else ""
            points = tuple(dict.fromkeys(f"U+{ord(c):04X}" for c in run))
            found.append(Finding(path, run_start, run_kind, len(run), points[:8], hidden))

    last = -2
    for match in CANDIDATE.finditer(text):
        at = match.start()
        kind = kind_at(text, at)
        if kind is None:
            continue
        if kind != run_kind or at != last + 1:
            close()
            run_kind, run_start, run = kind, at, []
        run.append(text[at])
        last = at
    close()
    return found


def _path(trail: list[str | int]) -> str:
    return "".join(f"[{p}]" if p.__class__ is int else f".{p}" for p in trail)[1:]


def _walk(node: Any, trail: list[str | int], out: list[Finding], edit: bool) -> Any:
    """Scan (and with ``edit``, rebuild without what was found) one JSON value; ``trail``
    is its path, formatted only for a string that holds something (an ASCII string is
    skipped in O(1))."""
    cls = node.__class__
    if cls is str:
        if node.isascii() or CANDIDATE.search(node) is None:
            return node
        found = _runs(node, _path(trail))
        if not found:
            return node
        out.extend(found)
        if not edit:
            return node
        drop = {f.offset + k for f in found for k in range(f.count)}
        return "".join(c for i, c in enumerate(node) if i not in drop)
    if cls is list or isinstance(node, list):  # (a history parsed when read: a subclass)
        new_list: list[Any] | None = None
        for i, item in enumerate(node):
            if item.__class__ is str and item.isascii():
                continue
            trail.append(i)
            changed = _walk(item, trail, out, edit)
            trail.pop()
            if changed is not item:
                if new_list is None:
                    new_list = list(node)
                new_list[i] = changed
        return node if new_list is None else new_list
    if cls is dict:
        kind = node.get("type")  # any JSON value: only a string names a signed type
        if (kind.__class__ is str and kind in _SIGNED_TYPES) or "encrypted_content" in node:
            return node
        text_source = _text_source(node)
        new_dict: dict[str, Any] | None = None
        for key, value in node.items():
            if value.__class__ is str and value.isascii():
                continue
            if key in _SKIP_KEYS and not (key == "data" and text_source):
                continue
            trail.append(key)
            changed = _walk(value, trail, out, edit)
            trail.pop()
            if changed is not value:
                if new_dict is None:
                    new_dict = dict(node)
                new_dict[key] = changed
        return node if new_dict is None else new_dict
    return node


def _summary(found: list[Finding]) -> Scan:
    counts: Counter[str] = Counter()
    for f in found:
        counts[f.kind] += f.count
    return Scan(tuple(found), dict(counts))


def scan(body: dict[str, Any], roots: tuple[str, ...]) -> Scan:
    """The invisible characters in the fields ``roots`` of ``body`` (never mutated)."""
    found: list[Finding] = []
    for root in roots:
        if root in body:
            _walk(body[root], [root], found, False)
    return _summary(found)


def strip(body: dict[str, Any], roots: tuple[str, ...]) -> tuple[dict[str, Any], Scan]:
    """``body`` without the invisible characters of ``roots`` (the same object when it has
    none; a changed body shares everything that did not change) and what was removed."""
    found: list[Finding] = []
    out = body
    for root in roots:
        if root not in body:
            continue
        value = body[root]
        changed = _walk(value, [root], found, True)
        if changed is not value:
            if out is body:
                out = dict(body)
            out[root] = changed
    return out, _summary(found)


class MessageScans:
    """Each chat message scanned once: an agent's next turn shares its history's message
    objects with the turn before (``gateway.server.seen``), so only the new ones are
    walked. Results are kept by message identity (the message itself is held, so its id
    is not reused), the least recently used going first past ``max_bytes`` (estimated:
    each message is charged its body's bytes per message)."""

    def __init__(self, max_bytes: int = 8 * 1024 * 1024) -> None:
        self._max = max_bytes
        self._bytes = 0
        self._kept: OrderedDict[int, tuple[Any, int, tuple[Finding, ...], int]] = (
            OrderedDict())

    def scan(self, messages: list[Any], weight: int = 0,
             ) -> list[tuple[int, tuple[Finding, ...]]]:
        """(index, findings) of the messages that hold something; ``weight``: the bytes
        each message is charged."""
        out: list[tuple[int, tuple[Finding, ...]]] = []
        kept = self._kept
        for index, message in enumerate(messages):
            hit = kept.get(id(message))
            if hit is not None and hit[0] is message and hit[1] == index:
                kept.move_to_end(id(message))
                found = hit[2]
            else:
                walked: list[Finding] = []
                _walk(message, ["messages", index], walked, False)
                found = tuple(walked)
                if hit is not None:
                    self._bytes -= hit[3]
                kept[id(message)] = (message, index, found, weight)
                self._bytes += weight
                while self._bytes > self._max and kept:
                    self._bytes -= kept.popitem(last=False)[1][3]
            if found:
                out.append((index, found))
        return out

    def __len__(self) -> int:
        """Messages remembered."""
        return len(self._kept)

    def chat(self, messages: list[Any], tools: Any, edit: bool, weight: int = 0,
             ) -> tuple[dict[str, Any], Scan]:
        """A chat body's ``messages`` (and ``tools``) scanned, with ``edit`` stripped
        (messages that held nothing are the same objects)."""
        found: list[Finding] = []
        out = messages
        for index, hits in self.scan(messages, weight):
            found.extend(hits)
            if edit:
                if out is messages:
                    out = list(messages)
                out[index] = _walk(messages[index], ["messages", index], [], True)
        body: dict[str, Any] = {"messages": out}
        if tools is not None:
            body["tools"] = _walk(tools, ["tools"], found, edit)
        return body, _summary(found)


def may_hold(raw: bytes) -> bool:
    """False when the raw request bytes (or a slice of them: what a turn added) hold none
    of the characters. ASCII bytes cost one escape search; UTF-8 ones a memchr per lead
    byte, and a search where that byte occurs. A candidate that is text (a ZWNJ in Persian,
    a ZWJ in an emoji sequence) is judged in its context, so a conversation in a joining
    script is not walked on every turn; an escaped candidate always counts."""
    if raw.isascii():
        return _escapes_candidate(raw)
    if len(raw) >= SEARCH_FROM and _TAG_LEAD not in raw and not holds(
            _MAY_HOLD_UTF8, raw):
        return False  # (a match is judged below: a joiner may be text)
    if _PRECHECK_ESCAPED.search(raw) is not None:
        return True
    for lead, pattern in _PRECHECK_UTF8:
        if lead in raw:
            for match in pattern.finditer(raw):
                if _counts_at(raw, match.start(), match.end()):
                    return True
    return False


def _escapes_candidate(ascii_raw: bytes) -> bool:
    """Whether ASCII bytes hold a candidate as a JSON escape (the rest is ASCII)."""
    if len(ascii_raw) >= SEARCH_FROM and not holds(_HAS_ESCAPE, ascii_raw):
        return False  # no escape at all: the common case
    return _PRECHECK_ESCAPED.search(ascii_raw) is not None


_CONTEXT = 64  # bytes either side a candidate is judged with (a subdivision flag fits)


def _counts_at(raw: bytes, start: int, end: int) -> bool:
    """Whether the candidate encoded at ``raw[start:end]`` counts, judged in its context
    (characters cut at the window's edges are left out)."""
    before = raw[max(0, start - _CONTEXT):start].decode("utf-8", "ignore")
    after = raw[end:end + _CONTEXT].decode("utf-8", "ignore")
    return kind_at(before + raw[start:end].decode("utf-8") + after, len(before)) is not None


WIRE_ROOTS: dict[str, tuple[str, ...]] = {
    "chat": ("messages", "tools"),
    "responses": ("instructions", "input", "tools"),
    "anthropic": ("system", "messages", "tools"),
}
