"""Repairs are visible: span attributes and event, one log line per new combination."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest

from gateway.referee import Referee
from gateway.telemetry.repairs import REPAIRED_EVENT, REPAIRED_LOG
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import calls, tool, user
from tests.telemetry.promtext import scrape


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai") as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await gateway_factory({"model_list": [model_entry("demo", referee.base_url)]})


async def send(gw: RunningGateway, messages: list[dict[str, object]],
               session: str | None = None) -> None:
    headers = {"x-session-id": session} if session else {}
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
        await c.chat.completions.create(model="demo", messages=messages,  # type: ignore[arg-type]
                                        extra_headers=headers)


def repair_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if REPAIRED_LOG in r.getMessage()]


async def test_request_span_carries_repairs(gw: RunningGateway) -> None:
    await send(gw, [user("a"), tool("call_ghost"), user("b"), calls("call_1")])
    spans = {s.name: s for s in gw.spans.get_finished_spans()}
    chat = spans["gateway.chat"]
    attrs = dict(chat.attributes or {})
    assert attrs["gateway.repair.orphan_tool_result_dropped"] == 1
    # The users left adjacent by the drop are valid as sent: nothing merged.
    assert "gateway.repair.user_messages_merged" not in attrs
    events = [e for e in chat.events if e.name == REPAIRED_EVENT]
    assert len(events) == 1
    # The call at the tail is answered, but counted apart: it is not an alert.
    assert attrs["gateway.repair.trailing"] == 1
    assert "gateway.repair.tool_result_synthesized" not in attrs
    attempt = spans["gateway.attempt"]
    assert attempt.parent is not None and attempt.parent.span_id == chat.context.span_id
    assert dict(attempt.attributes or {})["gateway.upstream.status"] == 200


async def test_valid_request_has_no_repair_event(gw: RunningGateway) -> None:
    await send(gw, [user("fine")])
    chat = next(s for s in gw.spans.get_finished_spans() if s.name == "gateway.chat")
    assert not [e for e in chat.events if e.name == REPAIRED_EVENT]
    assert not any(k.startswith("gateway.repair.") for k in (chat.attributes or {}))


async def test_repeated_repairs_are_logged_once(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.repair")
    broken = [user("a"), tool("call_ghost")]
    for _ in range(3):
        await send(gw, broken, session="s1")
    logs = repair_logs(caplog)
    assert len(logs) == 1
    assert "orphan_tool_result_dropped=1" in logs[0]
    # A different combination is reported again, and so is the first one after it.
    await send(gw, [*broken, tool("call_ghost2")], session="s1")
    await send(gw, broken, session="s1")
    logs = repair_logs(caplog)
    assert len(logs) == 3
    assert "orphan_tool_result_dropped=2" in logs[1]
    # The span event is de-duplicated like the log line; the attributes are on every span.
    chats = [s for s in gw.spans.get_finished_spans() if s.name == "gateway.chat"]
    assert sum(1 for s in chats for e in s.events if e.name == REPAIRED_EVENT) == 3
    assert all("gateway.repair.orphan_tool_result_dropped" in (s.attributes or {})
               for s in chats)


async def test_a_trailing_synthesis_is_applied_but_not_an_alert(
    gw: RunningGateway, referee: Referee, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.repair")
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=[user("read it"), calls("call_1")])  # type: ignore[list-item]
    # Applied (the request must be valid) and listed as the change it is ...
    assert raw.headers["x-gateway-repairs"] == "tool_result_synthesized=1"
    assert referee.requests[-1].json()["messages"][-1]["tool_call_id"] == "call_1"
    # ... but no log line, no event, and its own metric label.
    assert repair_logs(caplog) == []
    chat = next(s for s in gw.spans.get_finished_spans() if s.name == "gateway.chat")
    assert not [e for e in chat.events if e.name == REPAIRED_EVENT]
    assert dict(chat.attributes or {})["gateway.repair.trailing"] == 1
    page = await scrape(gw.root)
    assert page.total("gateway_repairs_total", kind="tool_result_synthesized_trailing") == 1
    assert page.total("gateway_repairs_total", kind="tool_result_synthesized") == 0


async def test_the_dry_run_shows_the_trailing_synthesis(gw: RunningGateway) -> None:
    body = {"messages": [user("read it"), calls("call_1")]}
    async with aiohttp.ClientSession() as http, http.post(
            gw.root + "/v1/gateway/project", json=body) as resp:
        answer = await resp.json()
    assert answer["anomalies"] == [{"kind": "tool_result_synthesized", "index": None,
                                    "tool_call_id": "call_1", "trailing": True}]
    assert answer["messages"][-1]["role"] == "tool"
