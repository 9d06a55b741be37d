"""The mechanical safety net (SPEC §5 window trimming): fit a history without a summary.

Used when summarizing fails or cannot fit the window. Oldest messages go first; a tool call
and its results are one unit and go together; system / developer messages, the first user
message (the task) and the last assistant conclusion before the current turn (pinned)
stay; one user-role placeholder says how many earlier messages were omitted. Pure:
counting is injected.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gateway.projection.anomalies import Message

CountTokens = Callable[[Sequence[Message]], int]

TRIM_NOTE_TEMPLATE = (
    "<system-reminder>{count} earlier messages of this conversation were omitted here to "
    "fit the model's context window.{where} Continue from the messages that "
    "follow.</system-reminder>"
)
_SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class Trimmed:
    """A trimmed history: what is sent, and what was left out (in order)."""

    messages: list[Message]
    omitted: list[Message] = field(default_factory=list)
    tokens_before: int = 0
    tokens_after: int = 0


def trim_note(count: int, where: str = "") -> Message:
    """The placeholder standing for ``count`` omitted messages (``where``: how to read
    them, e.g. the archive lines)."""
    return {"role": "user", "content": TRIM_NOTE_TEMPLATE.format(
        count=count, where=f" {where.strip()}" if where.strip() else "")}


def units(messages: Sequence[Message]) -> list[list[int]]:
    """Indexes of the non-system messages grouped in units: an assistant message with its
    tool results (and any tool message following it) is one unit; every other message is
    one."""
    out: list[list[int]] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role in _SYSTEM_ROLES:
            continue
        if role == "tool" and out:
            out[-1].append(index)
        else:
            out.append([index])
    return out


def trim_to_fit(
    messages: Sequence[Message], budget: int, count_tokens: CountTokens, *, where: str = "",
) -> Trimmed | None:
    """Drop the oldest units until the history fits ``budget`` tokens; None when it fits
    already (nothing to do).

    The system messages come first (in their order), then the kept units in their order,
    with the placeholder where the omitted ones were. When even the pinned messages and the
    last unit exceed the budget, that minimum is returned: the caller decides.
    """
    before = count_tokens(messages)
    if before <= budget:
        return None
    system = [m for m in messages if m.get("role") in _SYSTEM_ROLES]
    groups = units(messages)
    if len(groups) <= 1:
        return None
    sizes = [count_tokens([messages[i] for i in group]) for group in groups]
    pinned = _pinned(messages, groups)
    dropped: set[int] = set()
    note_size = count_tokens([trim_note(10_000, where)])
    total = count_tokens(system) + sum(sizes) + note_size
    for unit in range(len(groups) - 1):  # the last unit is the current turn: always kept
        if total <= budget:
            break
        if unit in pinned:
            continue
        dropped.add(unit)
        total -= sizes[unit]
    if not dropped:
        return None
    omitted = [messages[i] for unit in sorted(dropped) for i in groups[unit]]
    out: list[Message] = list(system)
    placed = False
    for unit, group in enumerate(groups):
        if unit in dropped:
            if not placed:
                out.append(trim_note(len(omitted), where))
                placed = True
            continue
        out.extend(messages[i] for i in group)
    return Trimmed(out, omitted, before, count_tokens(out))


def _pinned(messages: Sequence[Message], groups: list[list[int]]) -> set[int]:
    """The units that stay: the first user message and the last assistant conclusion (an
    assistant message without tool calls) before the current turn (the last user message);
    without any user message after it, the last conclusion of all."""
    pinned: set[int] = set()
    for unit, group in enumerate(groups):
        if messages[group[0]].get("role") == "user":
            pinned.add(unit)
            break
    current = next((unit for unit in range(len(groups) - 1, -1, -1)
                    if messages[groups[unit][0]].get("role") == "user"), len(groups))
    for unit in range(current - 1, -1, -1):
        first = messages[groups[unit][0]]
        if first.get("role") == "assistant" and not first.get("tool_calls"):
            pinned.add(unit)
            break
    return pinned
