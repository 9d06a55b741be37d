"""The driver as a unit: its ladder, compaction as a step, deadlines, against an upstream
function (``FunctionProvider``), with no server and no sockets.

Each test runs one request through ``Driver.run`` and reads the Flow: the attempts sent in
order (step, structure, media, status, verdict), the ladder steps, the compactions, the
give-up. Backoff waits are the upstream's own ``Retry-After`` of a few milliseconds, so
every wait is the value the test chose (no jitter), and no assertion times anything.
"""

from __future__ import annotations

import asyncio
import base64
import io
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.trace import NoOpTracer
from PIL import Image

from gateway.compaction.summary_request import DEFAULT_INSTRUCTIONS
from gateway.config import parse_config
from gateway.flow.driver import Driver
from gateway.flow.flow import ChatRequest, Flow
from gateway.providers.base import UpstreamCall
from gateway.providers.function import Answer, FunctionProvider, completion, refusal
from gateway.providers.openai_compat import HttpPool
from gateway.routing import build_route
from tests.factories import assistant, tool, tool_call, user

Handler = Callable[[UpstreamCall], Any]


@dataclass
class Harness:
    """A driver whose only model ``m`` is answered by ``upstream``."""

    driver: Driver
    upstream: FunctionProvider

    def request(self, messages: list[dict[str, Any]], *, stream: bool = False,
                session: str | None = None) -> ChatRequest:
        body = {"model": "m", "messages": messages, "stream": stream}
        return ChatRequest(body=body, raw=orjson.dumps(body), messages=messages,
                           route=self.driver.routes["m"], stream=stream, request_id="req-1",
                           session_id=session)

    async def run(self, messages: list[dict[str, Any]], **kw: Any) -> Flow:
        return await self.driver.run(self.request(messages, **kw))

    def chat_calls(self) -> list[UpstreamCall]:
        return [c for c in self.upstream.calls if not is_summary(c)]


def is_summary(call: UpstreamCall) -> bool:
    messages = call.body.get("messages") or [{}]
    return bool(messages) and messages[0].get("content") == DEFAULT_INSTRUCTIONS


def plan(flow: Flow) -> list[tuple[str | None, str, str, int | None, str | None]]:
    """The chat attempts as (step, structure, media, status, verdict)."""
    return [(a.step, a.structure, a.media, a.status, a.verdict) for a in flow.chat_attempts]


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    pools: list[HttpPool] = []
    drivers: list[Driver] = []

    async def make(handler: Handler, *, compaction: bool = False, window: int | None = None,
                   recall: bool = False, **recovery: Any) -> Harness:
        info = {"max_input_tokens": window} if window else {}
        config = parse_config({
            "model_list": [{"model_name": "m", "model_info": info, "litellm_params": {
                "model": "openai/m-upstream", "api_base": "http://127.0.0.1:9/v1",
                "api_key": "k"}}],
            "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002, **recovery},
            "compaction": {"enabled": compaction, "recall": recall},
            "sessions": {"data_dir": str(tmp_path / "data")},
        })
        pool = HttpPool()
        pools.append(pool)
        upstream = FunctionProvider(handler, name="m")
        route = replace(build_route(config.model_list[0], config, pool), provider=upstream)
        driver = Driver(config, {"m": route}, NoOpTracer(), pool)
        await driver.start()
        drivers.append(driver)
        return Harness(driver, upstream)

    yield make
    for driver in drivers:
        await driver.close()
    for pool in pools:
        await pool.close()


def answers(*replies: Answer) -> Handler:
    """An upstream answering the chat calls with ``replies`` in order (then the last one)."""
    queue = list(replies)

    def handler(call: UpstreamCall) -> Answer:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return handler


BROKEN = [user("list the files"), assistant(None, tool_calls=[tool_call("call_1", "ls")]),
          user("never mind"), user("say hi")]  # a lost result; two user turns in a row
ROLE_ORDER = refusal(400, "messages: roles must alternate between \"user\" and \"assistant\"")


async def test_a_valid_request_is_one_attempt_sent_as_the_client_sent_it(harness: Any) -> None:
    h = await harness(answers(completion("hello")))
    messages = [user("hi")]
    flow = await h.run(messages)
    assert plan(flow) == [(None, "default", "original", 200, "ok")]
    assert flow.steps == () and flow.give_up is None and flow.response is not None
    assert orjson.loads(h.upstream.calls[0].raw or b"")["messages"] == messages


async def test_structural_refusal_resends_strictly_projected(harness: Any) -> None:
    def upstream(call: UpstreamCall) -> Answer:
        roles = [m["role"] for m in call.body["messages"]]
        return ROLE_ORDER if ["user", "user"] in [roles[i:i + 2] for i in range(len(roles))] \
            else completion("hi")

    h = await harness(upstream)
    flow = await h.run(BROKEN)
    assert plan(flow) == [(None, "default", "original", 400, "structural"),
                          ("strict", "strict", "original", 200, "ok")]
    assert flow.steps == ("strict",) and flow.strict
    kinds = [a.kind for a in flow.projection.anomalies] if flow.projection else []
    assert "tool_result_synthesized" in kinds and "user_messages_merged" in kinds


async def test_a_strict_projection_that_changes_nothing_is_not_sent(harness: Any) -> None:
    h = await harness(answers(ROLE_ORDER))
    flow = await h.run([user("hi")])  # already strict-valid: nothing to resend
    assert plan(flow) == [(None, "default", "original", 400, "structural")]
    assert flow.give_up is not None and "changed nothing" in flow.give_up.reason
    assert len(h.upstream.calls) == 1


def png_data_url(side: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), (200, 30, 30)).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


async def test_an_image_refusal_degrades_then_strips_the_images(harness: Any) -> None:
    bad_image = refusal(400, "Invalid image: the image could not be processed.",
                        code="invalid_image")
    h = await harness(answers(bad_image, bad_image, completion("no image seen")))
    flow = await h.run([{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": png_data_url(3000)}}]}])
    assert plan(flow) == [(None, "default", "original", 400, "media"),
                          ("media=degraded", "default", "degraded", 400, "media"),
                          ("media=strip", "default", "strip", 200, "ok")]
    sent = [c.body["messages"][0]["content"] for c in h.upstream.calls]
    assert len(sent[1][1]["image_url"]["url"]) < len(sent[0][1]["image_url"]["url"])
    assert all(part.get("type") != "image_url" for part in sent[2])


def overflow(window: int = 2048) -> Answer:
    return refusal(400, f"This model's maximum context length is {window} tokens. However, "
                   "your messages resulted in 9000 tokens. Please reduce the length of the "
                   "messages.", code="context_length_exceeded", param="messages")


def agent_history(turns: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [user("refactor the parser")]
    for i in range(turns):
        history += [assistant(None, tool_calls=[tool_call(f"c{i}", "read", {"path": f"{i}.py"})]),
                    tool(f"c{i}", "\n".join(f"line {i}.{n} of the parser" for n in range(60)))]
    return [*history, user("now add the tests")]


@pytest.mark.parametrize(("window", "asks_the_store"), [(1_000_000, False), (4_000, True)])
async def test_a_new_session_asks_the_session_store_only_near_the_trigger(
        harness: Any, window: int, asks_the_store: bool) -> None:
    # A stored compaction replaces the start of a history that reached the trigger: one far
    # below it is sent whole either way, without a store round trip per new session.
    h = await harness(answers(completion("ok")), compaction=True, window=window)
    assert h.driver.compactor is not None
    store = h.driver.compactor.store.inner  # the SQLite store behind the outage guard
    asked: list[str] = []
    has_records = store.has_records

    async def counted(session_id: str) -> bool:
        asked.append(session_id)
        return bool(await has_records(session_id))

    store.has_records = counted
    flow = await h.run(agent_history(8), session="s-new")
    assert flow.response is not None and flow.give_up is None
    assert bool(asked) is asks_the_store, asked


async def test_overflow_compacts_as_a_ladder_step_and_resends(harness: Any) -> None:
    summaries: list[UpstreamCall] = []

    def upstream(call: UpstreamCall) -> Answer:
        if is_summary(call):
            summaries.append(call)
            return completion("## Task\nRefactor the parser, then add tests.")
        tools = [m for m in call.body["messages"] if m["role"] == "tool"]
        return overflow() if tools else completion("done")

    h = await harness(upstream, compaction=True)
    flow = await h.run(agent_history(8), session="s-overflow")
    assert plan(flow) == [(None, "default", "original", 400, "overflow"),
                          ("compact", "default", "original", 200, "ok")]
    assert flow.steps == ("compact",)
    assert [a.kind for a in flow.attempts] == ["chat", "summary", "chat"]  # in order
    assert flow.compaction is not None and flow.compaction.how == "summarized"
    assert len(summaries) == 1
    resent = h.chat_calls()[1].body["messages"]
    assert resent[0] == user("refactor the parser") and resent[-1]["role"] == "user"
    assert any("Refactor the parser" in str(m.get("content")) for m in resent)


async def test_a_compaction_that_outlives_the_deadline_gives_up_with_the_reason(
        harness: Any) -> None:
    never = asyncio.Event()
    flows: list[Flow] = []

    async def upstream(call: UpstreamCall) -> Answer:
        if is_summary(call):
            await never.wait()  # the summarizer never answers
        flows[0].deadline = time.monotonic()  # the overflow arrives as the deadline passes
        return overflow()

    h = await harness(upstream, compaction=True)
    flows.append(h.driver.new_flow(h.request(agent_history(8), session="s-late")))
    flow = await h.driver.run(flows[0])
    assert plan(flow) == [(None, "default", "original", 400, "overflow")]  # nothing resent
    assert flow.give_up is not None
    assert flow.give_up.reason.startswith("deadline: compaction did not finish")
    assert flow.compaction_failed is not None and flow.compaction_failed.startswith("deadline")
    assert flow.give_up.failure.status == 400  # the overflow the client gets, with the reason


async def test_a_history_too_big_to_send_is_not_sent_once_the_deadline_has_passed(
        harness: Any) -> None:
    h = await harness(answers(completion("never asked")), compaction=True, window=2048)
    flow = h.driver.new_flow(h.request(agent_history(8), session="s-spent"))
    flow.deadline = time.monotonic()  # spent before the compaction it needs could start
    await h.driver.run(flow)
    assert flow.chat_attempts == [] and h.chat_calls() == []
    assert flow.refusal is not None
    assert (flow.refusal.status, flow.refusal.code) == (504, "deadline_exceeded")
    assert flow.compaction_failed is not None and flow.compaction_failed.startswith("deadline")


async def test_recall_calls_are_answered_and_the_model_asked_again(harness: Any) -> None:
    def upstream(call: UpstreamCall) -> Answer:
        messages = call.body["messages"]
        if is_summary(call):
            return completion("## Task\nRefactor the parser, then add tests.")
        if any(m["role"] == "tool" and m["tool_call_id"].startswith("c") for m in messages):
            return overflow()  # the original history never fits
        if messages[-1]["role"] == "tool":  # our recall result came back
            return completion("line 3.7 says: " + messages[-1]["content"][:40])
        names = [t["function"]["name"] for t in call.body.get("tools", [])]
        assert names == ["context_recall"]  # offered once the history carries a compaction
        return completion(None, tool_calls=[{
            "id": "r1", "type": "function",
            "function": {"name": "context_recall", "arguments": '{"query": "line 3.7 "}'}}])

    h = await harness(upstream, compaction=True, recall=True)
    flow = await h.run(agent_history(8), session="s-recall")
    assert [(a.kind, a.step, a.status) for a in flow.attempts] == [
        ("chat", None, 400), ("summary", None, 200), ("chat", "compact", 200),
        ("recall", "recall", 200)]
    assert flow.recall is not None and flow.recall.calls == 1
    assert flow.response is not None
    answer = orjson.loads(b"".join([c async for c in flow.response.chunks()]))
    assert answer["choices"][0]["message"]["content"].startswith("line 3.7 says:")
    assert "line 3.7 of the parser" in h.upstream.calls[-1].body["messages"][-1]["content"]
    # The follow-up is an attempt like any other: bounded by the request's deadline.
    assert h.upstream.calls[-1].deadline == flow.deadline


async def test_overflow_without_compaction_gives_up_with_the_provider_refusal(
        harness: Any) -> None:
    h = await harness(answers(overflow()), compaction=False)
    flow = await h.run(agent_history(2))
    assert plan(flow) == [(None, "default", "original", 400, "overflow")]
    assert flow.give_up is not None and flow.give_up.reason.startswith("overflow:")
    assert flow.status == 400


def busy(retry_after: float) -> Answer:
    return refusal(503, "The server is overloaded", type="server_error",
                   retry_after=retry_after)


async def test_transient_refusals_are_retried_after_retry_after(harness: Any) -> None:
    h = await harness(answers(busy(0.003), busy(0.004), completion("hi")))
    flow = await h.run([user("hi")])
    assert plan(flow) == [(None, "default", "original", 503, "transient"),
                          ("retry", "default", "original", 503, "transient"),
                          ("retry", "default", "original", 200, "ok")]
    assert flow.steps == ("retry", "retry")
    assert flow.backoff == pytest.approx(0.007)  # exactly what the upstream asked for
    assert len({c.raw for c in h.upstream.calls}) == 1  # the same bytes each time


async def test_transient_retries_are_bounded_by_count(harness: Any) -> None:
    h = await harness(answers(busy(0.001)), max_transient_retries=2)
    flow = await h.run([user("hi")])
    assert [step for step, *_ in plan(flow)] == [None, "retry", "retry"]
    assert flow.give_up is not None and flow.give_up.reason == "transient: 2 retries used"
    assert flow.status == 503


async def test_a_retry_after_past_the_deadline_gives_up_without_waiting(harness: Any) -> None:
    h = await harness(answers(busy(20.0)), deadline=5, max_retry_after=30)
    flow = await h.run([user("hi")])
    assert len(flow.chat_attempts) == 1 and flow.backoff == 0.0
    assert flow.give_up is not None and flow.give_up.reason.startswith("deadline: waiting 20")


async def test_the_deadline_bounds_an_upstream_that_never_answers(harness: Any) -> None:
    never = asyncio.Event()

    async def upstream(call: UpstreamCall) -> Answer:
        await never.wait()
        return completion("late")

    h = await harness(upstream, deadline=60)
    req = h.request([user("hi")])
    flow = h.driver.new_flow(req)
    flow.deadline = time.monotonic()  # the request's deadline is spent: no wait may start
    await h.driver.run(flow)
    assert {(a.status, a.verdict) for a in flow.chat_attempts} == {(504, "transient")}
    assert flow.response is None and flow.give_up is not None
    assert flow.give_up.failure.status == 504 and "timed out" in flow.give_up.failure.message


async def test_a_fatal_refusal_is_not_retried(harness: Any) -> None:
    h = await harness(answers(refusal(401, "Incorrect API key provided",
                                      code="invalid_api_key")))
    flow = await h.run([user("hi")])
    assert plan(flow) == [(None, "default", "original", 401, "fatal")]
    assert flow.give_up is not None and flow.give_up.reason.startswith("fatal")


async def test_a_stream_answer_is_handed_over_unread(harness: Any) -> None:
    h = await harness(answers(busy(0.001), completion("streamed")))
    flow = await h.run([user("hi")], stream=True)
    assert flow.response is not None and flow.response.content_type == "text/event-stream"
    body = b"".join([chunk async for chunk in flow.response.chunks()])
    assert b'"content":"streamed"' in body and body.endswith(b"data: [DONE]\n\n")
    assert all(call.stream for call in h.upstream.calls)


async def test_a_give_up_after_retrying_tells_sdks_not_to_retry_again(harness: Any) -> None:
    from gateway.flow import render

    h = await harness(answers(busy(0.001)), max_transient_retries=2)
    retried = await h.run([user("hi")])
    assert render.headers(retried)["x-should-retry"] == "false"
    h = await harness(answers(refusal(401, "Incorrect API key provided")))
    fatal = await h.run([user("hi")])  # not retried by the gateway: the client decides
    assert fatal.give_up is not None and "x-should-retry" not in render.headers(fatal)
