"""One message larger than a small window's whole summary input is clipped to fit it (its
start and end kept), and clipped further by each shrink step when nothing else can go."""

from __future__ import annotations

from typing import Any

from gateway.compaction.summarizer import (
    SummaryCallFailed,
    SummaryReply,
    message_chars,
    summarize,
)
from gateway.compaction.summary_request import (
    MAX_MESSAGE_CHARS,
    MIN_MESSAGE_CHARS,
    render_transcript,
)
from gateway.providers.failure import UpstreamFailure

# The provider's window, in characters of the summary request's messages: the fixed
# instructions and the first two clip steps of a 1,500-token budget do not fit, the third does.
LIMIT = 3_500


def test_the_cap_follows_a_small_input_budget() -> None:
    assert message_chars(None) == MAX_MESSAGE_CHARS
    assert message_chars(1_000_000) == MAX_MESSAGE_CHARS
    assert message_chars(1_500) == 3_600


def test_render_transcript_clips_to_the_limit_given() -> None:
    text = "a" * 5_000 + "END"
    clipped = render_transcript([{"role": "user", "content": text}], max_message_chars=1_000)
    assert "characters omitted" in clipped and clipped.rstrip().endswith("END")
    assert len(clipped) < 1_200
    # Never below the floor, never above the fixed cap.
    floor = render_transcript([{"role": "user", "content": text}], max_message_chars=1)
    assert len(floor) < MIN_MESSAGE_CHARS + 100
    whole = render_transcript([{"role": "user", "content": text}],
                              max_message_chars=10**9)
    assert "characters omitted" not in whole


async def test_a_single_huge_message_is_clipped_further_on_each_shrink() -> None:
    sent: list[int] = []

    async def call(body: dict[str, Any]) -> SummaryReply:
        size = len(str(body["messages"]))
        sent.append(size)
        if size > LIMIT:
            raise SummaryCallFailed("overflow", UpstreamFailure(
                400, "p", "prompt is too long: 900 tokens > 600 maximum"))
        return SummaryReply("## Task\nRead the log.", "stop")

    huge = [{"role": "user", "content": "line of log output\n" * 1_000}]
    outcome = await summarize(huge, call, model="m", count_tokens=lambda ms: 10_000,
                              input_budget=1_500, max_tokens=128,
                              sleep=lambda _: _no_wait())
    assert outcome.ok, outcome
    assert len(sent) == 3 and sent[0] > sent[1] > LIMIT >= sent[2]


async def _no_wait() -> None:
    return None
