"""The compacted shape (SPEC §4.2, §4.3): the one builder used wherever compaction applies.

Messages, in order:

1. system / developer messages, unchanged;
2. the kept real user messages (HEAD, then the elision note when some were left out, then
   TAIL; see ``kept.select_kept_user_messages``);
3. one user-role summary message: ``SUMMARY_PREFIX``, a blank line, the summary text, the
   carried ``## TODO List`` (when one was found), and the ``## Context Recovery`` section;
4. one user-role continuation reminder, ``CONTINUATION_TEXT``.

Order inside the summary (decided): summary text, then the TODO list, then Context
Recovery. Both SPEC sentences hold: the TODO list is carried after everything the
summarizer wrote, and the Context Recovery section is the last thing in the summary.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

from gateway.compaction.user_input import SUMMARY_MARKER
from gateway.projection.anomalies import Message

SUMMARY_PREFIX = (
    f"{SUMMARY_MARKER} The summary below covers the earlier portion of the conversation."
)
CONTINUATION_SENTENCE = (
    "Context compaction is complete — continue the work that was in progress when it began."
)
CONTINUATION_TEXT = f"<system-reminder>{CONTINUATION_SENTENCE}</system-reminder>"
ELISION_NOTE_TEMPLATE = (
    "<system-reminder>About {tokens} tokens of earlier user messages were left out here to "
    "keep the compacted context small; the summary below covers them.</system-reminder>"
)
ARCHIVE_ENDPOINT = "/v1/gateway/sessions/{session_id}/archive"
RECOVERY_HEADING = "## Context Recovery"
RECOVERY_OPENING = ("Everything before this note is still on disk in this agent's event log "
                    "(read-only, append-only):")

_TODO_RE = re.compile(r"^##[ \t]+TODO[ \t]+List\b[^\n]*$", re.IGNORECASE | re.MULTILINE)
_NEXT_HEADING_RE = re.compile(r"^#{1,2}[ \t]+\S", re.MULTILINE)


def approximate_tokens(tokens: int) -> str:
    """A rounded, human figure for a token count: ``12,300``; ``40`` below 1,000."""
    if tokens >= 1000:
        return f"{round(tokens, -2):,}"
    return f"{max(10, round(tokens, -1)):,}"


def elision_note(elided_tokens: int) -> Message:
    """The ``<system-reminder>`` user message placed between HEAD and TAIL."""
    return {
        "role": "user",
        "content": ELISION_NOTE_TEMPLATE.format(tokens=approximate_tokens(elided_tokens)),
    }


def continuation_message() -> Message:
    """The user-role continuation reminder that ends every compacted history."""
    return {"role": "user", "content": CONTINUATION_TEXT}


@dataclass(frozen=True, slots=True)
class KeptUsers:
    """The real user messages kept by compaction.

    ``head`` and ``tail`` are the kept messages (a message straddling a budget boundary
    appears truncated); ``elided_tokens`` is about how many tokens were left out between
    them (0 when everything was kept, and then ``tail`` is empty).
    """

    head: tuple[Message, ...]
    tail: tuple[Message, ...] = field(default=())
    elided_tokens: int = 0

    @property
    def messages(self) -> list[Message]:
        """HEAD, the elision note when something was left out, then TAIL."""
        middle = [elision_note(self.elided_tokens)] if self.elided_tokens > 0 else []
        return [*self.head, *middle, *self.tail]


@dataclass(frozen=True, slots=True)
class ArchiveRef:
    """Where the pre-compaction messages of a session are archived (SPEC §4.3).

    ``from_line`` / ``to_line`` are the archive's own line numbers of this compaction
    window, passed through as given; ``earlier`` are the ranges of the session's earlier
    compaction windows, oldest first. ``endpoint_path`` may contain ``{session_id}``.
    """

    session_id: str
    from_line: int
    to_line: int
    endpoint_path: str = ARCHIVE_ENDPOINT
    recall_tool: str | None = None  # the gateway's recall tool, when the model gets it
    earlier: tuple[tuple[int, int], ...] = ()

    @property
    def ranges(self) -> tuple[tuple[int, int], ...]:
        """One line range per compaction window, oldest first."""
        return (*self.earlier, (self.from_line, self.to_line))


def context_recovery_section(
    session_id: str,
    from_line: int | Sequence[tuple[int, int]],
    to_line: int | None = None,
    endpoint_path: str = ARCHIVE_ENDPOINT,
    recall_tool: str | None = None,
) -> str:
    """The ``## Context Recovery`` section that ends a summary (SPEC §4.3).

    It opens with the seed sentence, then lists one line range per compaction window
    (``from_line`` may be the list of ``(from, to)`` ranges, oldest first) with the request
    that reads it. With ``recall_tool`` it tells the model to read the archive with that tool.
    """
    if isinstance(from_line, int):
        ranges: list[tuple[int, int]] = [(from_line, to_line if to_line is not None else from_line)]
    else:
        ranges = [(a, b) for a, b in from_line if b >= a]
    path = endpoint_path.format(session_id=quote(session_id, safe=""))
    lines = [
        f"- compaction {n}: archive lines {first} to {last} (inclusive): "
        f"GET {path}?from={first}&to={last}"
        for n, (first, last) in enumerate(ranges, 1)
    ]
    tool = "" if recall_tool is None else (
        f"Call the `{recall_tool}` tool to read them whenever this summary lacks a detail "
        "you need (exact values, code, earlier tool output): search with `query` (plain "
        "text, or a regular expression with `regex: true`) and/or read lines `from_line` to "
        "`to_line`. ")
    return (
        f"{RECOVERY_HEADING}\n\n"
        f"{RECOVERY_OPENING} the archive of session `{session_id}`, one line range per "
        "compaction window, one message per line. This summary loses detail; "
        f"{tool}To read the messages of a window exactly as they were sent over HTTP "
        "(read-only), request its range (at most 1000 lines per request):\n\n"
        + "\n".join(lines)
    )


def find_todo_list(messages: Sequence[Message]) -> str | None:
    """The last ``## TODO List`` section in the user/assistant text of a history, or None.

    The section runs from its heading to the next ``#`` or ``##`` heading, or to the end of
    that text; it is returned with its heading, trailing whitespace trimmed.
    """
    for message in reversed(messages):
        if message.get("role") not in ("user", "assistant"):
            continue
        for text in reversed(_texts(message)):
            matches = list(_TODO_RE.finditer(text))
            if not matches:
                continue
            start = matches[-1].start()
            body_start = matches[-1].end()
            following = _NEXT_HEADING_RE.search(text, body_start)
            end = following.start() if following else len(text)
            section = text[start:end].rstrip()
            if section[matches[-1].end() - start :].strip():
                return section
    return None


def _texts(message: Message) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
    return []


def build_summary_content(
    summary_text: str, *, todo_list: str | None = None, recovery: str | None = None
) -> str:
    """Prefix + summary + carried TODO list + Context Recovery, blank-line separated.

    The TODO list is not repeated when the summary text already contains it verbatim.
    """
    sections = [SUMMARY_PREFIX, summary_text.strip()]
    if todo_list and todo_list.strip() not in summary_text:
        sections.append(todo_list.strip())
    if recovery:
        sections.append(recovery.strip())
    return "\n\n".join(s for s in sections if s)


def build_compacted_messages(
    system_messages: Sequence[Message],
    kept: KeptUsers | Sequence[Message],
    summary_text: str,
    *,
    todo_list: str | None = None,
    recovery: str | None = None,
) -> list[Message]:
    """The compacted history (SPEC §4.2): system, kept users, summary, continuation.

    ``kept`` is a ``KeptUsers`` (the elision note is placed between its head and tail) or an
    already final list of kept user messages. Input dicts are shared, never modified.
    """
    kept_messages = kept.messages if isinstance(kept, KeptUsers) else list(kept)
    summary = {
        "role": "user",
        "content": build_summary_content(summary_text, todo_list=todo_list, recovery=recovery),
    }
    return [*system_messages, *kept_messages, summary, continuation_message()]
