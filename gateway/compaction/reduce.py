"""The cheap reductions, tried before any message is dropped or summarized (SPEC §5).

* Superseded results: a tool result followed later by a call of the same tool with the same
  arguments (the same file read again) is replaced by a one-line note; the latest result
  stays verbatim.
* Folded results: an old, long tool result (outside the most recent ``recent_tokens``) is
  replaced by a short card: the tool, its arguments, the size and the first lines.

The full text of both stays in the session archive (the caller archives the history as the
client sent it), which the recall tool reads. Pure: counting and the archive location of a
message (``where``) are injected; messages that change are copied, the others shared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import orjson

from gateway.projection.anomalies import Message

CountTokens = Callable[[Sequence[Message]], int]
Where = Callable[[int], str]

SUPERSEDED_PREFIX = "[superseded result]"
FOLDED_PREFIX = "[folded result]"
CARD_LINES = 5  # first lines a folded card shows
_CARD_LINE_CHARS = 160
_ARGS_CHARS = 200


@dataclass(frozen=True, slots=True)
class Reduced:
    """The reduced history and how many results were replaced by notes or cards."""

    messages: list[Message]
    superseded: int = 0
    folded: int = 0

    @property
    def changed(self) -> bool:
        """True when any result was replaced."""
        return bool(self.superseded or self.folded)


def _text(content: object) -> str | None:
    """A tool result's text (a string, or text parts only); None for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content):
        return "".join(p["text"] for p in content)
    return None


def _arguments(raw: object) -> str:
    """The call's arguments in a canonical form (sorted keys), for comparing calls."""
    if not isinstance(raw, str):
        return orjson.dumps(raw, option=orjson.OPT_SORT_KEYS).decode() if raw else "{}"
    try:
        return orjson.dumps(orjson.loads(raw), option=orjson.OPT_SORT_KEYS).decode()
    except orjson.JSONDecodeError:
        return raw.strip()


def tool_calls_by_id(messages: Sequence[Message]) -> dict[str, tuple[str, str]]:
    """``tool_call_id -> (tool name, canonical arguments)`` of every assistant tool call."""
    out: dict[str, tuple[str, str]] = {}
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                continue
            fn = call.get("function")
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                out[call["id"]] = (fn["name"], _arguments(fn.get("arguments")))
    return out


def _shown(args: str) -> str:
    return args if len(args) <= _ARGS_CHARS else args[:_ARGS_CHARS] + "…"


def superseded_note(tool: str, args: str, chars: int, where: str) -> str:
    """The one line standing for a result a later identical call superseded."""
    place = f" ({where})" if where else ""
    return (f"{SUPERSEDED_PREFIX} {tool}({_shown(args)}) was called again later: see the "
            f"latest result. This earlier one ({chars} characters) is in the session "
            f"archive{place}.")


def folded_card(tool: str, args: str, text: str, where: str) -> str:
    """The short card standing for an old, long result."""
    lines = text.splitlines()
    head = "\n".join(line[:_CARD_LINE_CHARS] for line in lines[:CARD_LINES])
    place = f" ({where})" if where else ""
    return (f"{FOLDED_PREFIX} {tool}({_shown(args)}) returned {len(text)} characters in "
            f"{len(lines)} lines; the first {min(CARD_LINES, len(lines))}:\n{head}\n"
            f"[The full result is kept in the session archive{place}.]")


def _replaced(message: Message, content: str) -> Message:
    out = dict(message)
    out["content"] = content
    return out


def reduce_superseded(messages: Sequence[Message], where: Where) -> Reduced:
    """Replace every tool result that a later call with the same tool and arguments
    superseded by a one-line note (the latest result of each call stays)."""
    calls = tool_calls_by_id(messages)
    seen: set[tuple[str, str]] = set()
    out = list(messages)
    count = 0
    for index in range(len(out) - 1, -1, -1):
        message = out[index]
        if message.get("role") != "tool":
            continue
        call = calls.get(str(message.get("tool_call_id")))
        if call is None:
            continue
        if call not in seen:
            seen.add(call)
            continue
        text = _text(message.get("content"))
        if text is None or text.startswith(SUPERSEDED_PREFIX):
            continue
        note = superseded_note(call[0], call[1], len(text), where(index))
        if len(note) < len(text):
            out[index] = _replaced(message, note)
            count += 1
    return Reduced(out, superseded=count)


def fold_old_results(messages: Sequence[Message], count_tokens: CountTokens, where: Where, *,
                     recent_tokens: int, min_tokens: int) -> Reduced:
    """Fold the tool results longer than ``min_tokens`` that lie before the most recent
    ``recent_tokens`` of the history into short cards. The current turn (from the last user
    message on) is never folded: the model is working with it."""
    calls = tool_calls_by_id(messages)
    out = list(messages)
    used = 0
    count = 0
    current = next((i for i in range(len(out) - 1, -1, -1) if out[i].get("role") == "user"),
                   len(out))
    for index in range(current - 1, -1, -1):
        message = out[index]
        size = count_tokens([message])
        used += size
        if index == current - 1:
            used += count_tokens(out[current:])
        if used <= recent_tokens or message.get("role") != "tool" or size <= min_tokens:
            continue
        call = calls.get(str(message.get("tool_call_id")))
        text = _text(message.get("content"))
        if call is None or text is None or text.startswith((FOLDED_PREFIX, SUPERSEDED_PREFIX)):
            continue
        out[index] = _replaced(message, folded_card(call[0], call[1], text, where(index)))
        count += 1
    return Reduced(out, folded=count)


def reduce_history(messages: Sequence[Message], count_tokens: CountTokens, target: int, *,
                   recent_tokens: int, min_tokens: int,
                   where: Where = lambda index: "") -> Reduced:
    """Superseded results first; then, when the history still exceeds ``target`` tokens,
    old long results folded. ``where(i)`` says where message ``i``'s full text is archived."""
    first = reduce_superseded(messages, where)
    if count_tokens(first.messages) <= target:
        return first
    folded = fold_old_results(first.messages, count_tokens, where,
                              recent_tokens=recent_tokens, min_tokens=min_tokens)
    return Reduced(folded.messages, first.superseded, folded.folded)
