"""Condensed tool outputs (``repair.tool_outputs: condense``) on the three wires, through
the official SDKs: repeated results referenced, verbose ones written compactly, the
savings in a header, the access log and ``/metrics``; the prefix the provider caches stays
the same bytes turn after turn; off by default and per owner; measured, not made, under
``report``."""

from __future__ import annotations

import itertools
import json
from typing import Any

import anthropic
import openai
import orjson
import pytest

from gateway.projection.condense import SAME_OUTPUT
from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import calls, tool, user
from tests.fakes.anthropic_rules import sign_thinking
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.responses_server import FakeResponses
from tests.server.three_upstreams import models
from tests.telemetry.promtext import scrape

KEYS = {"team-lean": "key-lean", "team-plain": "key-plain", "team-report": "key-report",
        "team-measure": "key-measure"}
FILE = "import os\n\ndef main() -> int:\n    return len(os.listdir('.'))\n" * 8
TREE = {"files": [{"path": f"src/module_{n}.py", "size": 1000 + n} for n in range(15)]}
PRETTY = json.dumps(TREE, indent=2)
LOG = "\x1b[33mwarning\x1b[0m: retrying\n" * 30 + "\x1b[32mok\x1b[0m\n"


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
             gpt: FakeResponses) -> RunningGateway:
    return await gateway_factory({
        "model_list": models(referee, claude, gpt),
        "gateway": {"api_keys": [{"key": k, "owner": o} for o, k in KEYS.items()]},
        "repair": {"owners": {"team-lean": {"tool_outputs": "condense"},
                              "team-report": {"tool_outputs": "condense",
                                              "policy": "report"},
                              "team-measure": {"tool_outputs": "report"}}},
    })


def oa(gw: RunningGateway, owner: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEYS[owner], max_retries=0)


def session(turns: int) -> list[dict[str, Any]]:
    """A coding session: the same file read twice, a JSON listing, a noisy log."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coder."},
                                      user("fix the bug")]
    outputs = [FILE, PRETTY, LOG, FILE]
    for n in range(turns):
        messages += [calls(f"call_{n}"), tool(f"call_{n}", outputs[n % len(outputs)])]
    return messages


async def test_chat_condenses_for_the_owner_that_asked_and_only_for_it(
    gw: RunningGateway, referee: Referee
) -> None:
    history = session(4)
    async with oa(gw, "team-plain") as c:
        raw = await c.chat.completions.with_raw_response.create(model="chat", messages=history)  # type: ignore[arg-type]
    assert "x-gateway-condensed" not in raw.headers
    assert referee.requests[-1].json()["messages"] == history  # the default: as sent

    async with oa(gw, "team-lean") as c:
        raw = await c.chat.completions.with_raw_response.create(model="chat", messages=history)  # type: ignore[arg-type]
    sent = referee.requests[-1].json()["messages"]
    assert sent[3]["content"] == FILE  # the first read, whole
    assert sent[5]["content"] == orjson.dumps(TREE).decode()
    assert sent[7]["content"] == "warning: retrying\n[previous line repeated 29 more times]\nok\n"
    assert sent[9]["content"] == SAME_OUTPUT.format(call_id="call_0")
    assert [m["role"] for m in sent] == [m["role"] for m in history]
    before = len(PRETTY) + len(LOG) + len(FILE)
    after = sum(len(sent[i]["content"]) for i in (5, 7, 9))
    assert raw.headers["x-gateway-condensed"] == (
        f"outputs=3; same_as_earlier=1; chars={before}->{after}")
    assert "x-gateway-repairs" not in raw.headers  # a valid history: nothing repaired

    metrics = await scrape(gw.root)
    assert metrics.total("gateway_condensed_outputs_total", model="chat",
                         action="condense") == 3
    assert metrics.total("gateway_condensed_saved_chars_total", model="chat",
                         action="condense") == before - after


@pytest.mark.parametrize("owner", ["team-report", "team-measure"])
async def test_report_sends_the_history_as_written_and_says_what_it_would_save(
    gw: RunningGateway, referee: Referee, owner: str
) -> None:
    # tool_outputs: report, or condense under the report policy: nothing changed, the
    # savings a team would get are measured.
    history = session(4)
    async with oa(gw, owner) as c:
        raw = await c.chat.completions.with_raw_response.create(model="chat", messages=history)  # type: ignore[arg-type]
    assert "x-gateway-condensed" not in raw.headers
    assert raw.headers["x-gateway-would-condense"].startswith("outputs=3; same_as_earlier=1;")
    assert referee.requests[-1].json()["messages"] == history
    metrics = await scrape(gw.root)
    assert metrics.total("gateway_condensed_outputs_total", action="report") == 3
    assert metrics.total("gateway_condensed_outputs_total", action="condense") == 0


async def test_each_turn_resends_the_previous_turns_prefix_byte_for_byte(
    gw: RunningGateway, referee: Referee
) -> None:
    sent: list[bytes] = []
    async with oa(gw, "team-lean") as c:
        for turns in range(1, 7):
            await c.chat.completions.create(model="chat", messages=session(turns))  # type: ignore[arg-type]
            sent.append(orjson.dumps(referee.requests[-1].json()["messages"]))
    for earlier, later in itertools.pairwise(sent):
        assert later.startswith(earlier[:-1])  # (the closing bracket aside)


async def test_anthropic_tool_results_condensed_signed_thinking_untouched(
    gw: RunningGateway, claude: FakeAnthropic
) -> None:
    signed = {"type": "thinking", "thinking": "look at the tree",
              "signature": sign_thinking("look at the tree")}
    messages: list[Any] = [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": [signed, {"type": "tool_use", "id": "toolu_1",
                                                   "name": "ls", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": PRETTY}]}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2",
                                           "name": "ls", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2",
                                      "content": PRETTY}]},
    ]
    tools = [{"name": "ls", "input_schema": {"type": "object", "properties": {}}}]
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEYS["team-lean"],
                                        max_retries=0) as a:
        raw = await a.messages.with_raw_response.create(
            model="claude", max_tokens=16, messages=messages, tools=tools,  # type: ignore[arg-type]
            thinking={"type": "enabled", "budget_tokens": 1024})
    assert raw.http_response.status_code == 200
    body = claude.requests[-1].body
    assert body["messages"][1]["content"][0] == signed
    assert body["messages"][2]["content"][0]["content"] == [
        {"type": "text", "text": orjson.dumps(TREE).decode()}]
    # The second listing is the same text as the first (a string there, a block here).
    assert body["messages"][4]["content"][0]["content"] == SAME_OUTPUT.format(call_id="toolu_1")
    assert raw.headers["x-gateway-condensed"].startswith("outputs=2; same_as_earlier=1;")


async def test_responses_outputs_condensed_encrypted_reasoning_untouched(
    gw: RunningGateway, gpt: FakeResponses
) -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [],
                 "encrypted_content": "gAAAA-opaque"}
    items: list[Any] = [
        user("read main.py twice"), reasoning,
        {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": FILE},
        {"type": "function_call", "call_id": "call_2", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_2", "output": FILE},
    ]
    tools = [{"type": "function", "name": "read",
              "parameters": {"type": "object", "properties": {}}}]
    async with oa(gw, "team-lean") as c:
        raw = await c.responses.with_raw_response.create(
            model="gpt", input=items, tools=tools)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    sent = gpt.requests[-1].body["input"]
    assert sent[1] == reasoning
    assert sent[3]["output"] == FILE
    assert sent[5] == {**items[5], "output": SAME_OUTPUT.format(call_id="call_1")}
    assert raw.headers["x-gateway-condensed"] == (
        f"outputs=1; same_as_earlier=1; chars={len(FILE)}->"
        f"{len(SAME_OUTPUT.format(call_id='call_1'))}")


async def test_a_streamed_answer_carries_the_same_condensed_request(
    gw: RunningGateway, referee: Referee
) -> None:
    async with oa(gw, "team-lean") as c, c.chat.completions.with_streaming_response.create(
            model="chat", messages=session(4), stream=True) as response:  # type: ignore[arg-type]
        assert response.headers["x-gateway-condensed"].startswith("outputs=3;")
        chunks = [line async for line in response.iter_lines() if line]
    assert chunks[-1] == "data: [DONE]"
    assert referee.requests[-1].json()["messages"][9]["content"] == SAME_OUTPUT.format(
        call_id="call_0")
