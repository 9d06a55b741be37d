"""The recall tool: a function tool the gateway offers on requests that carry a
compaction, and answers itself from the session's archive. Pure: the tool's schema and
name, argument validation, rendering archived messages as numbered text lines, range
selection, plain-text and regex search, redaction and the size bound of a result.

The archive holds the client's own pre-compaction messages (line ``k`` is the ``k``-th
message archived for the session). A recall reads only the line ranges of the compactions
the request carries, so it never shows more than that request's own history.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import orjson
import regex

from gateway.redact import mask

if TYPE_CHECKING:
    pass

MAX_QUERY: Final = 200  # characters of a search query or pattern
MAX_RANGE_LINES: Final = 200  # lines one range read returns at most
MAX_SCAN_LINES: Final = 20_000  # archive lines one search looks at (the most recent ones)
SEARCH_SECONDS: Final = 0.25  # wall time all regex matching of one search may take
SNIPPET: Final = 300  # characters shown on each side of a search hit
MAX_HITS: Final = 50


# -- the tool ---------------------------------------------------------------------------


def client_tool_names(body: Mapping[str, Any]) -> set[str]:
    """The function names the client's own ``tools`` declare."""
    names: set[str] = set()
    tools = body.get("tools")
    if isinstance(tools, list):
        for tool in tools:
            fn = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                names.add(fn["name"])
    return names


def pick_tool_name(wanted: str, taken: set[str]) -> str:
    """``wanted``, or ``wanted_gw``, ``wanted_gw2``... when a client tool has that name."""
    if wanted not in taken:
        return wanted
    n = 1
    while True:
        name = f"{wanted}_gw" + (str(n) if n > 1 else "")
        if name not in taken:
            return name
        n += 1


def offers_recall(body: Mapping[str, Any]) -> bool:
    """Whether a request may be offered the tool: not with legacy ``functions``, not when the
    client turned tools off or forces one of its own, not with several choices (``n``)."""
    if "functions" in body or body.get("n") not in (None, 1):
        return False
    choice = body.get("tool_choice")
    return choice is None or choice in ("auto", "required")


def tool_schema(name: str, configured: str) -> dict[str, Any]:
    """The function tool the model sees (stable bytes: the prompt cache keeps hitting)."""
    alias = "" if name == configured else (
        f" (This is the `{configured}` tool named in the Context Recovery note.)")
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": (
                "Read the earlier part of this conversation that a context compaction "
                "replaced with a summary. The messages are kept verbatim in a read-only "
                "archive, one message per numbered line. Search it with `query` (plain text, "
                "case-insensitive; set `regex` to true for a regular expression) and/or read "
                "lines `from_line`..`to_line`. Use it when the summary lacks a detail you "
                "need (exact values, code, earlier tool output)." + alias),
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description":
                              f"Text to search for (at most {MAX_QUERY} characters)."},
                    "regex": {"type": "boolean", "description":
                              "Treat query as a regular expression (default false)."},
                    "from_line": {"type": "integer", "minimum": 1,
                                  "description": "First archive line to read or search."},
                    "to_line": {"type": "integer", "minimum": 1,
                                "description": "Last archive line to read or search."},
                },
                "additionalProperties": False,
            },
        },
    }


def with_tool(body: dict[str, Any], tool: dict[str, Any]) -> dict[str, Any]:
    """``body`` with the recall tool appended to its ``tools`` (the client's stay first)."""
    tools = body.get("tools")
    out = dict(body)
    out["tools"] = [*tools, tool] if isinstance(tools, list) else [tool]
    return out


# -- arguments --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecallArgs:
    """Validated arguments: a line range (clamped later), an optional query."""

    first: int
    last: int
    query: str | None = None
    is_regex: bool = False


def parse_args(arguments: str, last_line: int) -> RecallArgs | str:
    """The validated arguments of one call, or the message telling the model what is wrong."""
    try:
        data = orjson.loads(arguments or "{}")
    except orjson.JSONDecodeError:
        return "The arguments are not a JSON object."
    if not isinstance(data, dict):
        return "The arguments must be a JSON object."
    unknown = set(data) - {"query", "regex", "from_line", "to_line"}
    if unknown:
        return f"Unknown argument(s): {', '.join(sorted(unknown))}."
    query = data.get("query")
    if query is not None and not isinstance(query, str):
        return "`query` must be a string."
    query = query.strip() if query else None
    if query and len(query) > MAX_QUERY:
        return f"`query` is longer than {MAX_QUERY} characters."
    is_regex = data.get("regex", False)
    if not isinstance(is_regex, bool):
        return "`regex` must be true or false."
    bounds: list[int] = []
    for key, default in (("from_line", 1), ("to_line", last_line)):
        value = data.get(key, default)
        if value is None:
            value = default
        if isinstance(value, bool) or not isinstance(value, int):
            return f"`{key}` must be an integer line number."
        bounds.append(value)
    first, last = max(1, bounds[0]), min(last_line, bounds[1])
    if first > last:
        return f"The archive has lines 1 to {last_line}; the range asked for is empty."
    if query is None and last - first + 1 > MAX_RANGE_LINES:
        last = first + MAX_RANGE_LINES - 1
    if is_regex and query:
        try:
            regex.compile(query)
        except regex.error as exc:
            return f"`query` is not a valid regular expression: {exc}."
    return RecallArgs(first, last, query, is_regex and bool(query))


# -- rendering and search --------------------------------------------------------------


def message_text(message: Mapping[str, Any]) -> str:
    """One archived message as one text: role, text content, tool calls, tool results."""
    role = str(message.get("role", "?"))
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict):
                kind = part.get("type")
                text = part.get("text")
                parts.append(text if isinstance(text, str) else f"[{kind} part]")
    for call in message.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            parts.append(f"[calls {fn.get('name')}({fn.get('arguments', '')}) "
                         f"id={call.get('id')}]")
    label = role
    if role == "tool" and message.get("tool_call_id"):
        label = f"tool result for {message.get('tool_call_id')}"
    return f"{label}: " + "\n".join(p for p in parts if p)




@dataclass(frozen=True, slots=True)
class Line:
    """One archive line, rendered and redacted."""

    number: int
    text: str


def render_lines(numbered: Iterable[tuple[int, Mapping[str, Any]]],
                 secrets: Sequence[str]) -> list[Line]:
    """Archived messages as redacted text lines (searching never sees a secret)."""
    return [Line(n, mask(message_text(m), secrets)) for n, m in numbered]


Ranges = Sequence[tuple[int, int]]


def _head(session_id: str, ranges: Ranges) -> str:
    shown = ", ".join(f"{a} to {b}" for a, b in ranges) or "none"
    return (f"Archive of session `{session_id}` (read-only, one message per line; lines of "
            f"this conversation: {shown}).")


def render_range(lines: Sequence[Line], args: RecallArgs, session_id: str, ranges: Ranges,
                 max_chars: int) -> str:
    """Lines of a range read, cut to ``max_chars`` with a note saying where to go on."""
    last_line = ranges[-1][1] if ranges else 0
    out = [_head(session_id, ranges)]
    used = len(out[0])
    for line in lines:
        entry = f"[{line.number}] {line.text}"
        room = max_chars - used - 100  # the closing note fits too
        if len(entry) > room:
            if room > 200:
                out.append(entry[:room - 80] + f" ... [cut: {len(entry) - room + 80} more "
                           "characters]")
            out.append(f"(Result size limit reached: continue from line {line.number} "
                       "with from_line.)")
            break
        out.append(entry)
        used += len(entry) + 1
    else:
        if args.last < last_line and not args.query:
            out.append(f"(Lines {args.first} to {args.last} shown; the archive goes on to "
                       f"line {last_line}.)")
    if len(out) == 1:
        out.append("(No lines in this range.)")
    return "\n".join(out)


class Matcher:
    """Plain-text (case-insensitive) or regex matching with a wall-time budget.

    Regular expressions run on the ``regex`` engine with a timeout, so a catastrophic
    pattern costs at most ``SEARCH_SECONDS`` in all, never a stuck worker.
    """

    def __init__(self, query: str, is_regex: bool, budget: float = SEARCH_SECONDS) -> None:
        self.plain = None if is_regex else query.casefold()
        self.pattern = regex.compile(query, regex.IGNORECASE) if is_regex else None
        self.budget = budget
        self.exhausted = False

    def find(self, text: str) -> tuple[int, int] | None:
        """The span of the first match in ``text``, or None."""
        if self.plain is not None:
            at = text.casefold().find(self.plain)
            return None if at < 0 else (at, at + len(self.plain))
        assert self.pattern is not None
        if self.budget <= 0:
            self.exhausted = True
            return None
        started = time.monotonic()
        try:
            match = self.pattern.search(text, timeout=self.budget)
        except TimeoutError:
            self.exhausted = True
            match = None
        self.budget -= time.monotonic() - started
        return None if match is None else match.span()


def render_search(lines: Sequence[Line], args: RecallArgs, session_id: str, ranges: Ranges,
                  max_chars: int) -> str:
    """The lines matching ``args.query``, each with the text around its first match."""
    assert args.query is not None
    matcher = Matcher(args.query, args.is_regex)
    hits: list[str] = []
    total = 0
    used = 0
    full = False
    for line in lines:
        span = matcher.find(line.text)
        if matcher.exhausted:
            break
        if span is None:
            continue
        total += 1
        if full or len(hits) >= MAX_HITS:
            full = True
            continue
        start, end = max(0, span[0] - SNIPPET), min(len(line.text), span[1] + SNIPPET)
        snippet = ("..." if start else "") + line.text[start:end] + (
            "..." if end < len(line.text) else "")
        entry = f"[{line.number}] {snippet}"
        if used + len(entry) > max_chars - 400:
            full = True
            continue
        hits.append(entry)
        used += len(entry) + 1
    kind = "pattern" if args.is_regex else "text"
    out = [_head(session_id, ranges),
           f"Search for {kind} {args.query!r} in lines {lines[0].number if lines else args.first}"
           f" to {args.last}: {total} matching line(s)."]
    if lines and lines[0].number > args.first:
        out.append(f"(Only the last {len(lines)} lines were searched; use from_line/to_line "
                   "to search earlier ones.)")
    out.extend(hits)
    if full:
        out.append(f"(Showing {len(hits)} of {total}: narrow the query, or read a line range "
                   "to see whole messages.)")
    if matcher.exhausted:
        out.append("(The regular expression took too long and the search stopped early; "
                   "use a simpler pattern or plain text.)")
    elif hits:
        out.append("(Read a hit's whole message with from_line/to_line.)")
    return "\n".join(out)


def scan_bounds(args: RecallArgs) -> tuple[int, int]:
    """The archive lines a call reads: its range, a search limited to the most recent
    ``MAX_SCAN_LINES`` of it."""
    if args.query is None:
        return args.first, args.last
    return max(args.first, args.last - MAX_SCAN_LINES + 1), args.last


def answer_call(lines: Sequence[Line], args: RecallArgs, session_id: str, ranges: Ranges,
                max_chars: int) -> str:
    """The tool result of one validated call over the lines of ``scan_bounds(args)``."""
    first, last = scan_bounds(args)
    lines = [line for line in lines if first <= line.number <= last]
    if args.query is None:
        return render_range(lines, args, session_id, ranges, max_chars)
    return render_search(lines, args, session_id, ranges, max_chars)
