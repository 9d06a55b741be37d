"""Compaction end to end through the real openai SDK: a session outgrows a small upstream
window (which refuses with the providers' real overflow bodies) and keeps getting answers."""

from __future__ import annotations

import openai
import pytest

from gateway.compaction import SUMMARY_PREFIX
from gateway.referee import Referee
from gateway.referee.bodies import unauthorized
from gateway.referee.completions import estimate_tokens
from tests.compaction.conftest import (
    Session,
    accepted,
    agent_turn,
    assert_compacted_shape,
    chat_calls,
    compaction_header,
    demo_config,
    file_body,
    is_summary_call,
    messages_prefix_bytes,
    summary_calls,
)
from tests.conftest import GatewayFactory
from tests.factories import user

REFEREE_WINDOW = 1500  # estimated tokens (len(json) / 4): about 6,000 bytes of messages

@pytest.mark.parametrize("style", ["openai", "anthropic"])
async def test_session_outgrowing_the_window_keeps_getting_answers(
    gateway_factory: GatewayFactory, style: str
) -> None:
    async with Referee(rules="openai", style=style, context_window=REFEREE_WINDOW) as ref:
        gw = await gateway_factory(demo_config(ref))
        s = Session(gw)
        hows: list[str | None] = []
        for i in range(8):
            raw = await s.send(agent_turn(i))
            header = compaction_header(raw)
            hows.append(header[0] if header else None)
        # The first compaction follows a real overflow at the upstream; from then on the
        # gateway plans with the window the provider stated (it wins over the
        # configured 100,000) and compacts before sending, without another refusal.
        summarized = [n for n, how in enumerate(hows) if how == "summarized"]
        assert 2 <= len(summarized) <= 4, hows
        first = summarized[0]
        assert hows[:first] == [None] * first
        assert set(hows[first + 1:]) <= {"reused", "summarized"}, hows
        # The refusal was the referee's context-overflow answer (the provider's real body
        # for the style), and the gateway recovered from it by compacting.
        refusals = [r for r in ref.requests if r.status is not None and r.status >= 400]
        assert len(refusals) == 1 and refusals[0].situation == "i"
        assert s.replies[first].headers["x-gateway-recovery"] == "compact"
        assert all("x-gateway-recovery" not in s.replies[n].headers for n in summarized[1:])
        # Each of the eight answers came from one accepted upstream request.
        assert len(accepted(chat_calls(ref))) == 8


async def test_compacted_request_has_the_spec_shape_and_is_reused_byte_for_byte(
    gateway_factory: GatewayFactory,
) -> None:
    async with Referee(rules="openai", style="openai", context_window=REFEREE_WINDOW) as ref:
        gw = await gateway_factory(demo_config(ref))
        s = Session(gw, session_id="shape-1")
        raw = None
        for i in range(8):
            mark = len(ref.requests)
            raw = await s.send(agent_turn(i))
            if compaction_header(raw) is not None:
                break
        assert raw is not None
        how, before, after = compaction_header(raw) or ("", 0, 0)
        assert how == "summarized" and 0 < after < before
        assert raw.headers["x-gateway-recovery"] == "compact"
        calls = chat_calls(ref, mark)
        assert [c.status for c in calls] == [400, 200]  # overflow, then the compacted request
        compacted = calls[1]
        original = s.history[:-1]  # what the client sent (without the answer it got)
        assert compacted.json()["messages"] != original
        kept, summary = assert_compacted_shape(compacted.json()["messages"], original,
                                               "shape-1")
        assert len(kept) == i + 1
        assert "referee: accepted 2 messages" in summary["content"]  # the summary call's text
        assert summary_calls(ref, mark), "a summary was asked for"
        assert compacted.header("Authorization") is not None
        stored_len = len(compacted.json()["messages"])
        prefix = messages_prefix_bytes(compacted, stored_len)

        # The next requests reuse the stored compaction: no summary call, same bytes.
        for j in range(2):
            mark = len(ref.requests)
            raw = await s.send([user(f"And now follow-up question {j}?")])
            assert compaction_header(raw) == ("reused", before, after)
            assert summary_calls(ref, mark) == []
            (sent,) = chat_calls(ref, mark)
            assert sent.status == 200
            assert messages_prefix_bytes(sent, stored_len) == prefix
            tail = sent.json()["messages"][stored_len:]
            assert tail == s.history[len(original):-1]  # what came after, unchanged


async def test_block_ratio_compacts_before_forwarding(gateway_factory: GatewayFactory) -> None:
    # The gateway knows the window (2,000 tokens, tiktoken): at the block ratio it compacts
    # first, so the upstream (which would refuse past 4,000 estimated tokens) never refuses.
    async with Referee(rules="openai", style="openai", context_window=4000) as ref:
        gw = await gateway_factory(demo_config(ref, window=2000,
                                               compaction={"trigger_ratio": 0.85}))
        s = Session(gw, session_id="block-1")
        hows = []
        for i in range(6):
            raw = await s.send(agent_turn(i))
            header = compaction_header(raw)
            hows.append(header[0] if header else None)
            if header and header[0] == "summarized":
                assert raw.headers["x-gateway-attempts"] == "1"  # no overflow, no ladder
                assert "x-gateway-recovery" not in raw.headers
                assert raw.headers["x-gateway-context"].split(";")[0] == "comfortable"  # as sent
        assert "summarized" in hows
        assert all(r.status == 200 for r in ref.requests), "no overflow reached the upstream"
        compacted = chat_calls(ref)[hows.index("summarized")]
        assert compacted.json()["messages"][-2]["content"].startswith(SUMMARY_PREFIX)


async def test_a_user_message_larger_than_the_window_is_kept_in_part(
    gateway_factory: GatewayFactory,
) -> None:
    # The user's own message alone exceeds the window. Compaction keeps real user input
    # verbatim within a budget sized from the window the provider stated (not the
    # configured 100,000), so part of it is kept with an elision note, and the request is
    # answered instead of refused.
    huge = "Please keep all of this in mind: " + "the quick brown fox jumps. " * 300
    async with Referee(rules="openai", style="openai", context_window=REFEREE_WINDOW) as ref:
        gw = await gateway_factory(demo_config(ref))
        s = Session(gw, session_id="breaker-1")
        raw = await s.send([user(huge), *agent_turn(0)[1:]])
        header = compaction_header(raw)
        assert header is not None and header[0] == "summarized"
        assert raw.headers["x-gateway-recovery"] == "compact"
        assert len(ref.requests) < 20  # bounded: no endless compaction loop
        sent = accepted(chat_calls(ref))[-1].json()["messages"]
        texts = [str(m["content"]) for m in sent]
        assert huge not in texts
        assert any("were left out here" in t for t in texts)  # the elision note
        assert any("the quick brown fox jumps." in t for t in texts)  # what fits is kept
        assert sent[-2]["content"].startswith(SUMMARY_PREFIX)


async def test_blocking_compaction_that_fails_falls_back_to_trimming(
    gateway_factory: GatewayFactory,
) -> None:
    async with Referee(rules="openai", style="openai") as ref:
        gw = await gateway_factory(demo_config(ref, window=1000))
        s = Session(gw, session_id="fails-1")
        s.history.extend([*agent_turn(0), *agent_turn(1)])  # about 1,500 tokens
        ref.script(unauthorized("openai", "sk-revoked-key-0000"))  # the summary call
        raw = await s.send()
        assert raw.headers["x-gateway-compaction"].startswith("trimmed; ")
        assert "summary call" in raw.headers["x-gateway-compaction-summary-failed"]
        assert [is_summary_call(r) for r in ref.requests] == [True, False]
        sent = ref.requests[-1].json()["messages"]
        # The task (first user message) and the current turn stay; a note says what went.
        assert sent[1] == s.history[1]
        assert "earlier messages of this conversation were omitted" in sent[2]["content"]
        assert sent[-1]["role"] == "tool" and sent[-1]["tool_call_id"] == "call_1"


async def test_blocking_compaction_that_cannot_trim_returns_a_clear_overflow_error(
    gateway_factory: GatewayFactory,
) -> None:
    async with Referee(rules="openai", style="openai") as ref:
        gw = await gateway_factory(demo_config(ref, window=1000))
        s = Session(gw, session_id="fails-2")
        s.history.append(user(file_body(0, 60)))  # one huge message: nothing to drop
        ref.script(unauthorized("openai", "sk-revoked-key-0000"))  # the summary call
        with pytest.raises(openai.BadRequestError) as info:
            await s.send()
        response = info.value.response
        error = response.json()["error"]
        assert error["code"] == "context_length_exceeded"
        assert "context window of 1000" in error["message"]
        assert "compaction was tried and failed" in error["message"]
        assert "summary call" in error["message"]
        assert "summary call" in response.headers["x-gateway-compaction-failed"]
        assert [is_summary_call(r) for r in ref.requests] == [True]  # nothing else was sent


async def test_streamed_request_is_compacted_too(gateway_factory: GatewayFactory) -> None:
    async with Referee(rules="openai", style="openai", context_window=REFEREE_WINDOW) as ref:
        gw = await gateway_factory(demo_config(ref))
        s = Session(gw, session_id="stream-1")
        i = 0
        while estimate_tokens([*s.history, *agent_turn(i)]) <= REFEREE_WINDOW:
            await s.send(agent_turn(i))
            i += 1
        s.history.extend(agent_turn(i))
        async with s.client() as c:
            raw = await c.chat.completions.with_raw_response.create(
                model="demo", messages=s.history, stream=True,
                extra_headers={"x-session-id": "stream-1"})
            text = "".join([chunk.choices[0].delta.content or "" async for chunk in raw.parse()
                            if chunk.choices])
        assert text.startswith("referee: accepted")
        header = compaction_header(raw)
        assert header is not None and header[0] == "summarized"
        assert ref.requests[-1].json()["stream"] is True
        assert not any(r.json().get("stream") for r in summary_calls(ref))


async def test_sessions_without_an_id_are_recognized_by_their_start(
    gateway_factory: GatewayFactory,
) -> None:
    async with Referee(rules="openai", style="openai", context_window=REFEREE_WINDOW) as ref:
        gw = await gateway_factory(demo_config(ref))
        s = Session(gw, session_id=None)
        for i in range(8):
            raw = await s.send(agent_turn(i))
            if compaction_header(raw) is not None:
                break
        compacted = accepted(chat_calls(ref))[-1]
        summary = compacted.json()["messages"][-2]["content"]
        assert "session `fp-" in summary
        assert "prompt_cache_key" not in compacted.json()
        mark = len(ref.requests)
        raw = await s.send([user("Next?")])
        assert (compaction_header(raw) or ("",))[0] == "reused"
        assert summary_calls(ref, mark) == []
