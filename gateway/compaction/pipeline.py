"""``compact``: a history and a summary in, the compacted history out (SPEC §4.2, §4.3).

Every place that applies compaction (blocking, background, overflow recovery, replay)
goes through this function, so what the model saw and what a replay rebuilds from the same
history and summary text are identical.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gateway.compaction.kept import (
    HEAD_TOKENS,
    LIMIT_TOKENS,
    TAIL_TOKENS,
    select_kept_user_messages,
)
from gateway.compaction.shape import (
    ArchiveRef,
    build_compacted_messages,
    context_recovery_section,
    find_todo_list,
)
from gateway.projection.anomalies import Message

SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """The compacted history and what it cost and saved.

    ``kept_user_messages`` counts the kept real user messages (pieces of a truncated
    message count once each); ``elided_tokens`` is about how many tokens of real user
    input the HEAD / TAIL budget left out.
    """

    messages: list[Message]
    tokens_before: int
    tokens_after: int
    kept_user_messages: int
    elided_tokens: int
    todo_carried: bool


def compact(
    messages: Sequence[Message],
    summary_text: str,
    *,
    count_tokens: Callable[[Sequence[Message]], int],
    archive_ref: ArchiveRef | None = None,
    kept_budget: tuple[int, int, int] = (HEAD_TOKENS, TAIL_TOKENS, LIMIT_TOKENS),
) -> CompactionResult:
    """Build the compacted form of ``messages`` around ``summary_text``.

    System / developer messages are kept unchanged (moved to the front, in their order),
    then the kept real user messages, the summary (prefix, text, carried TODO list, Context
    Recovery when ``archive_ref`` is given) and the continuation reminder; a trailing
    assistant prefill stays last.
    ``kept_budget`` is the (HEAD, TAIL, limit) budget of kept user messages: the SPEC
    constants, or their share of a small window (``window.scaled_budgets``).
    """
    system = [m for m in messages if m.get("role") in SYSTEM_ROLES]
    head, tail, limit = kept_budget
    kept = select_kept_user_messages(messages, count_tokens, head=head, tail=tail, limit=limit)
    todo = find_todo_list(messages)
    recovery = (
        context_recovery_section(
            archive_ref.session_id, archive_ref.ranges, endpoint_path=archive_ref.endpoint_path,
            recall_tool=archive_ref.recall_tool,
        )
        if archive_ref is not None
        else None
    )
    out = build_compacted_messages(system, kept, summary_text, todo_list=todo, recovery=recovery)
    summary_content = out[-2]["content"]
    if messages and _is_prefill(messages[-1]):
        out.append(messages[-1])  # the answer continues the client's prefill, as asked
    return CompactionResult(
        messages=out,
        tokens_before=count_tokens(messages),
        tokens_after=count_tokens(out),
        kept_user_messages=len(kept.head) + len(kept.tail),
        elided_tokens=kept.elided_tokens,
        todo_carried=todo is not None and todo.strip() in summary_content,
    )


def _is_prefill(message: Message) -> bool:
    """A history's last message written by the client as the start of the answer (an
    assistant message with text and no tool calls): the compacted history ends with it."""
    content = message.get("content")
    return (message.get("role") == "assistant" and not message.get("tool_calls")
            and bool(content) and isinstance(content, (str, list)))
