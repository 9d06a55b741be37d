"""Held-out attacks on ``repair.tool_outputs: condense`` through the gateway and the official
SDKs: tool results as lists of parts on the three wires (an Anthropic error result with an
image and a cache breakpoint, Responses outputs with an image, a custom tool's output, a
computer call's screenshot), a repeated output whose first copy the repair dropped, a
provider refusal climbing to the strict rung, ``report`` measuring exactly what
``condense`` makes, a model group's own setting under an owner's, and the values in the
inspector."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest

from gateway.projection.condense import REPEATED_LINE, SAME_OUTPUT
from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import assistant, calls, tool, user
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.responses_server import FakeResponses
from tests.server.three_upstreams import UPSTREAM_KEY, models
from tests.telemetry.promtext import scrape

KEYS = {"team-lean": "key-lean", "team-plain": "key-plain", "team-measure": "key-measure",
        "team-keep": "key-keep"}
LOG = "\x1b[31merror\x1b[0m: connection refused   \n" * 25 + "exit 1\n"
CLEAN_LOG = "error: connection refused\n" + REPEATED_LINE.format(times=24) + "\nexit 1\n"
TREE = {"files": [{"path": f"src/module_{n}.py", "size": 1000 + n} for n in range(15)]}
PRETTY = json.dumps(TREE, indent=2)
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
       "RU5ErkJggg==")


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee, claude: FakeAnthropic,
             gpt: FakeResponses) -> RunningGateway:
    lean_group = model_entry("chat-lean", referee.base_url, model="openai/referee",
                             api_key=UPSTREAM_KEY, repair={"tool_outputs": "condense"},
                             max_input_tokens=4_000_000)  # (a megabyte log fits whole)
    return await gateway_factory({
        "model_list": [*models(referee, claude, gpt), lean_group],
        "gateway": {"api_keys": [{"key": k, "owner": o} for o, k in KEYS.items()],
                    "ui": True},
        "repair": {"owners": {"team-lean": {"tool_outputs": "condense"},
                              "team-measure": {"tool_outputs": "report"},
                              "team-keep": {"tool_outputs": "keep"}}},
    })


def oa(gw: RunningGateway, owner: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEYS[owner], max_retries=0)


async def inspected(gw: RunningGateway, owner: str, request_id: str) -> Any:
    async with aiohttp.ClientSession() as s, s.get(
            f"{gw.root}/ui/api/requests/{request_id}",
            headers={"Authorization": f"Bearer {KEYS[owner]}"}) as r:
        assert r.status == 200
        return await r.json()


async def test_anthropic_error_result_with_image_and_breakpoint_keeps_all_but_the_noise(
    gw: RunningGateway, claude: FakeAnthropic
) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": PNG}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
              "cache_control": {"type": "ephemeral"},
              "content": [{"type": "text", "text": LOG}, image]}
    messages: list[Any] = [
        {"role": "user", "content": LOG},  # the user's own paste: never touched
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "run",
                                           "input": {"log": LOG}}]},
        {"role": "user", "content": [result, {"type": "text", "text": "why?"}]},
    ]
    tools = [{"name": "run", "input_schema": {"type": "object", "properties": {}}}]
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEYS["team-lean"],
                                        max_retries=0) as a:
        raw = await a.messages.with_raw_response.create(
            model="claude", max_tokens=16, messages=messages, tools=tools)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    sent = claude.requests[-1].body["messages"]
    assert sent[0] == messages[0] and sent[1] == messages[1]
    assert sent[2]["content"] == [{**result, "content": [{"type": "text", "text": CLEAN_LOG},
                                                         image]},
                                  {"type": "text", "text": "why?"}]
    assert raw.headers["x-gateway-condensed"] == (
        f"outputs=1; same_as_earlier=0; chars={len(LOG)}->{len(CLEAN_LOG)}")


async def test_responses_outputs_of_every_kind_condensed_screenshot_untouched(
    gw: RunningGateway, gpt: FakeResponses
) -> None:
    screenshot = {"type": "computer_screenshot", "image_url": f"data:image/png;base64,{PNG}"}
    image = {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}
    items: list[Any] = [
        user("check the build"),
        {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1",
         "output": [{"type": "input_text", "text": PRETTY}, image]},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "shell", "input": "make"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": LOG},
        {"type": "computer_call", "call_id": "call_3", "id": "cu_1", "status": "completed",
         "action": {"type": "screenshot"}, "pending_safety_checks": []},
        {"type": "computer_call_output", "call_id": "call_3", "output": screenshot},
        {"type": "custom_tool_call", "call_id": "call_4", "name": "shell", "input": "make"},
        {"type": "custom_tool_call_output", "call_id": "call_4", "output": LOG},
    ]
    tools: list[Any] = [
        {"type": "function", "name": "ls", "parameters": {"type": "object", "properties": {}}},
        {"type": "custom", "name": "shell"},
    ]
    async with oa(gw, "team-lean") as c:
        raw = await c.responses.with_raw_response.create(model="gpt", input=items, tools=tools)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    sent = gpt.requests[-1].body["input"]
    assert sent[2]["output"] == [{"type": "input_text", "text": orjson.dumps(TREE).decode()},
                                 image]
    assert sent[3] == items[3] and sent[5] == items[5] and sent[6] == items[6]
    assert sent[4] == {**items[4], "output": CLEAN_LOG}
    assert sent[8] == {**items[8], "output": SAME_OUTPUT.format(call_id="call_2")}
    assert raw.headers["x-gateway-condensed"].startswith("outputs=3; same_as_earlier=1;")


async def test_a_repeat_of_an_output_the_repair_dropped_is_sent_whole(
    gw: RunningGateway, referee: Referee
) -> None:
    # The first copy answers no call (an orphan): dropped, so nothing "above" to point at.
    history = [user("run it"), tool("call_gone", LOG), calls("call_1"), tool("call_1", LOG),
               calls("call_2"), tool("call_2", LOG)]
    async with oa(gw, "team-lean") as c:
        raw = await c.chat.completions.with_raw_response.create(model="chat", messages=history)  # type: ignore[arg-type]
    assert raw.headers["x-gateway-repairs"] == "orphan_tool_result_dropped=1"
    sent = referee.requests[-1].json()["messages"]
    assert [m.get("tool_call_id") for m in sent] == [None, None, "call_1", None, "call_2"]
    assert sent[2]["content"] == CLEAN_LOG
    assert sent[4]["content"] == SAME_OUTPUT.format(call_id="call_1")


async def test_a_refusal_climbs_to_the_strict_rung_still_condensed_the_same_way(
    gw: RunningGateway, referee: Referee
) -> None:
    # Two assistant messages in a row: the strict rung merges them (and condenses again).
    history = [user("list"), calls("call_1"), tool("call_1", PRETTY), calls("call_2"),
               tool("call_2", PRETTY), assistant("first half"), assistant("second half"),
               user("and?")]
    refusal = {"error": {
        "message": "messages: roles must alternate between \"user\" and \"assistant\"",
        "type": "invalid_request_error", "param": None, "code": None}}
    async with oa(gw, "team-lean") as c:
        referee.script(400, refusal)
        raw = await c.chat.completions.with_raw_response.create(model="chat", messages=history)  # type: ignore[arg-type]
        referee.script(400, refusal)
        again = await c.chat.completions.with_raw_response.create(model="chat",
                                                                  messages=history)  # type: ignore[arg-type]
    assert raw.headers["x-gateway-recovery"] == again.headers["x-gateway-recovery"] == "strict"
    refused, rescued, refused_again, rescued_again = (r.json()["messages"]
                                                      for r in referee.requests[-4:])
    assert len(rescued) == len(refused) - 1  # merged
    assert (rescued, refused) == (rescued_again, refused_again)  # deterministic
    for sent in (refused, rescued):
        assert sent[2]["content"] == orjson.dumps(TREE).decode()
        assert sent[4]["content"] == SAME_OUTPUT.format(call_id="call_1")
    assert raw.headers["x-gateway-condensed"] == again.headers["x-gateway-condensed"]


async def test_report_measures_exactly_what_condense_makes(
    gw: RunningGateway, referee: Referee
) -> None:
    history = [user("go"), calls("call_1"), tool("call_1", PRETTY), calls("call_2"),
               tool("call_2", LOG), calls("call_3"), tool("call_3", PRETTY)]
    async with oa(gw, "team-measure") as c:
        measured = await c.chat.completions.with_raw_response.create(model="chat",
                                                                     messages=history)  # type: ignore[arg-type]
    assert referee.requests[-1].json()["messages"] == history
    async with oa(gw, "team-lean") as c:
        made = await c.chat.completions.with_raw_response.create(model="chat",
                                                                 messages=history)  # type: ignore[arg-type]
    assert measured.headers["x-gateway-would-condense"] == made.headers["x-gateway-condensed"]
    saved = sum(len(history[i]["content"]) for i in (2, 4, 6)) - sum(
        len(m["content"]) for m in referee.requests[-1].json()["messages"][2::2])
    metrics = await scrape(gw.root)
    for action in ("report", "condense"):
        assert metrics.total("gateway_condensed_outputs_total", action=action) == 3
        assert metrics.total("gateway_condensed_saved_chars_total", action=action) == saved
    detail = await inspected(gw, "team-lean", made.headers["x-request-id"])
    assert {k: v for k, v in detail.items() if k.startswith("condensed_")} == {
        "condensed_outputs": 3, "condensed_saved_chars": saved, "condensed_action": "condense"}


async def test_a_model_group_condenses_for_everyone_but_an_owner_who_keeps(
    gw: RunningGateway, referee: Referee
) -> None:
    history = [user("go"), calls("call_1"), tool("call_1", LOG)]
    async with oa(gw, "team-plain") as c:
        plain = await c.chat.completions.with_raw_response.create(model="chat-lean",
                                                                  messages=history)  # type: ignore[arg-type]
    assert referee.requests[-1].json()["messages"][2]["content"] == CLEAN_LOG
    assert plain.headers["x-gateway-condensed"].startswith("outputs=1;")
    async with oa(gw, "team-keep") as c:
        kept = await c.chat.completions.with_raw_response.create(model="chat-lean",
                                                                 messages=history)  # type: ignore[arg-type]
    assert referee.requests[-1].json()["messages"] == history
    assert "x-gateway-condensed" not in kept.headers


async def test_a_megabyte_log_streamed_is_condensed_and_logged(
    gw: RunningGateway, referee: Referee, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    bar = "".join(f"\r\x1b[2K[{'#' * (n // 5):<20}] {n}%" for n in range(101))
    big = (bar + "\n" + LOG) * 700  # ~2 MB of what a terminal drew
    assert len(big) > 2_000_000
    history = [user("install it"), calls("call_1"), tool("call_1", big)]
    async with oa(gw, "team-lean") as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="chat-lean", messages=history, stream=True)  # type: ignore[arg-type]
        text = "".join([ch.choices[0].delta.content or "" async for ch in raw.parse()
                        if ch.choices])
    assert text
    sent = referee.requests[-1].json()["messages"][2]["content"]
    assert sent == (f"[{'#' * 20}] 100%\n" + CLEAN_LOG) * 700
    saved = len(big) - len(sent)
    assert raw.headers["x-gateway-condensed"] == (
        f"outputs=1; same_as_earlier=0; chars={len(big)}->{len(sent)}")
    request_id = raw.headers["x-request-id"]
    for _ in range(500):  # (the span ends and the line is written right after the answer)
        spans = [s for s in gw.spans.get_finished_spans()
                 if (s.attributes or {}).get("gateway.condensed.outputs")]
        lines = [r for r in caplog.records if request_id in r.getMessage()]
        if spans and lines:
            break
        await asyncio.sleep(0.01)
    attrs = dict(spans[-1].attributes or {})
    assert (attrs["gateway.condensed.outputs"], attrs["gateway.condensed.saved_chars"],
            attrs["gateway.condensed.action"]) == (1, saved, "condense")
    [line] = lines
    assert (f"condensed_outputs=1 condensed_saved_chars={saved} condensed_action=condense"
            in line.getMessage())


async def test_a_lone_surrogate_escape_gets_the_same_answer_condensed_or_not(
    gw: RunningGateway, referee: Referee
) -> None:
    # A JSON body a strict parser refuses: condensing must not turn it into a 5xx.
    body = ('{"model": "chat", "messages": [{"role": "user", "content": "go"}, '
            '{"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", '
            '"type": "function", "function": {"name": "run", "arguments": "{}"}}]}, '
            '{"role": "tool", "tool_call_id": "call_1", "content": '
            + json.dumps(LOG).replace("refused", "refused \\ud800") + '}]}')
    assert "\\ud800" in body
    answers = []
    for owner in ("team-plain", "team-lean"):
        async with aiohttp.ClientSession() as s, s.post(
                f"{gw.base_url}/chat/completions", data=body,
                headers={"Authorization": f"Bearer {KEYS[owner]}",
                         "Content-Type": "application/json"}) as r:
            answers.append((r.status, (await r.json()).get("error", {}).get("code")))
    assert answers[0] == answers[1] and answers[0][0] < 500, answers
