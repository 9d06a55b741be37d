"""The summarizer driver against a scripted fake call: every SPEC §4.4 failure path."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gateway.compaction import (
    CompactionSettings,
    SummaryCallFailed,
    SummaryReply,
    summarize,
)
from gateway.providers.base import UpstreamError
from gateway.providers.failure import UpstreamFailure

Message = dict[str, Any]


def words(messages: Sequence[Message]) -> int:
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            total += len(content.split())
    return total


def para(tag: str, n: int) -> str:
    return " ".join(f"{tag}w{i}" for i in range(n))


def history(rounds: int = 6) -> list[Message]:
    """Rounds of: user, assistant tool call, two tool results, assistant answer."""
    out: list[Message] = [{"role": "system", "content": para("sys", 500)}]
    for k in range(rounds):
        out += [
            {"role": "user", "content": para(f"u{k}", 100)},
            {
                "role": "assistant",
                "content": para(f"a{k}", 20),
                "tool_calls": [
                    {
                        "id": f"c{k}a",
                        "type": "function",
                        "function": {"name": "read", "arguments": "{}"},
                    },
                    {
                        "id": f"c{k}b",
                        "type": "function",
                        "function": {"name": "grep", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": f"c{k}a", "content": para(f"t{k}a", 60)},
            {"role": "tool", "tool_call_id": f"c{k}b", "content": para(f"t{k}b", 60)},
            {"role": "assistant", "content": para(f"f{k}", 40)},
        ]
    return out


def failure(status: int = 400, retry_after: float | None = None) -> UpstreamFailure:
    return UpstreamFailure(status=status, provider="fake", message="nope", retry_after=retry_after)


class Script:
    """A fake summary call replaying scripted replies or failures, recording the bodies."""

    def __init__(self, *steps: SummaryReply | BaseException) -> None:
        self.steps = list(steps)
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, body: dict[str, Any]) -> SummaryReply:
        self.bodies.append(body)
        step = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if isinstance(step, BaseException):
            raise step
        return step

    def transcript(self, n: int) -> str:
        content = self.bodies[n]["messages"][1]["content"]
        assert isinstance(content, str)
        return content

    def first_block(self, n: int) -> str:
        text = self.transcript(n).split("<transcript>\n", 1)[1]
        return text.split("\n", 1)[0]


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


OK = SummaryReply("## Task\nMigrate.", "stop")


def overflow() -> SummaryCallFailed:
    return SummaryCallFailed("overflow", failure())


async def run(script: Script, messages: Sequence[Message] | None = None, **kwargs: Any) -> Any:
    return await summarize(
        history() if messages is None else messages,
        script,
        model="summ-model",
        count_tokens=words,
        **kwargs,
    )


async def test_success_first_time_excludes_system_messages() -> None:
    script = Script(OK)
    outcome = await run(script)
    assert outcome.ok and outcome.text == "## Task\nMigrate." and outcome.reason is None
    assert [(a.result, a.action) for a in outcome.attempts] == [("ok", "done")]
    assert script.bodies[0]["model"] == "summ-model"
    assert "sysw0" not in script.transcript(0)
    assert outcome.attempts[0].tokens_sent == words(history()[1:])
    assert outcome.first_covered == 1


async def test_overflow_shrinks_to_70_50_35_percent_and_keeps_calls_with_results() -> None:
    script = Script(overflow(), overflow(), overflow(), OK)
    outcome = await run(script)
    full = words(history()[1:])
    sent = [a.tokens_sent for a in outcome.attempts]
    assert outcome.ok and len(script.bodies) == 4
    assert sent[0] == full
    for tokens, ratio in zip(sent[1:], (0.70, 0.50, 0.35), strict=True):
        assert tokens <= ratio * full
        assert tokens >= ratio * full - 240  # no more than one round below the target
    assert [a.action for a in outcome.attempts] == ["shrink", "shrink", "shrink", "done"]
    for n in range(4):
        assert not script.first_block(n).startswith("[tool result")
    assert outcome.first_covered > 0
    # The most recent messages are the ones kept.
    assert "f5w39" in script.transcript(3) and "u0w0" not in script.transcript(3)


async def test_overflow_stops_after_three_shrinks() -> None:
    script = Script(overflow())
    outcome = await run(script, settings=CompactionSettings(max_attempts=10))
    assert not outcome.ok
    assert len(script.bodies) == 4
    assert [a.action for a in outcome.attempts] == ["shrink", "shrink", "shrink", "stop"]
    assert "3 shrinks" in (outcome.reason or "")
    assert outcome.failure is not None and outcome.failure.status == 400


async def test_too_large_is_treated_as_overflow() -> None:
    script = Script(SummaryCallFailed("too_large", failure(413)), OK)
    outcome = await run(script)
    assert outcome.ok and outcome.attempts[0].action == "shrink"


async def test_empty_or_cut_off_summary_drops_the_oldest_message_with_its_results() -> None:
    script = Script(
        SummaryReply("   ", "stop"),
        SummaryReply("## Task\nMigr", "length"),
        OK,
    )
    outcome = await run(script)
    assert outcome.ok
    assert [(a.result, a.action) for a in outcome.attempts] == [
        ("empty", "drop_oldest"),
        ("cut_off", "drop_oldest"),
        ("ok", "done"),
    ]
    assert script.first_block(0) == "[user]"
    assert "u0w0" in script.transcript(0)
    # 1st drop: the user message; the assistant call now leads.
    assert "u0w0" not in script.transcript(1) and "a0w0" in script.transcript(1)
    # 2nd drop: the call, and its two results that would now lead.
    third = script.transcript(2)
    assert "a0w0" not in third and "t0aw0" not in third and "t0bw0" not in third
    assert "f0w0" in third
    assert outcome.first_covered == 5  # index in the input, which starts with a system message


async def test_transient_failures_back_off_with_jitter_and_honour_retry_after() -> None:
    script = Script(
        SummaryCallFailed("transient", failure(529)),
        SummaryCallFailed("transient", failure(429, retry_after=3.0)),
        OK,
    )
    sleeps = Sleeps()
    outcome = await run(script, sleep=sleeps, rng=lambda: 1.0)
    assert outcome.ok
    assert sleeps.delays == [0.5, 3.0]
    assert [a.action for a in outcome.attempts] == ["retry", "retry", "done"]
    assert [a.status for a in outcome.attempts] == [529, 429, None]
    assert script.transcript(0) == script.transcript(2)  # a retry resends the same request


async def test_jitter_shrinks_the_delay() -> None:
    sleeps = Sleeps()
    script = Script(SummaryCallFailed("transient", failure(503)), OK)
    await run(script, sleep=sleeps, rng=lambda: 0.0)
    assert sleeps.delays == [0.0]  # full jitter (gateway.backoff): rng() * ceiling


async def test_retry_after_beyond_the_cap_stops_without_sleeping() -> None:
    sleeps = Sleeps()
    script = Script(SummaryCallFailed("transient", failure(429, retry_after=3600)), OK)
    outcome = await run(script, sleep=sleeps)
    assert not outcome.ok and sleeps.delays == [] and len(script.bodies) == 1
    assert "Retry-After" in (outcome.reason or "")


async def test_max_attempts_is_honoured() -> None:
    sleeps = Sleeps()
    script = Script(SummaryCallFailed("transient", failure(503)))
    outcome = await run(script, sleep=sleeps, settings=CompactionSettings(max_attempts=3))
    assert not outcome.ok
    assert len(script.bodies) == 3 and len(outcome.attempts) == 3
    assert len(sleeps.delays) == 2  # no pointless sleep after the last attempt
    assert outcome.attempts[-1].action == "stop"

    empty = Script(SummaryReply("", "stop"))
    outcome = await run(empty)  # default: 5 attempts
    assert not outcome.ok and len(empty.bodies) == 5
    assert outcome.reason == "no summary after 5 attempts"


async def test_fatal_failures_stop_at_once_and_never_raise() -> None:
    script = Script(SummaryCallFailed("fatal", failure(401)), OK)
    outcome = await run(script)
    assert not outcome.ok and len(script.bodies) == 1
    assert outcome.attempts[0].result == "fatal" and outcome.attempts[0].action == "stop"
    assert outcome.failure is not None and outcome.failure.status == 401

    raw = Script(UpstreamError(failure(500)), OK)
    outcome = await run(raw)
    assert not outcome.ok and len(raw.bodies) == 1


async def test_dynamic_tool_context_is_not_summarized() -> None:
    messages: list[Message] = [
        {"role": "user", "content": "<tools_added>secret_tool</tools_added>"},
        {"role": "user", "content": "Do the thing.", "tools": [{"type": "function"}]},
    ]
    script = Script(OK)
    outcome = await run(script, messages)
    assert outcome.ok
    assert "secret_tool" not in script.transcript(0) and "tools" not in script.bodies[0]
    assert "Do the thing." in script.transcript(0)


async def test_nothing_to_summarize() -> None:
    script = Script(OK)
    outcome = await run(script, [{"role": "system", "content": "s"}])
    assert not outcome.ok and script.bodies == []


async def test_shrink_after_drops_still_shrinks() -> None:
    script = Script(SummaryReply("", None), SummaryReply("", None), overflow(), OK)
    outcome = await run(script)
    assert outcome.ok
    sent = [a.tokens_sent for a in outcome.attempts]
    assert sent[3] < sent[2]
    assert re.search(r"step 1 \(70%\)", outcome.attempts[2].detail)


def test_keep_recent_never_starts_with_tool_results() -> None:
    from gateway.compaction.summarizer import keep_recent

    roles = ["user", "assistant", "tool", "tool", "assistant", "user", "assistant", "tool"]
    msgs: list[Message] = [{"role": r, "content": "x"} for r in roles]
    sizes = [10, 10, 10, 10, 10, 10, 10, 10]
    # 55 tokens would start inside the first call's results (index 3): the results go too.
    assert keep_recent(sizes, msgs, 0, 55) == 4
    assert keep_recent(sizes, msgs, 0, 1000) == 0
    # Nothing fits: keep the last call with its result rather than an orphaned result.
    assert keep_recent(sizes, msgs, 0, 5) == 6
    assert keep_recent(sizes, msgs, 7, 5) == 7  # never before the current start


async def test_overflow_cut_inside_tool_results_moves_past_them() -> None:
    messages: list[Message] = [
        {"role": "user", "content": para("u", 100)},
        {
            "role": "assistant",
            "content": "x",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "read", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c", "content": para("big", 300)},
        {"role": "tool", "tool_call_id": "c", "content": para("more", 300)},
        {"role": "assistant", "content": para("end", 100)},
    ]  # 801 tokens; 70% = 560: the cut would fall in the results
    script = Script(overflow(), OK)
    outcome = await run(script, messages)
    assert outcome.ok
    assert script.first_block(1) == "[assistant]"
    assert "endw0" in script.transcript(1) and "morew0" not in script.transcript(1)


async def test_the_transcript_is_built_from_the_projected_history() -> None:
    script = Script(OK)
    messages: list[Message] = [
        {"role": "user", "content": "read both"},
        {"role": "tool", "tool_call_id": "call_ghost", "content": "ORPHAN OUTPUT"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "disk full", "is_error": True},
        {"role": "user", "content": "and now?"},
    ]
    await run(script, messages)
    transcript = script.transcript(0)
    assert "ORPHAN OUTPUT" not in transcript  # an orphan result is dropped, as in the chat
    assert "<system>ERROR: Tool execution failed.</system>\ndisk full" in transcript


async def test_small_windows_set_max_tokens_and_send_only_what_fits() -> None:
    script = Script(OK)
    outcome = await run(script, max_tokens=256, input_budget=60)
    body = script.bodies[0]
    assert body["max_tokens"] == 256
    assert outcome.ok and outcome.first_covered > 0  # the oldest messages were left out
    assert len(script.bodies) == 1  # no refusal needed to learn it
