"""SPEC §4.4 end to end: the summary call itself fails, through the real gateway.

The referee has no window here: the client's request is refused with a scripted real
overflow body, then the summary calls get scripted answers, so every path is exact.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest
from opentelemetry.trace import StatusCode

from gateway.referee import Referee
from gateway.referee.bodies import rate_limited
from tests.compaction.conftest import (
    Session,
    agent_turn,
    chat_calls,
    compaction_header,
    demo_config,
    overflow_reply,
    success_body,
    summary_calls,
)
from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import user


@pytest.fixture
async def ref() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai") as referee:
        yield referee


async def grown_session(gw: RunningGateway, turns: int = 3) -> Session:
    s = Session(gw, session_id="sum-1")
    for i in range(turns):
        await s.send(agent_turn(i))
    return s


def transcript(record: object) -> str:
    content = record.json()["messages"][1]["content"]  # type: ignore[attr-defined]
    assert isinstance(content, str)
    return content


async def test_summary_overflow_shrinks_to_the_most_recent_messages(
    gateway_factory: GatewayFactory, ref: Referee
) -> None:
    gw = await gateway_factory(demo_config(ref))
    s = await grown_session(gw)
    mark = len(ref.requests)
    ref.script(overflow_reply())  # the client's request
    ref.script(overflow_reply(), times=3)  # the summary request, then at 70% and 50%
    raw = await s.send(agent_turn(3))
    assert compaction_header(raw) is not None and compaction_header(raw)[0] == "summarized"
    sums = summary_calls(ref, mark)
    assert [r.status for r in sums] == [400, 400, 400, 200]
    sizes = [len(r.body) for r in sums]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 4, sizes
    assert "Step 0:" in transcript(sums[0]) and "Step 0:" not in transcript(sums[-1])
    assert "Step 3:" in transcript(sums[-1])  # the most recent messages are kept


async def test_summary_still_too_large_after_three_shrinks_gives_up(
    gateway_factory: GatewayFactory, ref: Referee
) -> None:
    gw = await gateway_factory(demo_config(ref))
    s = await grown_session(gw)
    mark = len(ref.requests)
    ref.script(overflow_reply(tokens=150_000))
    ref.script(overflow_reply(), times=4)
    with pytest.raises(openai.BadRequestError) as info:
        await s.send(agent_turn(3))
    assert len(summary_calls(ref, mark)) == 4  # the call, then 3 shrinks: no 5th
    response = info.value.response
    assert "still too large after 3 shrinks" in response.headers["x-gateway-compaction-failed"]
    body = response.json()
    assert body["error"]["code"] == "context_length_exceeded"
    assert "150000 tokens" in body["error"]["message"]  # the provider's own error
    assert "compaction" in body["gateway"]["gave_up"]
    assert len(chat_calls(ref, mark)) == 1  # nothing compacted: nothing resent


@pytest.mark.parametrize("reply", ["empty", "cut_off"])
async def test_empty_or_cut_off_summary_drops_the_oldest_message_and_retries(
    gateway_factory: GatewayFactory, ref: Referee, reply: str
) -> None:
    gw = await gateway_factory(demo_config(ref))
    s = await grown_session(gw)
    mark = len(ref.requests)
    ref.script(overflow_reply())
    if reply == "empty":
        ref.script(200, success_body("   "))
    else:
        ref.script(200, success_body("## Task\nThe user asked for", finish_reason="length"))
    raw = await s.send(agent_turn(3))
    assert compaction_header(raw) is not None
    first, second = summary_calls(ref, mark)
    assert "[user]\nStep 0:" in transcript(first)
    # The oldest message (the first ask) is gone; its tool exchange begins the transcript.
    assert "Step 0:" not in transcript(second)
    assert transcript(second).startswith("<transcript>\n[assistant]")
    compacted = chat_calls(ref, mark)[-1].json()["messages"]
    assert "referee: accepted 2 messages" in compacted[-2]["content"]
    assert "The user asked for" not in compacted[-2]["content"]


async def test_retryable_summary_failure_backs_off_and_retries(
    gateway_factory: GatewayFactory, ref: Referee
) -> None:
    gw = await gateway_factory(demo_config(ref))
    s = await grown_session(gw)
    mark = len(ref.requests)
    ref.script(overflow_reply())
    ref.script(rate_limited("openai", retry_after=0))
    raw = await s.send(agent_turn(3))
    assert compaction_header(raw) is not None
    first, second = summary_calls(ref, mark)
    assert (first.status, second.status) == (429, 200)
    assert first.body == second.body  # the same request again, not shrunk


async def test_summary_attempts_are_bounded_by_max_attempts(
    gateway_factory: GatewayFactory, ref: Referee
) -> None:
    gw = await gateway_factory(demo_config(ref, compaction={"max_attempts": 3}))
    s = await grown_session(gw, turns=4)
    mark = len(ref.requests)
    ref.script(overflow_reply())
    ref.script(200, success_body(""), times=5)
    with pytest.raises(openai.BadRequestError) as info:
        await s.send([user("go on")])
    assert len(summary_calls(ref, mark)) == 3
    assert "no summary after 3 attempts" in info.value.response.headers[
        "x-gateway-compaction-failed"]
    ref.state.script.clear()


async def test_dynamic_tool_context_is_not_summarized(
    gateway_factory: GatewayFactory, ref: Referee
) -> None:
    gw = await gateway_factory(demo_config(ref))
    s = Session(gw, session_id="tools-1")
    schema = {"type": "function", "function": {"name": "deploy_everything",
                                               "parameters": {"type": "object"}}}
    await s.send([user("<tools_added>\ndeploy_everything: ships it\n</tools_added>\n"
                       "Start the migration."), *agent_turn(0)[1:]])
    s.history.append({**user("Now the second part."), "tools": [schema]})
    mark = len(ref.requests)
    ref.script(overflow_reply())
    await s.send(agent_turn(1))
    (call,) = summary_calls(ref, mark)
    text = transcript(call)
    assert "Start the migration." in text and "Now the second part." in text
    assert "tools_added" not in text and "deploy_everything" not in text
    assert "tools" not in call.json()


async def test_summary_calls_are_traced(gateway_factory: GatewayFactory,
                                       ref: Referee) -> None:
    gw = await gateway_factory(demo_config(ref))
    s = await grown_session(gw)
    gw.spans.clear()
    ref.script(overflow_reply())
    ref.script(overflow_reply())  # the first summary call overflows too
    raw = await s.send(agent_turn(3))
    _, before, after = compaction_header(raw) or ("", 0, 0)
    spans = gw.spans.get_finished_spans()
    calls = [sp for sp in spans if sp.name == "gateway.compaction.summary_call"]
    (compaction,) = [sp for sp in spans if sp.name == "gateway.compaction"]
    assert len(calls) == 2
    assert calls[0].status.status_code is StatusCode.ERROR
    assert calls[0].attributes["gateway.verdict"] == "overflow"
    assert calls[1].status.status_code is not StatusCode.ERROR
    assert calls[1].attributes["gateway.upstream.status"] == 200
    assert all(c.parent is not None and c.parent.span_id == compaction.context.span_id
               for c in calls)
    assert compaction.attributes["gateway.session"] == "sum-1"
    assert compaction.attributes["gateway.compaction.attempts"] == 2
    assert compaction.attributes["gateway.compaction.tokens_before"] == before
    assert compaction.attributes["gateway.compaction.tokens_after"] == after
    (chat,) = [sp for sp in spans if sp.name == "gateway.chat"]
    assert compaction.parent is not None
    assert compaction.context.trace_id == chat.context.trace_id
