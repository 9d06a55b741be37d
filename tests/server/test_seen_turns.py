"""An agent's turns read incrementally give what reading every body whole gives.

Two gateways in front of one referee: one keeps the bodies it read (the default), one
reads every body from scratch (``history_cache_mb: 0``). The same agent session, valid and
broken turns, streamed and not, through the real openai SDK: the upstream must receive the
same bodies and the client the same answers and repair headers from both.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, gateway_state, model_entry
from tests.factories import assistant, calls, image_part, system, text_part, tool, tool_call, user

UPSTREAM_KEY = "upstream-secret-key-seen"
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a thing up", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}}}}]
REPORTED = ("x-gateway-repairs", "x-gateway-attempts", "x-gateway-recovery",
            "x-gateway-context", "x-gateway-compaction")


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai", require_auth=UPSTREAM_KEY) as ref:
        yield ref


async def _gateway(factory: GatewayFactory, referee: Referee, cache_mb: float
                   ) -> RunningGateway:
    return await factory({
        "model_list": [model_entry("agent", referee.base_url, model="openai/referee",
                                   api_key=UPSTREAM_KEY)],
        "gateway": {"history_cache_mb": cache_mb},
    })


def _session() -> list[list[dict[str, Any]]]:
    """Turns of one agent session: each resends the previous history plus what happened.
    Turn 3 carries a cancelled tool call (repaired on every later turn), turn 4 an image,
    turn 5 answers a call left open by turn 4's reply."""
    history: list[dict[str, Any]] = [system("You are a coding agent. Use tools."),
                                     user("Find the bug in parse() — it crashes on \"]\".")]
    turns = [list(history)]
    history += [calls("call_1", content=""), tool("call_1", "def parse(): ... ]}")]
    turns.append(list(history))
    history += [assistant("Looking further.", tool_calls=[tool_call("call_2")]),
                user("stop that, try another way")]  # call_2 never answered
    turns.append(list(history))
    history += [assistant("Here is what I see."),
                user([text_part("and this screenshot?"), image_part()])]
    turns.append(list(history))
    history += [calls("call_3", "call_4")]
    turns.append(list(history))  # two calls still open: the gateway closes them
    history += [tool("call_3", "done"), tool("call_4", ""), user("thanks — ünïcode ✓")]
    turns.append(list(history))
    return turns


async def _send(gw: RunningGateway, messages: list[dict[str, Any]], stream: bool
                ) -> tuple[str, dict[str, str | None]]:
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as client:
        if stream:
            answer = await client.chat.completions.with_raw_response.create(
                model="agent", messages=messages, tools=TOOLS, stream=True)  # type: ignore[arg-type]
            chunks = [c async for c in answer.parse()]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            answer = await client.chat.completions.with_raw_response.create(
                model="agent", messages=messages, tools=TOOLS, temperature=0)  # type: ignore[arg-type]
            text = answer.parse().choices[0].message.content or ""
        return text, {name: answer.headers.get(name) for name in REPORTED}


async def test_an_agent_session_reads_the_same_incrementally_and_whole(
        gateway_factory: GatewayFactory, referee: Referee) -> None:
    kept = await _gateway(gateway_factory, referee, 16)
    whole = await _gateway(gateway_factory, referee, 0)
    for number, messages in enumerate(_session()):
        stream = number == 3  # a turn whose later fields differ ("stream" instead of ...)
        before = len(referee.requests)
        got = await _send(kept, messages, stream)
        want = await _send(whole, messages, stream)
        assert got == want, f"turn {number}"
        sent_kept, sent_whole = referee.requests[before:]
        assert sent_kept.body == sent_whole.body, f"turn {number}"
    # Every turn but the first and the streamed one (its "stream" field comes before
    # "messages": the body starts differently) was read over the one before it.
    assert gateway_state(kept).seen.extended == len(_session()) - 2
    assert gateway_state(whole).seen.extended == 0
    async with aiohttp.ClientSession() as http, http.get(f"{kept.root}/metrics") as r:
        scraped = await r.text()
    assert 'gateway_history_reads_total{read="incremental"} 4.0' in scraped
    assert 'gateway_history_reads_total{read="whole"} 2.0' in scraped
    # The repaired turns really were repaired, on both paths alike.
    repairs = [json.loads(r.body) for r in referee.requests[4::2]]
    assert all(m.get("role") != "tool" or m.get("content") is not None
               for body in repairs for m in body["messages"])


async def test_a_broken_turn_read_incrementally_is_still_repaired(
        gateway_factory: GatewayFactory, referee: Referee) -> None:
    gw = await _gateway(gateway_factory, referee, 16)
    first = [system("sys"), user("go"), calls("call_a")]
    await _send(gw, first, False)  # the open call is closed by the gateway
    second = [*first, user("never mind")]  # still unanswered: a repair on this turn too
    _, headers = await _send(gw, second, False)
    assert gateway_state(gw).seen.extended == 1
    assert headers["x-gateway-repairs"] is not None
    assert "tool_result_synthesized" in headers["x-gateway-repairs"]
    sent = json.loads(referee.requests[-1].body)["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]


async def test_one_clients_history_is_not_read_over_anothers(
        gateway_factory: GatewayFactory, referee: Referee) -> None:
    gw = await gateway_factory({
        "model_list": [model_entry("agent", referee.base_url, model="openai/referee",
                                   api_key=UPSTREAM_KEY)],
        "gateway": {"api_keys": ["key-one-0123456789abcdef", "key-two-0123456789abcdef"]},
    })
    turn = [system("shared prompt"), user("hello")]
    for key in ("key-one-0123456789abcdef", "key-two-0123456789abcdef"):
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=key,
                                      max_retries=0) as client:
            await client.chat.completions.create(model="agent", messages=turn)  # type: ignore[arg-type]
    assert gateway_state(gw).seen.extended == 0  # the second client's body was read whole


async def test_an_empty_or_tiny_body_after_a_kept_one_is_a_clear_400(
        gateway_factory: GatewayFactory, referee: Referee) -> None:
    gw = await _gateway(gateway_factory, referee, 16)
    await _send(gw, [system("a prompt long enough to be kept"), user("hello there")], False)
    async with aiohttp.ClientSession() as http:
        for body in (b"", b"{}", b"[1]", b'{"model": "agent"}'):
            async with http.post(f"{gw.base_url}/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"}) as r:
                assert r.status == 400, body
                assert (await r.json())["error"]["type"] == "invalid_request_error"


async def test_a_renamed_model_sends_the_clients_own_message_bytes(
        gateway_factory: GatewayFactory, referee: Referee) -> None:
    """The model after the messages (as the openai SDK writes it), renamed upstream: the
    messages go as the client wrote them (escapes, spacing), the rest serialized around."""
    gw = await _gateway(gateway_factory, referee, 16)
    history = [system("You are a coding agent. " * 10), user("Fix it — “quoted” ünïcode")]
    for turn in (history, [*history, assistant("Done."), user("thanks ✓")]):
        written = json.dumps(turn, ensure_ascii=True, separators=(", ", ": ")).encode()
        raw = b'{"messages": ' + written + b', "model": "agent", "temperature": 0}'
        async with aiohttp.ClientSession() as http, \
                http.post(f"{gw.base_url}/chat/completions", data=raw,
                          headers={"Content-Type": "application/json"}) as r:
            assert r.status == 200, await r.text()
        sent = referee.requests[-1].body
        assert written in sent
        assert json.loads(sent) == {**json.loads(raw), "model": "referee"}
    assert gateway_state(gw).seen.extended == 1


_ASK = b'{"role":"user","content":"hello there, the first message of the session"}'
_SAID = b'{"role":"assistant","content":"words only the decoy holds"}'


@pytest.mark.parametrize(("first", "second"), [
    # The history's own key written with an escape, an array of the same bytes nested in
    # another field: the nested one grows, the history stays as it was.
    (b'{"model":"agent","x":{"messages":[' + _ASK + b']},"m\\u0065ssages":[' + _ASK + b']}',
     b'{"model":"agent","x":{"messages":[' + _ASK + b',' + _SAID
     + b']},"m\\u0065ssages":[' + _ASK + b']}'),
    # The key twice, the last (the one JSON readers keep) written with an escape.
    (b'{"messages":[' + _ASK + b'],"model":"agent","m\\u0065ssages":[' + _ASK + b']}',
     b'{"messages":[' + _ASK + b',' + _SAID + b'],"model":"agent","m\\u0065ssages":['
     + _ASK + b']}'),
], ids=["nested", "duplicate"])
async def test_an_array_of_the_historys_bytes_elsewhere_is_not_read_as_it(
        gateway_factory: GatewayFactory, referee: Referee, first: bytes, second: bytes
) -> None:
    gw = await _gateway(gateway_factory, referee, 16)
    async with aiohttp.ClientSession() as http:
        for raw in (first, second):
            async with http.post(f"{gw.base_url}/chat/completions", data=raw,
                                 headers={"Content-Type": "application/json"}) as r:
                assert r.status == 200, await r.text()
                assert r.headers.get("x-gateway-repairs") is None
            # The history the upstream receives is the one JSON readers take from the body.
            assert json.loads(referee.requests[-1].body)["messages"] == \
                json.loads(raw)["messages"] == [json.loads(_ASK)]
