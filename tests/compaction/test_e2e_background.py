"""Background compaction (SPEC §4.1): past the trigger ratio (below the block ratio) the
request goes on uncompacted while a summary is prepared; the result is applied only to a
later request that is the compacted history plus new real user input."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from gateway.referee import Referee
from tests.compaction.conftest import (
    Session,
    accepted,
    agent_turn,
    assert_compacted_shape,
    chat_calls,
    compaction_header,
    demo_config,
    messages_prefix_bytes,
    summary_calls,
    wait_background_idle,
)
from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import assistant, tool, tool_call, user

# Three small turns use under 20% of the window; a big fourth one takes it to about 75%:
# past the trigger (0.6), below the block ratio (0.95).
WINDOW = 2400
SETTINGS = {"trigger_ratio": 0.6, "block_ratio": 0.95}


@pytest.fixture
async def ref() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai") as referee:
        yield referee


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, ref: Referee) -> RunningGateway:
    return await gateway_factory(demo_config(ref, window=WINDOW, compaction=SETTINGS))


async def cross_trigger(gw: RunningGateway, ref: Referee, session_id: str = "bg-1") -> Session:
    """Three small turns, then a big one that crosses the trigger; waits for the summary."""
    s = Session(gw, session_id=session_id)
    for i in range(3):
        raw = await s.send(agent_turn(i, lines=5))
        assert raw.headers["x-gateway-context"].split(";")[0] == "comfortable"
        assert compaction_header(raw) is None
    mark = len(ref.requests)
    raw = await s.send(agent_turn(3, lines=80))
    assert raw.headers["x-gateway-context"].split(";")[0] == "critical"
    assert compaction_header(raw) is None  # the request went on uncompacted
    forwarded = chat_calls(ref, mark)[0]
    assert forwarded.json()["messages"] == s.history[:-1]
    await wait_background_idle(gw)
    (summary,) = summary_calls(ref, mark)
    assert summary.status == 200
    return s


async def test_background_result_is_applied_to_the_next_user_turn(
    gw: RunningGateway, ref: Referee
) -> None:
    s = await cross_trigger(gw, ref)
    compacted_history = list(s.history[:-1])  # what was compacted (before the answer)
    mark = len(ref.requests)
    raw = await s.send([user("Thanks. Now add a test for handler_3_0.")])
    how, before, after = compaction_header(raw) or ("", 0, 0)
    assert how == "background-applied" and after < before
    assert summary_calls(ref, mark) == []  # already summarized in the background
    (sent,) = chat_calls(ref, mark)
    messages = sent.json()["messages"]
    stored = len(messages) - 2
    assert_compacted_shape(messages[:stored], compacted_history, "bg-1")
    # After the compaction: the model's answer and the new user input, verbatim.
    assert messages[stored:] == s.history[len(compacted_history):-1]
    assert raw.headers["x-gateway-context"].split(";")[0] == "comfortable"
    prefix = messages_prefix_bytes(sent, stored)

    mark = len(ref.requests)
    raw = await s.send([user("And one more.")])
    assert compaction_header(raw) == ("reused", before, after)
    assert summary_calls(ref, mark) == []
    (again,) = chat_calls(ref, mark)
    assert messages_prefix_bytes(again, stored) == prefix


async def test_background_result_is_discarded_after_new_tool_activity(
    gw: RunningGateway, ref: Referee
) -> None:
    s = await cross_trigger(gw, ref)
    more = [user("Run the tests."),
            assistant(None, [tool_call("call_t", "run_tests", {})]), tool("call_t", "1 passed")]
    mark = len(ref.requests)
    raw = await s.send(more)
    header = compaction_header(raw)
    assert header is None or header[0] != "background-applied"
    (sent,) = chat_calls(ref, mark)
    assert sent.json()["messages"] == s.history[:-1]  # uncompacted, all of it
    await wait_background_idle(gw)


async def test_background_result_is_discarded_when_the_history_diverged(
    gw: RunningGateway, ref: Referee
) -> None:
    s = await cross_trigger(gw, ref)
    # The client rewrote an earlier message (an edit-and-resend): not the compacted history.
    s.history[1] = user("Step 0: open module_0.py and explain it line by line.")
    mark = len(ref.requests)
    raw = await s.send([user("Go on.")])
    header = compaction_header(raw)
    assert header is None or header[0] != "background-applied"
    assert chat_calls(ref, mark)[0].json()["messages"] == s.history[:-1]
    await wait_background_idle(gw)
    # The result was thrown away: restoring the original history does not bring it back.
    s.history[1] = agent_turn(0, lines=5)[0]
    del s.history[-3:]
    mark = len(ref.requests)
    raw = await s.send([user("Go on.")])
    header = compaction_header(raw)
    assert header is None or header[0] != "background-applied"
    await wait_background_idle(gw)


async def test_one_background_compaction_per_prefix_at_a_time(
    gw: RunningGateway, ref: Referee
) -> None:
    s = Session(gw, session_id="bg-many")
    for i in range(3):
        await s.send(agent_turn(i, lines=5))
    s.history.extend(agent_turn(3, lines=80))
    mark = len(ref.requests)
    clones = [Session(gw, session_id="bg-many", history=list(s.history)) for _ in range(4)]
    raws = await asyncio.gather(*(c.send() for c in clones))
    await wait_background_idle(gw)
    assert len(summary_calls(ref, mark)) == 1
    assert all(r.headers["x-gateway-context"].split(";")[0] == "critical" for r in raws
               if compaction_header(r) is None)


async def test_background_and_overflow_on_the_same_prefix_summarize_once(
    gw: RunningGateway, ref: Referee
) -> None:
    s = Session(gw, session_id="bg-overflow")
    for i in range(3):
        await s.send(agent_turn(i, lines=5))
    # The upstream's real window is smaller than configured: the big turn both crosses the
    # trigger (background) and overflows at the upstream (blocking compaction).
    ref.configure(context_window=1200)
    mark = len(ref.requests)
    raw = await s.send([*agent_turn(3, lines=40), *agent_turn(4, lines=40)])
    await wait_background_idle(gw)
    header = compaction_header(raw)
    assert header is not None and header[0] in ("summarized", "reused")
    assert len(accepted(summary_calls(ref, mark))) == 1
    assert chat_calls(ref, mark)[0].status == 400
    assert chat_calls(ref, mark)[-1].status == 200
