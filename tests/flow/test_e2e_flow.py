"""What the Flow records is what clients, traces and metrics see: summary calls are upstream
attempts like the others; a give-up lists the chat attempts with their verdicts."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest

from gateway.referee import Referee
from tests.compaction.conftest import (
    Session,
    agent_turn,
    compaction_header,
    demo_config,
    overflow_reply,
    summary_calls,
)
from tests.conftest import GatewayFactory
from tests.telemetry.promtext import scrape


@pytest.fixture
async def ref() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai") as referee:
        yield referee


async def test_summary_calls_count_as_upstream_attempts(
    gateway_factory: GatewayFactory, ref: Referee
) -> None:
    gw = await gateway_factory(demo_config(ref))
    s = Session(gw, session_id="flow-1")
    for i in range(3):
        await s.send(agent_turn(i))
    ref.script(overflow_reply())  # the next request overflows: compact, then resend
    raw = await s.send(agent_turn(3))
    assert compaction_header(raw) is not None and compaction_header(raw)[0] == "summarized"
    assert raw.headers["x-gateway-attempts"] == "2"  # the client's request was sent twice
    assert raw.headers["x-gateway-recovery"] == "compact"
    assert len(summary_calls(ref)) == 1
    m = await scrape(gw.root)
    # 3 answered turns + the compacted resend + the summary call.
    assert m.total("gateway_upstream_attempts_total", model="demo", outcome="ok") == 5
    assert m.total("gateway_upstream_attempts_total", model="demo", step="summary") == 1
    assert m.total("gateway_upstream_attempts_total", model="demo", outcome="overflow") == 1
    assert m.total("gateway_compactions_total", how="summarized") == 1
    assert m.total("gateway_recovery_steps_total", step="compact") == 1


async def test_a_give_up_lists_what_was_tried(
    gateway_factory: GatewayFactory, ref: Referee
) -> None:
    gw = await gateway_factory({**demo_config(ref), "compaction": {"enabled": False}})
    ref.script(overflow_reply())
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="demo", messages=[
                {"role": "user", "content": "hi"}])
    response = info.value.response
    body = response.json()
    assert body["error"]["code"] == "context_length_exceeded"  # the provider's own error
    assert body["gateway"]["attempts"] == [
        {"number": 1, "step": None, "structure": "default", "media": "original",
         "model": "demo", "deployment": "demo#1", "status": 400, "verdict": "overflow"}]
    assert body["gateway"]["gave_up"].startswith("overflow:")
    assert body["gateway"]["request_id"] == response.headers["x-request-id"]
    assert response.headers["x-gateway-attempts"] == "1"
    m = await scrape(gw.root)
    assert m.total("gateway_requests_total", model="demo", status="400") == 1
