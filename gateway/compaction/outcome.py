"""What the compaction service hands back to the driver: values, never side channels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from gateway.projection.anomalies import Message

if TYPE_CHECKING:
    from gateway.sessions import CompactionRecord

# ``output_lowered``: the client's output budget alone overflowed the window, and was
# lowered to what the window leaves beside the prompt (the history goes as it was).
CompactionHow = Literal["summarized", "reused", "background-applied", "trimmed", "reduced",
                        "output_lowered"]


@dataclass(frozen=True, slots=True)
class PreparedHistory:
    """The history to send. Its first ``frozen`` messages are a stored compaction that is
    sent byte-for-byte as stored (the default projection leaves it alone)."""

    messages: list[Message]
    frozen: int = 0


@dataclass(frozen=True, slots=True)
class CompactionOutcome:
    """What compaction did for a request: applied (``how``, tokens before and after) or,
    with ``failed``, why a compaction that was needed could not be made. ``seconds`` is the
    time spent producing a new one (summary calls and shaping; None when none was tried).
    ``summary_failed`` says why no summary was made when the trimming safety net
    (``trimmed``) stood in. ``unstored``: made (or reused) in memory while the session store
    was down; it is written to the store when the store returns."""

    how: CompactionHow | None = None
    tokens_before: int = 0
    tokens_after: int = 0
    failed: str | None = None
    seconds: float | None = None
    summary_failed: str | None = None
    unstored: bool = False


@dataclass(frozen=True, slots=True)
class Prepared:
    """The history to send before the first attempt, and what it took.

    ``level`` is the context budget level; ``too_big`` (tokens, window) says the history
    does not fit the model's window and could not be compacted: it must not be sent.
    """

    history: PreparedHistory
    level: str | None = None
    outcome: CompactionOutcome | None = None
    too_big: tuple[int, int] | None = None
    ratio: float | None = None  # the usage ratio the level was read from


@dataclass(frozen=True, slots=True)
class Compacted:
    """The result of an overflow compaction: the new history, or None with ``outcome.failed``
    saying why."""

    history: PreparedHistory | None
    outcome: CompactionOutcome


def outcome_of(how: CompactionHow, record: CompactionRecord, seconds: float | None = None, *,
               unstored: bool = False) -> CompactionOutcome:
    """The outcome of a request served with the compaction ``record`` (``how``)."""
    return CompactionOutcome(how, record.tokens_before, record.tokens_after, seconds=seconds,
                             unstored=unstored)
