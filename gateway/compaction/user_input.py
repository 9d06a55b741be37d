"""Telling real user input from content injected into user-role messages (SPEC §4.2).

Agents put much more than what a person typed into user-role messages: reminders, shell
and command output, background-task notices, hook results, interruption markers, tool
results, and (after a compaction) the gateway's own summary, continuation and elision
messages. Compaction keeps only *real* user input.

Rules, decided here:

- Only ``role == "user"`` messages can be real.
- An *injected block* is an XML-ish element ``<tag ...>...</tag>`` (or ``<tag/>``) whose
  tag name is a known injection name or has an injection shape: ``*-reminder``,
  ``*-notification``, ``*-stdout`` / ``*-stderr``, anything with a ``hook`` word,
  ``background-*``, ``*-command-output``-like names, dynamic tool lists (see
  ``is_injected_tag``). Names compare case-insensitively with ``_`` == ``-``. Tags people
  write in prompts (``<context>``, ``<task>``, ``<example>``, HTML, ...) are not injected.
- Interruption / retry markers (a line that is only ``[Request interrupted by user...]``,
  ``[Retrying ...]`` and the like) are injected.
- ``tool_result`` content parts are injected; so are image-only messages (no typed text:
  clients relay tool screenshots that way).
- A message is real when something is left after removing all of that. The gateway's own
  summary message (it starts with the summary marker) is never real.
- Kept messages are *cleaned*: injected blocks, marker lines and ``tool_result`` parts are
  removed and the rest is kept verbatim (images next to typed text stay). Keeping the
  injected blocks would let, e.g., a 10k-token ``<system-reminder>`` carrying project
  instructions use up the 2,000-token HEAD that exists to keep the original task.
- Slash commands are real: typed ``/cmd`` text, and Claude-Code-style
  ``<command-name>/cmd</command-name><command-args>...`` messages (those tags are not
  injection tags); their ``<local-command-stdout>`` output is not.
- ``<bash-input>`` (a shell command run from the prompt) is treated as shell output, not as
  a request to the model.
- Retries: a user message identical to the previous user message with no assistant message
  in between is a resubmission and is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from gateway.projection.anomalies import Message

# The first sentence of the gateway's summary prefix (shape.SUMMARY_PREFIX starts with it);
# other agents' client-side compaction summaries use the same sentence.
SUMMARY_MARKER = (
    "This session is being continued from a previous conversation that ran out of context."
)

INJECTED_TAGS: frozenset[str] = frozenset(
    {
        "system-reminder",
        "system-message",
        "task-notification",
        "bash-notification",
        "background-task",
        "background-tasks",
        "bash-input",
        "bash-stdout",
        "bash-stderr",
        "local-command-stdout",
        "local-command-stderr",
        "local-command-caveat",
        "command-output",
        "command-stdout",
        "command-stderr",
        "shell-output",
        "tool-output",
        "tool-result",
        "tool-results",
        "function-results",
        "user-shell-command",
        "user-instructions",
        "environment-context",
        "environment-details",
        "turn-aborted",
        "retry",
        "tools-added",
        "tools-removed",
        "tools-changed",
        "tools-updated",
        "available-deferred-tools",
    }
)
_INJECTED_SUFFIXES = ("-reminder", "-notification", "-stdout", "-stderr", "-command-output")
_INJECTED_PREFIXES = ("background-",)

_TAG = r"[A-Za-z][\w.:-]*"
_OPEN_RE = re.compile(rf"<(?P<name>{_TAG})(?:\s[^<>]*)?/?>")
_STRAY_CLOSE_RE = re.compile(rf"</(?P<name>{_TAG})\s*>")
_MARKER_LINE_RE = re.compile(
    r"^[ \t]*\[(?:request interrupted[^\]\n]*|[^\]\n]{0,80}\b(?:retry|retrying|retried)\b"
    r"[^\]\n]{0,80})\][ \t]*$",
    re.IGNORECASE | re.MULTILINE,
)
_TEXT_PART_TYPES = ("text", "input_text")


def normalize_tag(name: str) -> str:
    """Lower-case, ``_`` -> ``-``: the form tag names are compared in."""
    return name.lower().replace("_", "-")


def is_injected_tag(name: str) -> bool:
    """True for tag names agents use to inject content (by known name or name shape)."""
    tag = normalize_tag(name)
    if tag in INJECTED_TAGS:
        return True
    if tag.endswith(_INJECTED_SUFFIXES) or tag.startswith(_INJECTED_PREFIXES):
        return True
    return "hook" in tag.split("-")


@lru_cache(maxsize=256)
def _close_re(name: str) -> re.Pattern[str]:
    return re.compile(rf"</{re.escape(name)}\s*>")


def remove_tagged_blocks(text: str, predicate: Callable[[str], bool]) -> str:
    """``text`` without the ``<tag ...>...</tag>`` / ``<tag/>`` blocks whose name matches.

    A block ends at the first matching closing tag (like a non-greedy match); an opening tag
    with no closing tag is left alone. Linear in practice: only matching opening tags look
    for a closing tag, and a name found unclosed once is not searched again. Returns
    ``text`` itself when nothing was removed.
    """
    pieces: list[str] = []
    kept_from = 0
    search_at = 0
    unclosed: set[str] = set()
    while (match := _OPEN_RE.search(text, search_at)) is not None:
        name = match.group("name")
        search_at = match.end()
        if not predicate(name):
            continue
        if match.group(0).endswith("/>"):
            end = match.end()
        elif name in unclosed:
            continue
        elif (close := _close_re(name).search(text, match.end())) is None:
            unclosed.add(name)
            continue
        else:
            end = close.end()
        pieces.append(text[kept_from : match.start()])
        kept_from = search_at = end
    if not pieces:
        return text
    pieces.append(text[kept_from:])
    return "".join(pieces)


def strip_injected_text(text: str) -> str:
    """``text`` without injected blocks, stray injected closing tags and marker lines.

    Returns ``text`` itself (same object) when nothing was removed; otherwise the remainder
    with surrounding whitespace trimmed.
    """
    out = remove_tagged_blocks(text, is_injected_tag)
    out = _STRAY_CLOSE_RE.sub(lambda m: "" if is_injected_tag(m.group("name")) else m.group(0), out)
    out = _MARKER_LINE_RE.sub("", out)
    if out == text:
        return text
    return out.strip()


def _is_summary_text(text: str) -> bool:
    return text.lstrip().startswith(SUMMARY_MARKER)


def _clean_part(part: Any) -> Any | None:
    """The part without injected content, the same object if unchanged, None if nothing left."""
    if isinstance(part, str):
        cleaned = strip_injected_text(part)
        return cleaned if cleaned.strip() else None
    if not isinstance(part, dict):
        return part
    kind = part.get("type")
    if kind == "tool_result":
        return None
    if kind in _TEXT_PART_TYPES:
        text = part.get("text")
        if not isinstance(text, str):
            return None
        cleaned = strip_injected_text(text)
        if not cleaned.strip():
            return None
        return part if cleaned is text else {**part, "text": cleaned}
    return part


def _has_text(content: Any) -> bool:
    if isinstance(content, str):
        return bool(content.strip())
    return any(
        isinstance(p, str) or (isinstance(p, dict) and p.get("type") in _TEXT_PART_TYPES)
        for p in content
    )


def clean_user_message(message: Message) -> Message | None:
    """The real-user part of ``message``, or None when it holds no real user input.

    Returns the same dict when nothing needed removing, else a new dict (never mutates).
    """
    if message.get("role") != "user":
        return None
    content = message.get("content")
    if isinstance(content, str):
        if _is_summary_text(content):
            return None
        cleaned = strip_injected_text(content)
        if not cleaned.strip():
            return None
        return message if cleaned is content else {**message, "content": cleaned}
    if not isinstance(content, list):
        return None
    first_text = next(
        (p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"), None
    )
    if isinstance(first_text, str) and _is_summary_text(first_text):
        return None
    parts = [c for c in (_clean_part(p) for p in content) if c is not None]
    if not parts or not _has_text(parts):
        return None
    if len(parts) == len(content) and all(a is b for a, b in zip(parts, content, strict=True)):
        return message
    return {**message, "content": parts}


def is_real_user_message(message: Message) -> bool:
    """True when ``message`` carries input a person typed (or a slash command they ran)."""
    return clean_user_message(message) is not None


def real_user_messages(messages: Sequence[Message]) -> list[Message]:
    """The real user messages of a history, in order, cleaned, with retries removed."""
    kept: list[Message] = []
    previous_content: Any = None
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            previous_content = None
            continue
        cleaned = clean_user_message(message)
        if cleaned is None:
            continue
        if previous_content is not None and cleaned.get("content") == previous_content:
            continue  # resubmitted without an answer in between: a retry
        previous_content = cleaned.get("content")
        kept.append(cleaned)
    return kept
