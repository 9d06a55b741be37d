"""The summary-call driver and its failure handling (SPEC §4.4). I/O is injected.

| failure                        | what happens                                             |
| ------------------------------ | -------------------------------------------------------- |
| the summary request overflows  | keep only the most recent messages, shrinking to 70%,    |
| (verdict ``overflow`` or       | then 50%, then 35% of the history's tokens; a 4th        |
| ``too_large``)                 | overflow stops                                           |
| empty summary, or cut off      | drop the oldest message (and tool results left at the    |
| (``finish_reason == "length"``)| new head) and try again                                  |
| retryable (``transient``)      | back off (``gateway.backoff``: full jitter, Retry-After  |
|                                | honoured up to ``MAX_RETRY_AFTER``) and retry            |
| anything else (``fatal``, ...) | stop                                                     |

At most ``settings.max_attempts`` calls in all. Provider failures never raise: the outcome
says what happened. A cut never separates a tool call from its results: the kept part never
starts with tool results whose call was cut away.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from gateway.backoff import backoff_delay
from gateway.compaction.budget import DEFAULT_SETTINGS, CompactionSettings
from gateway.compaction.summary_request import (
    DEFAULT_INSTRUCTIONS,
    MAX_MESSAGE_CHARS,
    build_summary_request,
    strip_dynamic_tool_context,
)
from gateway.projection import project
from gateway.projection.anomalies import Message
from gateway.providers.base import UpstreamError
from gateway.providers.failure import UpstreamFailure

OVERFLOW = "overflow"
TOO_LARGE = "too_large"
TRANSIENT = "transient"
FATAL = "fatal"
SHRINK_STEPS = (0.70, 0.50, 0.35)
BACKOFF_BASE = 0.5
BACKOFF_CAP = 8.0
MAX_RETRY_AFTER = 60.0


@dataclass(frozen=True, slots=True)
class SummaryReply:
    """What the summary call returned: the text and the provider's finish reason."""

    text: str
    finish_reason: str | None = None


class SummaryCallFailed(Exception):
    """Raised by the injected ``call`` when the provider refused or failed.

    ``verdict`` classifies the failure: ``"overflow"`` / ``"too_large"`` (the request is
    too big), ``"transient"`` (retry later), ``"fatal"`` or any other string (stop).
    """

    def __init__(self, verdict: str, failure: UpstreamFailure) -> None:
        super().__init__(f"{verdict}: {failure.provider} {failure.status}: {failure.message}")
        self.verdict = verdict
        self.failure = failure


@dataclass(frozen=True, slots=True)
class SummaryAttempt:
    """One summary call: what was sent, what came back, what was done about it.

    ``result``: ``"ok"``, ``"empty"``, ``"cut_off"`` or the failure verdict. ``action``:
    ``"done"``, ``"shrink"``, ``"drop_oldest"``, ``"retry"`` or ``"stop"``. ``delay`` is
    the back-off slept before the next attempt.
    """

    number: int
    messages_sent: int
    tokens_sent: int
    result: str
    action: str
    status: int | None = None
    detail: str = ""
    delay: float | None = None


@dataclass(frozen=True, slots=True)
class SummaryOutcome:
    """The end of a summarization: ``ok`` with ``text``, or not ``ok`` with ``reason``.

    ``first_covered`` is the index, in the projected messages given to ``summarize``, of
    the oldest message the summary was written from (system messages are never summarized): it moves
    forward when shrinking or dropping left older messages out.
    """

    ok: bool
    text: str = ""
    attempts: tuple[SummaryAttempt, ...] = field(default=())
    reason: str | None = None
    first_covered: int = 0
    failure: UpstreamFailure | None = None


SummaryCall = Callable[[dict[str, object]], Awaitable[SummaryReply]]


# Characters per token assumed when sizing one message's share of a small summary input
# (log and code lines run about 3; prose about 4), and that share.
_CHARS_PER_TOKEN = 3
_ONE_MESSAGE_SHARE = 0.8


def message_chars(input_budget: int | None) -> int:
    """The most characters of one message the summary transcript carries: the fixed cap,
    or less when the summary input budget (tokens) is smaller than that cap."""
    if input_budget is None:
        return MAX_MESSAGE_CHARS
    return min(MAX_MESSAGE_CHARS, int(input_budget * _CHARS_PER_TOKEN * _ONE_MESSAGE_SHARE))


def _skip_leading_results(history: Sequence[Message], start: int) -> int:
    while start < len(history) and history[start].get("role") == "tool":
        start += 1
    return start


def keep_recent(sizes: Sequence[int], history: Sequence[Message], start: int, target: int) -> int:
    """The start index of the longest suffix of ``history[start:]`` within ``target`` tokens.

    ``sizes`` are per-message token counts. The suffix never begins with tool results (their
    call would be cut away); when nothing fits, the last message is kept together with the
    call its trailing tool results answer.
    """
    used = 0
    cut = len(history)
    while cut > start and used + sizes[cut - 1] <= target:
        cut -= 1
        used += sizes[cut]
    cut = _skip_leading_results(history, cut)
    if cut >= len(history):
        cut = len(history) - 1
        while cut > start and history[cut].get("role") == "tool":
            cut -= 1
    return max(cut, start)


def drop_oldest(history: Sequence[Message], start: int) -> int:
    """The start index after dropping the oldest message and the tool results it leaves."""
    return _skip_leading_results(history, start + 1)


def _backoff(retry: int, failure: UpstreamFailure, rng: Callable[[], float]) -> float | None:
    """The shared backoff (``gateway.backoff``); None when ``Retry-After`` is too long."""
    return backoff_delay(retry, base=BACKOFF_BASE, cap=BACKOFF_CAP,
                         retry_after=failure.retry_after, max_retry_after=MAX_RETRY_AFTER,
                         rng=rng)


class _Run:
    """The mutable state of one ``summarize`` run."""

    def __init__(self, history: list[Message], sizes: list[int], origin: list[int]) -> None:
        self.history = history
        self.origin = origin
        self.sizes = sizes
        self.full_tokens = sum(sizes)
        self.start = 0
        self.shrinks = 0
        self.retries = 0
        self.attempts: list[SummaryAttempt] = []

    @property
    def window(self) -> list[Message]:
        return self.history[self.start :]

    def record(
        self,
        number: int,
        result: str,
        action: str,
        *,
        failure: UpstreamFailure | None = None,
        detail: str = "",
        delay: float | None = None,
    ) -> None:
        self.attempts.append(
            SummaryAttempt(
                number=number,
                messages_sent=len(self.history) - self.start,
                tokens_sent=sum(self.sizes[self.start :]),
                result=result,
                action=action,
                status=failure.status if failure else None,
                detail=detail or (failure.message[:300] if failure else ""),
                delay=delay,
            )
        )

    def finish(
        self, *, text: str = "", reason: str | None = None, failure: UpstreamFailure | None = None
    ) -> SummaryOutcome:
        return SummaryOutcome(
            ok=reason is None,
            text=text,
            attempts=tuple(self.attempts),
            reason=reason,
            first_covered=self.origin[self.start] if self.start < len(self.origin) else 0,
            failure=failure,
        )

    def shrink(self) -> str:
        """Apply the next shrink step; returns a description of what was kept."""
        step = SHRINK_STEPS[self.shrinks]
        target = int(self.full_tokens * step)
        current = sum(self.sizes[self.start :])
        if current <= target:  # earlier drops already went below this step: shrink relatively
            previous = SHRINK_STEPS[self.shrinks - 1] if self.shrinks else 1.0
            target = int(current * step / previous)
        self.shrinks += 1
        self.start = keep_recent(self.sizes, self.history, self.start, target)
        kept = sum(self.sizes[self.start :])
        return (
            f"step {self.shrinks} ({step:.0%}): keeping the most recent {kept} of "
            f"{self.full_tokens} tokens"
        )


def _transcript(messages: Sequence[Message], count_tokens: Callable[[Sequence[Message]], int],
                ) -> tuple[list[Message], list[int], list[int]]:
    """The projected history to summarize (system, developer and dynamic-tool context left
    out), the tokens of each of its messages, and where each came from."""
    history: list[Message] = []
    origin: list[int] = []  # index in the projected history of each entry
    for index, message in enumerate(project(list(messages)).messages):
        if message.get("role") in ("system", "developer"):
            continue
        for stripped in strip_dynamic_tool_context([message]):
            history.append(stripped)
            origin.append(index)
    return history, [count_tokens([m]) for m in history], origin


async def summarize(
    messages: Sequence[Message],
    call: SummaryCall,
    *,
    model: str,
    count_tokens: Callable[[Sequence[Message]], int],
    settings: CompactionSettings = DEFAULT_SETTINGS,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    instructions: str = DEFAULT_INSTRUCTIONS,
    rng: Callable[[], float] = random.random,
    max_tokens: int | None = None,
    input_budget: int | None = None,
) -> SummaryOutcome:
    """Summarize ``messages`` with ``call``, handling the SPEC §4.4 failures.

    The transcript is built from the projected history (``project()``: orphan results
    dropped, missing ones synthesized, error results marked), as the chat request is.
    System / developer messages and dynamic-tool context are left out of the summary.
    ``count_tokens`` counts a list of messages; ``sleep`` and ``rng`` make back-off testable.
    ``max_tokens`` is set on every summary request; with ``input_budget`` only the most
    recent messages within that many tokens are sent from the start (a small window),
    instead of learning it from overflow refusals. ``UpstreamError`` raised by ``call`` is
    treated as a fatal ``SummaryCallFailed``.
    """
    # Seconds of CPU for a history of many megabytes: off the event loop.
    history, sizes, origin = await asyncio.to_thread(_transcript, messages, count_tokens)
    run = _Run(history, sizes, origin)
    if not history:
        return run.finish(reason="nothing to summarize")
    if input_budget is not None and run.full_tokens > input_budget:
        run.start = keep_recent(run.sizes, history, 0, input_budget)
    clip = message_chars(input_budget)
    for number in range(1, settings.max_attempts + 1):
        # A shrink that cannot leave a message out (one message alone is too large) clips
        # it in the same proportion.
        shrunk = SHRINK_STEPS[run.shrinks - 1] if run.shrinks else 1.0
        body = build_summary_request(run.window, model=model, instructions=instructions,
                                     max_tokens=max_tokens,
                                     max_message_chars=int(clip * shrunk))
        try:
            reply = await call(body)
        except (SummaryCallFailed, UpstreamError) as exc:
            verdict = exc.verdict if isinstance(exc, SummaryCallFailed) else FATAL
            failure = exc.failure
            if verdict in (OVERFLOW, TOO_LARGE):
                if run.shrinks >= len(SHRINK_STEPS):
                    run.record(number, verdict, "stop", failure=failure)
                    reason = f"summary request still too large after {run.shrinks} shrinks"
                    return run.finish(reason=reason, failure=failure)
                run.record(number, verdict, "shrink", failure=failure)
                run.attempts[-1] = _with_detail(run.attempts[-1], run.shrink())
                continue
            if verdict == TRANSIENT:
                delay = _backoff(run.retries, failure, rng)
                if delay is None or number == settings.max_attempts:
                    run.record(number, verdict, "stop", failure=failure)
                    why = "Retry-After too long" if delay is None else "attempts exhausted"
                    return run.finish(reason=f"transient failure, {why}", failure=failure)
                run.record(number, verdict, "retry", failure=failure, delay=delay)
                run.retries += 1
                await sleep(delay)
                continue
            run.record(number, verdict, "stop", failure=failure)
            return run.finish(reason=f"{verdict} failure from the summary call (HTTP "
                                     f"{failure.status})", failure=failure)
        text = reply.text.strip()
        if text and reply.finish_reason != "length":
            run.record(number, "ok", "done")
            return run.finish(text=text)
        result = "cut_off" if text else "empty"
        next_start = drop_oldest(history, run.start)
        if next_start >= len(history):
            run.record(number, result, "stop")
            return run.finish(reason=f"summary {result.replace('_', ' ')}, nothing left to drop")
        run.record(number, result, "drop_oldest")
        run.start = next_start
    return run.finish(reason=f"no summary after {settings.max_attempts} attempts")


def _with_detail(attempt: SummaryAttempt, detail: str) -> SummaryAttempt:
    return replace(attempt, detail=f"{detail}; {attempt.detail}" if attempt.detail else detail)
