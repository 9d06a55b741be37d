"""Context compaction (SPEC §4): token accounting, when to compact, the compacted shape,
real-user-input detection, the summary request and the summarizer driver. These are pure
(``summarize`` awaits an injected call; ``tokens`` reads tiktoken's files once). The I/O side,
``service`` (stores, locks, archive), is imported on its own by the flow driver."""

from gateway.compaction.budget import (
    DEFAULT_SETTINGS,
    BudgetLevel,
    CompactionSettings,
    Decision,
    budget_level,
    decide,
    effective_reserve,
    usage_ratio,
)
from gateway.compaction.kept import (
    HEAD_TOKENS,
    LIMIT_TOKENS,
    TAIL_TOKENS,
    TRUNCATION_MARK,
    select_kept_user_messages,
)
from gateway.compaction.pipeline import CompactionResult, compact
from gateway.compaction.shape import (
    ARCHIVE_ENDPOINT,
    CONTINUATION_SENTENCE,
    CONTINUATION_TEXT,
    ELISION_NOTE_TEMPLATE,
    SUMMARY_PREFIX,
    ArchiveRef,
    KeptUsers,
    build_compacted_messages,
    build_summary_content,
    context_recovery_section,
    elision_note,
    find_todo_list,
)
from gateway.compaction.summarizer import (
    SummaryAttempt,
    SummaryCallFailed,
    SummaryOutcome,
    SummaryReply,
    summarize,
)
from gateway.compaction.summary_request import (
    build_summary_request,
    render_transcript,
    strip_dynamic_tool_context,
)
from gateway.compaction.tokens import (
    count_message_tokens,
    token_counter,
)
from gateway.compaction.user_input import (
    SUMMARY_MARKER,
    clean_user_message,
    is_injected_tag,
    is_real_user_message,
    real_user_messages,
)

__all__ = [
    "ARCHIVE_ENDPOINT",
    "CONTINUATION_SENTENCE",
    "CONTINUATION_TEXT",
    "DEFAULT_SETTINGS",
    "ELISION_NOTE_TEMPLATE",
    "HEAD_TOKENS",
    "LIMIT_TOKENS",
    "SUMMARY_MARKER",
    "SUMMARY_PREFIX",
    "TAIL_TOKENS",
    "TRUNCATION_MARK",
    "ArchiveRef",
    "BudgetLevel",
    "CompactionResult",
    "CompactionSettings",
    "Decision",
    "KeptUsers",
    "SummaryAttempt",
    "SummaryCallFailed",
    "SummaryOutcome",
    "SummaryReply",
    "budget_level",
    "build_compacted_messages",
    "build_summary_content",
    "build_summary_request",
    "clean_user_message",
    "compact",
    "context_recovery_section",
    "count_message_tokens",
    "decide",
    "effective_reserve",
    "elision_note",
    "find_todo_list",
    "is_injected_tag",
    "is_real_user_message",
    "real_user_messages",
    "render_transcript",
    "select_kept_user_messages",
    "strip_dynamic_tool_context",
    "summarize",
    "token_counter",
    "usage_ratio",
]
