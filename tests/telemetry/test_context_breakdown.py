"""What is in the window (issue 26): every model request's input tokens by source, the
window used and the budget level, in the ``x-gateway-context`` header, on the request span,
in the access log and in ``/metrics``, on the three wires."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import ClientError
from gateway.telemetry.context import (
    UNKNOWN_IMAGE_TOKENS,
    ContextMemo,
    EdgeTurn,
    context_breakdown,
    count_messages,
)
from gateway.wires.chat_validation import read_chat_body
from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import assistant, image_part, system, text_part, tool, tool_call, user
from tests.fakes.three_wires import ThreeWires, wire_models
from tests.projection.histories import broken_histories, valid_histories
from tests.telemetry.promtext import scrape

INSTRUCTIONS = "Follow the house rules to the letter. " * 200  # 7,600 characters
TOOL_SCHEMA = {"type": "object", "properties": {
    "path": {"type": "string", "description": "The file to read, relative to the root. " * 20}}}
# (client wire, model): chat upstream for all three wires, native upstreams for two.
CASES = [("chat", "chat"), ("responses", "chat"), ("responses", "resp"),
         ("anthropic", "chat"), ("anthropic", "claude")]


def parse_header(value: str) -> tuple[str, dict[str, float]]:
    """``level; used=0.42; system=1903; ...`` as (level, numbers)."""
    level, *pairs = [p.strip() for p in value.split(";")]
    return level, {k: float(v) for k, v in (p.split("=") for p in pairs)}


def test_breakdown_splits_the_window_by_source() -> None:
    messages = [system(INSTRUCTIONS), user("read the file"),
                assistant(None, tool_calls=[tool_call("c1", "read", {"path": "a"})]),
                tool("c1", "x = 1\n" * 400),
                user([text_part("and this picture"), image_part()]),
                assistant("it shows a cat"), user("now the last step")]
    body = {"tools": [{"type": "function", "function": {"name": "read",
                                                        "parameters": TOOL_SCHEMA}}]}
    got = context_breakdown(messages, body, frozen=0, level="comfortable", used=0.3)
    assert 1_900 <= got.system <= 1_910  # 7,600 characters at four a token, plus overhead
    assert got.tool_results == 600 + 3  # 2,400 characters
    assert got.images == UNKNOWN_IMAGE_TOKENS  # the picture's base64 is never read as text
    assert got.history > got.tool_results + got.images
    assert got.turn == 3 + 5  # "now the last step" alone: the new turn
    assert 200 < got.tools < 300
    assert got.total == got.system + got.tools + got.history + got.turn
    level, numbers = parse_header(got.header())
    assert level == "comfortable" and numbers["used"] == 0.3
    assert numbers["system"] == got.system and numbers["turn"] == got.turn


def test_a_stored_compaction_counts_as_the_summary() -> None:
    summary = user("<summary> what happened so far " * 50)
    messages = [system("be terse"), summary, assistant("ok"), user("go on")]
    got = context_breakdown(messages, {}, frozen=2)
    assert got.summary == got.history - context_breakdown([assistant("ok")], {}).history
    assert got.summary > 350


def test_a_session_turn_counts_as_a_cold_count_would() -> None:
    """Turns reuse the previous turn's sums over the very same message objects; an edited
    earlier message (a new object) is counted again."""
    memo = ContextMemo()
    turn = [system(INSTRUCTIONS), user("read a"), tool("c1", "x" * 400), assistant("ok"),
            user("next")]
    assert memo.breakdown("s", turn, {}) == context_breakdown(turn, {})
    longer = [*turn, assistant("done"), user("and b" * 50)]
    assert memo.breakdown("s", longer, {}) == context_breakdown(longer, {})
    edited = [longer[0], user("read a and c" * 40), *longer[2:]]
    assert memo.breakdown("s", edited, {}) == context_breakdown(edited, {})
    assert memo.breakdown("s", edited[:3], {}) == context_breakdown(edited[:3], {})


@settings(max_examples=150, deadline=None)
@given(history=valid_histories() | broken_histories(), data=st.data())
def test_turn_after_turn_the_memo_counts_as_a_cold_count_would(
        history: list[dict[str, Any]], data: st.DataObject) -> None:
    # Growing turns over the same objects, an occasional edited (copied) message, a stored
    # compaction's frozen prefix that may move: the memo agrees with a count from scratch.
    # With the edge's word that a turn was read over the previous one, or without it.
    memo = ContextMemo()
    messages: list[dict[str, Any]] = []
    token: object | None = None
    for cut in sorted(data.draw(st.lists(st.integers(0, len(history)), min_size=1,
                                         max_size=5))):
        before, messages = messages, messages + history[len(messages):cut]
        edited = bool(messages) and data.draw(st.booleans())
        if edited:
            at = data.draw(st.integers(0, len(messages) - 1))
            messages = [*messages[:at], dict(messages[at]), *messages[at + 1:]]
        edge = None
        if data.draw(st.booleans()):
            edge = EdgeTurn(object(), None if edited else token, len(before))
            if data.draw(st.booleans()):
                # What validating the body counted on the way (the added messages of a turn
                # read over the previous one, else all of them).
                checked = len(before) if edge.extends is not None else 0
                try:
                    counted = read_chat_body({"model": "m", "messages": messages},
                                             checked=checked, count=True)[1]
                except ClientError:
                    counted = None
                edge = EdgeTurn(edge.turn, edge.extends, edge.reused, counted)
        token = edge.turn if edge is not None else None
        frozen = data.draw(st.integers(0, len(messages)))
        assert memo.breakdown("s", messages, {}, frozen=frozen, edge=edge) == (
            context_breakdown(messages, {}, frozen=frozen))


@settings(max_examples=150, deadline=None)
@given(history=valid_histories() | broken_histories(), data=st.data())
def test_a_history_counted_as_it_was_read_whole_breaks_down_as_a_cold_count(
        history: list[dict[str, Any]], data: st.DataObject) -> None:
    # The native wires count a history read whole while reading it; the breakdown then
    # walks none of it, and says what a count from scratch says (a previous turn of the
    # session remembered or not, a stored compaction's frozen prefix or not).
    memo = ContextMemo()
    if data.draw(st.booleans()):
        memo.breakdown("s", history[:data.draw(st.integers(0, len(history)))], {})
    frozen = data.draw(st.integers(0, len(history)))
    edge = EdgeTurn(object(), None, 0, count_messages(history))
    assert memo.breakdown("s", history, {}, frozen=frozen, edge=edge) == (
        context_breakdown(history, {}, frozen=frozen))


@pytest.fixture
async def upstream() -> AsyncIterator[ThreeWires]:
    async with ThreeWires() as up:
        yield up


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, upstream: ThreeWires) -> RunningGateway:
    return await gateway_factory({"model_list": wire_models(upstream.base_url)})  # on by default


async def send(gw: RunningGateway, wire: str, model: str, stream: bool) -> str:
    """One agent turn (instructions, a tool schema, a tool exchange, a new question) through
    the wire's official SDK; the ``x-gateway-context`` header the client got."""
    if wire == "anthropic":
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="k",
                                            max_retries=0) as a:
            raw = await a.messages.with_raw_response.create(
                model=model, max_tokens=50, system=INSTRUCTIONS, stream=stream,
                tools=[{"name": "read", "input_schema": TOOL_SCHEMA}],
                messages=[{"role": "user", "content": "read a"},
                          {"role": "assistant", "content": [{"type": "tool_use", "id": "t1",
                                                             "name": "read",
                                                             "input": {"path": "a"}}]},
                          {"role": "user", "content": [{"type": "tool_result",
                                                        "tool_use_id": "t1",
                                                        "content": "x = 1\n" * 400}]},
                          {"role": "assistant", "content": "read it"},
                          {"role": "user", "content": "now the last step"}])
            await _drain(raw.parse())
            return raw.headers["x-gateway-context"]
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
        if wire == "chat":
            chat = await c.chat.completions.with_raw_response.create(
                model=model, stream=stream,
                tools=[{"type": "function", "function": {"name": "read",
                                                         "parameters": TOOL_SCHEMA}}],
                messages=[system(INSTRUCTIONS), user("read a"),  # type: ignore[list-item]
                          assistant(None, tool_calls=[tool_call("t1", "read", {"path": "a"})]),
                          tool("t1", "x = 1\n" * 400), assistant("read it"),
                          user("now the last step")])
            await _drain(chat.parse())
            return chat.headers["x-gateway-context"]
        resp = await c.responses.with_raw_response.create(
            model=model, instructions=INSTRUCTIONS, stream=stream,
            tools=[{"type": "function", "name": "read", "parameters": TOOL_SCHEMA,
                    "strict": False}],
            input=[{"role": "user", "content": "read a"},
                   {"type": "function_call", "call_id": "t1", "name": "read",
                    "arguments": '{"path":"a"}'},
                   {"type": "function_call_output", "call_id": "t1",
                    "output": "x = 1\n" * 400},
                   {"role": "assistant", "content": "read it"},
                   {"role": "user", "content": "now the last step"}])
        await _drain(resp.parse())
        return resp.headers["x-gateway-context"]


async def _drain(answer: Any) -> None:
    """Read a streamed answer to its end (the SDKs' ``parse`` may be a coroutine)."""
    if inspect.isawaitable(answer):
        answer = await answer
    if hasattr(answer, "__aiter__"):
        async for _ in answer:
            pass


async def span_of(gw: RunningGateway, seen: int) -> dict[str, Any]:
    """The attributes of the newest request span once there are more than ``seen``."""
    for _ in range(500):
        spans = [s for s in gw.spans.get_finished_spans() if s.name == "gateway.chat"]
        if len(spans) > seen:
            return dict(spans[-1].attributes or {})
        await asyncio.sleep(0.01)
    raise AssertionError("no request span")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_every_wire_reports_the_breakdown(
    gw: RunningGateway, stream: bool, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    for wire, model in CASES:
        before = await scrape(gw.root)
        seen = len([s for s in gw.spans.get_finished_spans() if s.name == "gateway.chat"])
        level, numbers = parse_header(await send(gw, wire, model, stream))
        where = (wire, model, stream)
        # The level word first, as before: clients reading only the level keep working.
        assert level == "comfortable", where
        assert 0 < numbers["used"] < 0.6, where
        assert 1_900 <= numbers["system"] <= 1_920, where  # the instructions
        assert numbers["tools"] > 200, where
        assert numbers["tool_results"] >= 600, where
        assert numbers["history"] >= numbers["tool_results"], where
        assert 0 < numbers["turn"] < 20, where  # "now the last step"
        attrs = await span_of(gw, seen)
        assert attrs["gateway.context.level"] == "comfortable", where
        assert attrs["gateway.context.system_tokens"] == numbers["system"], where
        assert attrs["gateway.context.used"] == pytest.approx(numbers["used"], abs=0.01)
        after = await scrape(gw.root)
        for source in ("system", "tools", "history", "turn"):
            grew = (after.total("gateway_context_tokens_sum", model=model, source=source)
                    - before.total("gateway_context_tokens_sum", model=model, source=source))
            assert grew == numbers[source], (where, source)
        assert (after.total("gateway_context_level_total", model=model, level="comfortable")
                - before.total("gateway_context_level_total", model=model,
                               level="comfortable")) == 1, where
        assert (after.total("gateway_context_used_ratio_count", model=model)
                - before.total("gateway_context_used_ratio_count", model=model)) == 1, where
    lines = [r.access for r in caplog.records  # type: ignore[attr-defined]
             if r.name == "gateway.access" and getattr(r, "access", {}).get("wire")]
    assert [line["context"] for line in lines] == ["comfortable"] * len(CASES)
    assert all(1_900 <= line["context_tokens"]["system"] <= 1_920 for line in lines)


async def test_turned_off_the_header_is_the_level_and_nothing_is_counted(
        gateway_factory: GatewayFactory, upstream: ThreeWires) -> None:
    gw = await gateway_factory({"model_list": wire_models(upstream.base_url),
                                "gateway": {"telemetry": {"context_report": False}}})
    for wire, model in CASES:
        assert await send(gw, wire, model, False) == "comfortable"
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_context_tokens_count") == 0
    assert metrics.total("gateway_prefix_turns_total") == 0
