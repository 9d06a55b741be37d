"""Condensed tool outputs: the same facts in fewer tokens, the cached prefix kept.

Opt-in (``repair.tool_outputs: condense``, per model group and per owner): a valid request
is otherwise sent as written. Agents resend every tool result on every turn, and much of it
is noise a model does not need twice: a file read again, a JSON answer indented for a
terminal, colour codes, a progress line printed a hundred times. Each tool result's text
of at least :data:`MIN_CHARS` characters is condensed:

1. **Repeated output.** Text identical to an earlier tool result of the history becomes a
   reference to that result's call (:data:`SAME_OUTPUT`); the earlier result stays whole.
2. **Written more compactly.** Terminal escape sequences (colours, cursor moves) are
   removed, a JSON document written with indentation is written without it (the same
   values, keys in the same order), trailing spaces are cut from every line, and a line
   repeated three times or more in a row is kept once with a note of how many times more
   it came (:data:`REPEATED_LINE`).

Nothing else is touched: not a user, system or assistant message, not a tool call's
arguments, not images, not signed content. A result's condensed text depends only on the
result itself and the results before it, so turn N+1 condenses turn N's messages into the
very same bytes and the provider's prompt cache keeps hitting. Pure: no I/O, no logging;
the input messages are never mutated.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.projection.anomalies import Message

TOOL_OUTPUT_CONDENSED = "tool_output_condensed"

MIN_CHARS = 200  # shorter results are left as they are (a reference would save little)
# A reference to an earlier identical result, by the call it answered.
SAME_OUTPUT = "[Same output as the result of tool call {call_id} above.]"
REPEATED_LINE = "[previous line repeated {times} more times]"
_REPEATED_LINE_START = REPEATED_LINE[:REPEATED_LINE.index("{")]
_MIN_RUN = 3  # identical lines in a row that are collapsed
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})

# CSI sequences (colours, cursor moves, erase), OSC sequences (titles), character set
# switches, the two-byte escapes terminals print, and a lone ESC (nothing is left to form a
# new sequence, so condensing again changes nothing). An OSC 8 hyperlink is kept: its
# address is part of what the tool said.
_ESCAPES = re.compile(r"\x1b(?:(\]8;[^\x07\x1b]*(?:\x07|\x1b\\))|\[[0-?]*[ -/]*[@-~]"
                      r"|\][^\x07\x1b]*(?:\x07|\x1b\\)|[ -/]+[0-~]|[0-~]|)")
# A JSON document's strings and the runs of other characters between its whitespace.
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[^\s"]+')


@dataclass(frozen=True, slots=True)
class Condensed:
    """What condensing did to one request's history."""

    messages: list[Message]
    outputs: int = 0  # tool results condensed
    referenced: int = 0  # of them, replaced by a reference to an earlier identical one
    chars_before: int = 0  # their text before and after
    chars_after: int = 0
    indexes: tuple[int, ...] = ()  # where they are in the messages
    applied: bool = True  # False: only reported, the request went as written

    @property
    def saved_chars(self) -> int:
        """Characters the condensed results no longer carry."""
        return self.chars_before - self.chars_after

    @property
    def action(self) -> str:
        """``condense`` (made) or ``report`` (what it would have made)."""
        return "condense" if self.applied else "report"


def condense_text(text: str) -> str:
    """``text`` written more compactly (rule 2), or ``text`` itself when nothing changes."""
    document = _json_document(text)
    if document is not None:  # a JSON document: only its layout may go
        return document if len(document) < len(text) else text
    out = _ESCAPES.sub(_kept_escape, text) if "\x1b" in text else text
    if "\r" in out and "\n" in out:
        # What a terminal shows: a line rewritten after a carriage return. (A text whose
        # only line breaks are carriage returns is a file with old Mac line endings.)
        # (trailing spaces cut first, as they will be: what is left decides the same way
        # when condensed again)
        out = "\n".join(_as_shown(line.rstrip(" ")) if "\r" in line else line
                        for line in out.split("\n"))
    if out is not text and (document := _json_document(out)) is not None:
        return document if len(document) < len(text) else text  # (coloured JSON)
    if (" \n" in out or out.endswith(" ")) and (
            "\x1b" in text or text.count("\r") > text.count("\r\n")):
        # Only in what a terminal drew (escape sequences, a line rewritten): its padding.
        # Elsewhere a trailing space can be the content (a file an agent edits by exact
        # match, a diff's whitespace change); a trailing tab is an empty last column.
        out = "\n".join(line.rstrip(" ") for line in out.split("\n"))
    if out.count("\n") >= _MIN_RUN - 1 and _REPEATED_LINE_START not in out:
        # (a text already holding the note would read as if it had been collapsed)
        out = _collapse_runs(out)
    return out if len(out) < len(text) else text


def _kept_escape(match: re.Match[str]) -> str:
    return match.group(0) if match.group(1) else ""


def _as_shown(line: str) -> str:
    """A line a terminal rewrote after carriage returns, as last shown: the last text
    printed, when it covers every earlier one (a progress bar; a line ending in CR LF);
    else ``line`` as written, since part of an earlier text would still show."""
    printed = [part for part in line.split("\r") if part]
    if not printed:
        return ""
    last = printed[-1]
    return last if all(len(part) <= len(last) for part in printed) else line


def _json_document(text: str) -> str | None:
    """``text`` without indentation when it is one JSON array or object laid out over
    lines; ``text`` itself when it is one that orjson would not write back exactly (a
    duplicate key, a number past 64 bits, 1e5, an escape written another way, nesting
    past its limits); None when it is not a JSON document."""
    stripped = text.lstrip()
    if stripped[:1] not in ("{", "[") or ("\n" not in stripped and "\r" not in stripped):
        return None
    try:
        value = orjson.loads(stripped)
    except orjson.JSONDecodeError as error:
        return text if str(error).startswith("depth limit") else None
    if not isinstance(value, (dict, list)):
        return None
    try:
        compact = orjson.dumps(value).decode()
    except orjson.JSONEncodeError:  # nested deeper than orjson writes, say
        return text
    # Only whitespace may go: a float orjson writes differently (1e5 as 100000.0) or an
    # escape it spells another way keeps the document as it came.
    return compact if _without_layout(stripped) == compact else text


def _without_layout(text: str) -> str:
    """``text`` with the whitespace outside its JSON strings removed."""
    return "".join(_JSON_TOKENS.findall(text))


def _collapse_runs(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    changed = False
    while i < len(lines):
        line = lines[i]
        j = i + 1
        while j < len(lines) and lines[j] == line:
            j += 1
        run = j - i
        out.append(line)
        note = REPEATED_LINE.format(times=run - 1)
        if run >= _MIN_RUN and line.strip() and (run - 1) * (len(line) + 1) > len(note) + 1:
            out.append(note)
            changed = True
        else:
            out.extend(lines[i + 1:j])
        i = j
    return "\n".join(out) if changed else text


def _plain_text(content: Any) -> str | None:
    """The text of a tool result that is only text: a string, or one text part with nothing
    else on it but a cache breakpoint (a client moves those turn to turn: whether a result
    is a repeat must not depend on it); None for anything else."""
    if isinstance(content, str):
        return content
    if (isinstance(content, list) and len(content) == 1 and type(part := content[0]) is dict
            and part.keys() - {"cache_control"} == {"type", "text"}
            and part["type"] in _TEXT_PARTS
            and isinstance(text := part["text"], str)):
        return text
    return None


class ToolOutputCondenser:
    """Condenses chat histories, remembering each text it condensed (by identity: an
    agent's next turn carries the same string objects, so each text is condensed once)."""

    def __init__(self, max_chars: int = 4_000_000) -> None:
        self._max = max_chars  # the texts remembered, in characters (the least recent go)
        self._chars = 0
        self._texts: OrderedDict[int, tuple[str, str]] = OrderedDict()

    def text(self, text: str) -> str:
        """``condense_text(text)``, remembered."""
        # A remembered text is kept alive by the memo: its address is never another's.
        key = id(text)
        hit = self._texts.get(key)
        if hit is not None:
            self._texts.move_to_end(key)
            return hit[1]
        out = condense_text(text)
        self._texts[key] = (text, out)
        self._chars += len(text)
        while self._chars > self._max and len(self._texts) > 1:
            self._chars -= len(self._texts.popitem(last=False)[1][0])
        return out

    def condense(self, messages: list[Message]) -> Condensed:
        """The history with its tool results condensed (the same list when none changes)."""
        out: list[Message] | None = None
        earlier: dict[str, str] = {}  # a result's condensed text -> the call it answered
        answered: dict[str, int] = {}  # a call id -> the tool results so far that carry it
        outputs = referenced = before = after = 0
        indexes: list[int] = []
        for index, message in enumerate(messages):
            if type(message) is not dict or message.get("role") != "tool":
                continue
            content: Any = message.get("content")
            call_id = message.get("tool_call_id")
            if isinstance(call_id, str):
                answered[call_id] = answered.get(call_id, 0) + 1
            text = _plain_text(content)
            new_content: Any
            if text is not None:
                if len(text) < MIN_CHARS:
                    continue
                condensed = self.text(text)
                first = earlier.get(condensed)
                # (a call id two results above carry would not say which one is meant)
                if (first is not None and answered[first] == 1
                        and len(SAME_OUTPUT) + len(first) < len(condensed)):
                    new_text = new_content = SAME_OUTPUT.format(call_id=first)
                    if not isinstance(content, str) and "cache_control" in content[0]:
                        new_content = [{**content[0], "text": new_text}]  # (kept)
                    referenced += 1
                else:
                    if isinstance(call_id, str) and first is None:
                        earlier[condensed] = call_id
                    if condensed is text:
                        continue
                    new_text = condensed
                    new_content = (condensed if isinstance(content, str)
                                   else [{**content[0], "text": condensed}])
                old_chars, new_chars = len(text), len(new_text)
            elif isinstance(content, list):
                new_content, old_chars, new_chars = self._parts(content)
            else:
                continue
            if new_content is content:
                continue
            if out is None:
                out = list(messages)
            out[index] = {**message, "content": new_content}
            outputs += 1
            before += old_chars
            after += new_chars
            indexes.append(index)
        if out is None:
            return Condensed(messages)
        return Condensed(out, outputs, referenced, before, after, tuple(indexes))

    def _parts(self, parts: list[Any]) -> tuple[Any, int, int]:
        """Content parts with their long texts condensed (rule 2 only): the new list (or
        ``parts`` itself) and the characters of the texts changed, before and after."""
        out: list[Any] | None = None
        before = after = 0
        for n, part in enumerate(parts):
            if (type(part) is not dict or part.get("type") not in _TEXT_PARTS
                    or part.get("citations") is not None):  # (quoted as cited: as sent)
                continue
            text = part.get("text")
            if not isinstance(text, str) or len(text) < MIN_CHARS:
                continue
            condensed = self.text(text)
            if condensed is text:
                continue
            if out is None:
                out = list(parts)
            out[n] = {**part, "text": condensed}
            before += len(text)
            after += len(condensed)
        return (parts if out is None else out), before, after
