"""Repair policies per owner and per model, on the three wires, through the official SDKs.

One config, three teams: team A ``repair`` (the default), team B ``report``, team C
``reject``. The same broken history gets a repaired 200, an unmodified forward with
``x-gateway-would-repair`` (rescued by the ladder when the provider refuses it), and a 400
in the wire's error shape listing every violation. Valid histories pass for all. The
upstreams are the referee (chat) and the fake Responses and Anthropic APIs, which refuse
broken histories with the real error texts.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
import yaml

from gateway.cli import main
from gateway.referee import Referee
from gateway.server.keys import STATE
from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import assistant, calls, tool, user
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.responses_server import FakeResponses
from tests.server.three_upstreams import models
from tests.telemetry.promtext import scrape

KEYS = {"team-a": "key-team-a", "team-b": "key-team-b", "team-c": "key-team-c"}

# An orphan tool result: every provider refuses it, repair drops it.
CHAT_BROKEN = [user("hi"), assistant("hello"), tool("call_gone", "stale"), user("go on")]
CHAT_VALID = [user("read a"), calls("call_1"), tool("call_1", "contents"), user("thanks")]
ANTHROPIC_BROKEN = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_gone",
                                  "content": "stale"}, {"type": "text", "text": "go"}]}]
ANTHROPIC_VALID = [{"role": "user", "content": "hi"}]
RESPONSES_BROKEN = [user("hi"), {"type": "function_call_output", "call_id": "call_gone",
                                 "output": "stale"}, user("go on")]
RESPONSES_VALID = [user("hi")]


def config(referee: Referee, claude: FakeAnthropic, gpt: FakeResponses,
           **extra: Any) -> dict[str, Any]:
    return {
        "model_list": models(referee, claude, gpt),
        "gateway": {"api_keys": [{"key": k, "owner": o} for o, k in KEYS.items()],
                    "ui": True},
        "repair": {"owners": {"team-b": {"policy": "report"},
                              "team-c": {"policy": "reject"}}},
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
        **extra,
    }


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
             gpt: FakeResponses) -> RunningGateway:
    return await gateway_factory(config(referee, claude, gpt))


def oa(gw: RunningGateway, owner: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEYS[owner], max_retries=0)


def an(gw: RunningGateway, owner: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEYS[owner], max_retries=0)


async def test_chat_repair_report_reject_by_owner(gw: RunningGateway, referee: Referee) -> None:
    async with oa(gw, "team-a") as c:
        raw = await c.chat.completions.with_raw_response.create(model="chat",
                                                               messages=CHAT_BROKEN)
    assert raw.http_response.status_code == 200
    assert raw.headers["x-gateway-repairs"] == "orphan_tool_result_dropped=1"
    assert "x-gateway-would-repair" not in raw.headers
    assert len(referee.requests) == 1  # repaired before sending: accepted at once

    async with oa(gw, "team-b") as c:
        raw = await c.chat.completions.with_raw_response.create(model="chat",
                                                               messages=CHAT_BROKEN)
    assert raw.http_response.status_code == 200
    assert raw.headers["x-gateway-would-repair"] == "orphan_tool_result_dropped=1"
    # Sent exactly as written; the referee refused it, and the ladder's strict rung
    # rescued it (reported as a rescue: recovery and the repairs it made).
    as_sent, rescued = referee.requests[1], referee.requests[2]
    assert as_sent.json()["messages"] == CHAT_BROKEN
    assert as_sent.status == 400
    assert raw.headers["x-gateway-recovery"] == "strict"
    assert "orphan_tool_result_dropped" in raw.headers["x-gateway-repairs"]
    assert len(rescued.json()["messages"]) == 3

    async with oa(gw, "team-c") as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.chat.completions.create(model="chat", messages=CHAT_BROKEN)
    assert len(referee.requests) == 3  # never sent
    err = refused.value
    assert "orphan_tool_result_dropped" in err.message and "messages[2]" in err.message
    body = err.response.json()
    assert body["error"]["code"] == "invalid_history"
    assert body["gateway"]["violations"] == [{
        "rule": "orphan_tool_result_dropped", "message": 2, "tool_call_id": "call_gone",
        "explanation": "a tool result answers no tool call of an earlier assistant message",
        "repair": "drop the tool result"}]


async def test_valid_histories_pass_untouched_for_every_policy(
    gw: RunningGateway, referee: Referee, claude: FakeAnthropic, gpt: FakeResponses
) -> None:
    for owner in KEYS:
        async with oa(gw, owner) as c:
            raw = await c.chat.completions.with_raw_response.create(model="chat",
                                                                   messages=CHAT_VALID)
            assert raw.http_response.status_code == 200
            assert not any(h.startswith("x-gateway-re") or h == "x-gateway-would-repair"
                           for h in raw.headers), owner
            assert referee.requests[-1].json()["messages"] == CHAT_VALID
            sent = orjson.dumps(RESPONSES_VALID)
            response = await c.responses.with_raw_response.create(model="gpt",
                                                                  input=RESPONSES_VALID)  # type: ignore[arg-type]
            assert response.http_response.status_code == 200
            assert orjson.dumps(gpt.requests[-1].body["input"]) == sent
        async with an(gw, owner) as a:
            message = await a.messages.with_raw_response.create(
                model="claude", max_tokens=16, messages=ANTHROPIC_VALID)  # type: ignore[arg-type]
            assert message.http_response.status_code == 200
            assert "x-gateway-would-repair" not in message.headers
            assert claude.requests[-1].body["messages"] == ANTHROPIC_VALID


async def test_anthropic_wire_by_owner(gw: RunningGateway, claude: FakeAnthropic) -> None:
    async with an(gw, "team-a") as a:
        raw = await a.messages.with_raw_response.create(
            model="claude", max_tokens=16, messages=ANTHROPIC_BROKEN)  # type: ignore[arg-type]
    assert "orphan_tool_result_dropped" in raw.headers["x-gateway-repairs"]

    before = len(claude.requests)
    async with an(gw, "team-b") as a:
        raw = await a.messages.with_raw_response.create(
            model="claude", max_tokens=16, messages=ANTHROPIC_BROKEN)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    assert raw.headers["x-gateway-would-repair"] == "orphan_tool_result_dropped=1"
    first = claude.requests[before]
    assert first.body["messages"] == ANTHROPIC_BROKEN  # as written, refused upstream
    assert raw.headers["x-gateway-recovery"] == "strict"

    before = len(claude.requests)
    async with an(gw, "team-c") as a:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await a.messages.create(model="claude", max_tokens=16,
                                    messages=ANTHROPIC_BROKEN)  # type: ignore[arg-type]
    assert len(claude.requests) == before
    body = refused.value.response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "orphan_tool_result_dropped" in refused.value.message
    # The wire message the orphan result is in (the third), not a neutral index.
    assert body["gateway"]["violations"][0]["message"] == 2
    assert body["gateway"]["violations"][0]["tool_call_id"] == "toolu_gone"


async def test_responses_wire_by_owner(gw: RunningGateway, gpt: FakeResponses) -> None:
    async with oa(gw, "team-a") as c:
        raw = await c.responses.with_raw_response.create(model="gpt", input=RESPONSES_BROKEN)  # type: ignore[arg-type]
    assert "orphan_tool_result_dropped" in raw.headers["x-gateway-repairs"]

    before = len(gpt.requests)
    async with oa(gw, "team-b") as c:
        raw = await c.responses.with_raw_response.create(model="gpt", input=RESPONSES_BROKEN)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    assert raw.headers["x-gateway-would-repair"] == "orphan_tool_result_dropped=1"
    assert gpt.requests[before].body["input"] == RESPONSES_BROKEN
    assert raw.headers["x-gateway-recovery"] == "strict"

    before = len(gpt.requests)
    async with oa(gw, "team-c") as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model="gpt", input=RESPONSES_BROKEN)  # type: ignore[arg-type]
    assert len(gpt.requests) == before
    body = refused.value.response.json()
    assert body["error"]["param"] == "input"
    assert body["gateway"]["violations"][0] | {"explanation": ""} == {
        "rule": "orphan_tool_result_dropped", "item": 1, "tool_call_id": "call_gone",
        "explanation": "", "repair": "drop the tool result"}


async def test_translated_wire_is_rejected_too(
    gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
    gpt: FakeResponses
) -> None:
    """A Messages request to a chat-only model: the same reject, in Anthropic's shape."""
    gw = await gateway_factory(config(referee, claude, gpt))
    async with an(gw, "team-c") as a:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await a.messages.create(model="chat", max_tokens=16,
                                    messages=ANTHROPIC_BROKEN)  # type: ignore[arg-type]
    assert refused.value.response.json()["gateway"]["violations"][0]["rule"] == (
        "orphan_tool_result_dropped")
    assert referee.requests == []


async def test_model_policy_and_the_owner_one_winning(
    gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
    gpt: FakeResponses
) -> None:
    cfg = config(referee, claude, gpt)
    cfg["model_list"][0]["model_info"] = {"repair": {"policy": "reject"}}
    cfg["repair"]["owners"] = {"team-b": {"policy": "report"}}
    gw = await gateway_factory(cfg)
    async with oa(gw, "team-a") as c:  # no owner setting: the model's reject
        with pytest.raises(openai.BadRequestError):
            await c.chat.completions.create(model="chat", messages=CHAT_BROKEN)
    async with oa(gw, "team-b") as c:  # the owner's report wins
        raw = await c.chat.completions.with_raw_response.create(model="chat",
                                                               messages=CHAT_BROKEN)
    assert raw.headers["x-gateway-would-repair"] == "orphan_tool_result_dropped=1"


async def test_owners_are_attributed_in_metrics_and_the_inspector(
    gw: RunningGateway, referee: Referee
) -> None:
    for owner in KEYS:
        async with oa(gw, owner) as c:
            try:
                await c.chat.completions.create(model="chat", messages=CHAT_BROKEN)
            except openai.BadRequestError:
                assert owner == "team-c"
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_owner_requests_total", owner="team-a",
                         outcome="repaired") == 1
    assert metrics.total("gateway_owner_repairs_total", owner="team-a",
                         kind="orphan_tool_result_dropped", policy="repair") == 1
    assert metrics.total("gateway_owner_repairs_total", owner="team-b",
                         kind="orphan_tool_result_dropped", policy="report") == 1
    assert metrics.total("gateway_owner_recovery_steps_total", owner="team-b",
                         step="strict") == 1
    assert metrics.total("gateway_owner_requests_total", owner="team-c",
                         outcome="rejected") == 1
    assert metrics.total("gateway_owner_repairs_total", owner="team-c",
                         kind="orphan_tool_result_dropped", policy="reject") == 1
    listed = await inspector(gw, "team-b", "/ui/api/requests?owner=team-b")
    [entry] = listed["requests"]
    assert entry["owner_name"] == "team-b" and entry["policy"] == "report"
    assert entry["would_repair"] == {"orphan_tool_result_dropped": 1}


async def inspector(gw: RunningGateway, owner: str, path: str) -> Any:
    async with aiohttp.ClientSession() as s, s.get(
            gw.root + path, headers={"Authorization": f"Bearer {KEYS[owner]}"}) as r:
        assert r.status == 200
        return await r.json()


def test_an_owner_policy_for_an_unknown_owner_stops_start_up() -> None:
    from gateway.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=r"repair\.owners\.team-x"):
        parse_config({"gateway": {"api_keys": [{"key": "k", "owner": "team-a"}]},
                      "repair": {"owners": {"team-x": {"policy": "reject"}}}})


async def test_gateway_report_prints_the_per_owner_table(
    gw: RunningGateway, referee: Referee, tmp_path: Path,
    capsys: pytest.CaptureFixture[str]
) -> None:
    for owner in KEYS:
        async with oa(gw, owner) as c:
            for messages in (CHAT_BROKEN, CHAT_VALID):
                try:
                    await c.chat.completions.create(model="chat", messages=messages)
                except openai.BadRequestError:
                    assert owner == "team-c"
    inspector = gw.app[STATE].telemetry.inspector
    assert inspector is not None
    for _ in range(500):  # (records are added right after each answer is written)
        if len(await inspector.recent(owners=None)) == 6:
            break
        await asyncio.sleep(0.01)
    await inspector.flush()
    config = tmp_path / "report.yaml"
    config.write_text(yaml.safe_dump({"sessions": {"data_dir": gw.config.sessions.data_dir},
                                      "gateway": {"ui": True}}))
    assert main(["report", "--config", str(config), "--json"]) == 0
    rows = {r["owner"]: r for r in json.loads(capsys.readouterr().out)}
    assert {o: (r["requests"], r["needed_repair"], r["rejected"]) for o, r in rows.items()} == {
        "team-a": (2, 1, 0), "team-b": (2, 1, 0), "team-c": (2, 1, 1)}
    [top] = rows["team-b"]["top_kinds"]
    assert top["kind"] == "orphan_tool_result_dropped" and top["example"]
    assert rows["team-b"]["recovery"] == {"strict": 1}
    assert main(["report", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "| team-c | chat | 2 | 1 (50%) | 1 |" in out


async def test_spans_and_the_access_log_name_the_owner_and_the_would_repairs(
    gw: RunningGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    async with oa(gw, "team-b") as c:
        raw = await c.chat.completions.with_raw_response.create(model="chat",
                                                               messages=CHAT_BROKEN)
    request_id = raw.headers["x-request-id"]
    for _ in range(500):  # (the span ends and the line is written right after the answer)
        spans = [s for s in gw.spans.get_finished_spans() if s.name == "gateway.chat"]
        lines = [r for r in caplog.records if request_id in r.getMessage()]
        if spans and lines:
            break
        await asyncio.sleep(0.01)
    attrs = dict(spans[-1].attributes or {})
    assert attrs["gateway.owner"] == "team-b"
    assert attrs["gateway.repair.policy"] == "report"
    assert attrs["gateway.would_repair.orphan_tool_result_dropped"] == 1
    [line] = lines
    text = line.getMessage()
    assert "owner=team-b" in text and "would_repair=orphan_tool_result_dropped:1" in text
    assert "key-team-b" not in text


async def test_streams_are_reported_and_rejected_alike(
    gw: RunningGateway, referee: Referee, claude: FakeAnthropic
) -> None:
    async with oa(gw, "team-b") as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="chat", messages=CHAT_BROKEN, stream=True)
        text = "".join([ch.choices[0].delta.content or "" async for ch in raw.parse()
                        if ch.choices])
    assert text and raw.headers["x-gateway-would-repair"] == "orphan_tool_result_dropped=1"
    async with oa(gw, "team-c") as c:
        with pytest.raises(openai.BadRequestError, match="orphan_tool_result_dropped"):
            await c.chat.completions.create(model="chat", messages=CHAT_BROKEN, stream=True)
    async with an(gw, "team-c") as a:
        with pytest.raises(anthropic.BadRequestError, match="orphan_tool_result_dropped"):
            await a.messages.create(model="claude", max_tokens=16, stream=True,
                                    messages=ANTHROPIC_BROKEN)  # type: ignore[arg-type]
