"""A Messages or Responses agent's turns read over the plain turn before give what reading
every body whole gives.

Two gateways in front of one fake Anthropic API (the real error texts, signed thinking
checked): one keeps the plain bodies it read (the default), one reads every body from
scratch (``history_cache_mb: 0``). The same Claude Code-like session goes through the real
anthropic SDK to both: a breakpoint on the system prompt and one moved to the newest
message every turn, thinking first in every turn, tool calls and their results, then the
faults the wire's rules repair added to a plain history. The upstream must receive the same
bytes and the client the same answers and repair headers from both.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import anthropic
import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.projection.fastpath import is_clean
from gateway.projection.lazy_messages import LazyMessages
from gateway.server.kept_slots import KeptSlots
from gateway.server.seen_native import MESSAGES, RESPONSES, SeenNative, TurnReading
from gateway.sessions.hashing import session_fingerprint
from gateway.telemetry.context import count_messages
from gateway.wires.anthropic_deferred import DeferredAnthropicView
from gateway.wires.anthropic_plain import plain_body
from gateway.wires.anthropic_typed import read_plain_messages_typed
from gateway.wires.deferred import DeferredView
from gateway.wires.reading import read_plain_messages, read_plain_responses
from gateway.wires.responses_deferred import DeferredResponsesView
from gateway.wires.responses_plain import plain_input
from gateway.wires.responses_typed import read_plain_input_typed
from tests.conftest import GatewayFactory, RunningGateway, gateway_state
from tests.fakes.anthropic_rules import sign_thinking
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.responses_server import FakeResponses
from tests.wires.test_anthropic_plain import bodies
from tests.wires.test_responses_plain import bodies as responses_bodies

KEY = "upstream-anthropic-key-seen"
MARK = {"type": "ephemeral"}
SYSTEM = [{"type": "text", "text": "You are a coding agent. " * 40, "cache_control": MARK}]
TOOLS = [{"name": "read_file", "description": "read a file",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
REPORTED = ("x-gateway-repairs", "x-gateway-attempts", "x-gateway-recovery")


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=KEY) as server:
        yield server


async def _gateway(factory: GatewayFactory, fake: FakeAnthropic, cache_mb: float,
                   keys: list[str] | None = None) -> RunningGateway:
    return await factory({
        "model_list": [{"model_name": "claude", "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5", "api_base": fake.base_url,
            "api_key": KEY}}],
        "gateway": {"history_cache_mb": cache_mb,
                    "api_keys": keys or ["client-key-0123456789"]},
    })


def _unmarked(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    if not isinstance(content, list):
        return message
    return {**message, "content": [{k: v for k, v in b.items() if k != "cache_control"}
                                   for b in content]}


def _marked_last(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history with its one message breakpoint on the newest message (Claude Code)."""
    out = [_unmarked(m) for m in messages]
    last = out[-1]
    content = last["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    out[-1] = {**last, "content": [*content[:-1], {**content[-1], "cache_control": MARK}]}
    return out


def _step(n: int, ref: str | None = None) -> list[dict[str, Any]]:
    """An assistant turn that thinks and reads a file, and the user turn with its result."""
    ref = ref or f"toolu_{n:02d}"
    words = f"I should read file {n}."
    return [{"role": "assistant", "content": [
                {"type": "thinking", "thinking": words, "signature": sign_thinking(words)},
                {"type": "tool_use", "id": ref, "name": "read_file",
                 "input": {"path": f"src/{n}.py"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": ref,
                                          "content": f"contents of file {n}\n" * 20}]}]


def _session() -> list[tuple[str, list[dict[str, Any]]]]:
    """(what the turn is, its history): plain turns, then the faults, each resent after."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test: "
                                      "tests/test_parse.py crashes on a closing bracket."}]
    turns = [("first turn", list(history))]
    for n in range(4):
        history += _step(n)
        turns.append((f"plain turn {n}", list(history)))
    # The user interrupts: a result for a call the model never made (a trimmer's leftover).
    history += [{"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_gone", "content": "late"},
                    {"type": "text", "text": "also check the docs"}]}]
    turns.append(("orphan result", list(history)))
    history += _step(5, ref="toolu_00")  # an id an earlier call used: renamed
    turns.append(("reused id", list(history)))
    history += _step(6)
    turns.append(("after the faults", list(history)))  # (still repaired: they stay)
    return turns


async def _send(gw: RunningGateway, messages: list[dict[str, Any]],
                key: str = "client-key-0123456789", *, as_given: bool = False,
                ) -> tuple[str, dict[str, str | None]]:
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=key,
                                        max_retries=0) as client:
        answer = await client.messages.with_raw_response.create(
            model="claude", max_tokens=256, system=SYSTEM, tools=TOOLS,  # type: ignore[arg-type]
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=messages if as_given else _marked_last(messages))  # type: ignore[arg-type]
        said = await answer.parse()
        text = "".join(b.text for b in said.content if b.type == "text")
        return text, {name: answer.headers.get(name) for name in REPORTED}


Send = Callable[[RunningGateway, list[dict[str, Any]]],
                Awaitable[tuple[str, dict[str, str | None]]]]


async def _alike(kept: RunningGateway, whole: RunningGateway, requests: list[Any],
                 session: list[tuple[str, list[dict[str, Any]]]], send: Send) -> None:
    """Each turn of ``session`` sent to both gateways: the same answers and repair headers,
    the same bytes upstream (``requests``: the upstream's); plain turns are not repaired."""
    for what, history in session:
        before = len(requests)
        got = await send(kept, history)
        want = await send(whole, history)
        assert got == want, what
        sent_kept, sent_whole = requests[before:]
        assert sent_kept.raw == sent_whole.raw, what
        plain = what.startswith(("plain", "first"))
        assert (got[1]["x-gateway-repairs"] is None) == plain, what
        if plain and "input" in sent_kept.body:  # (sent as the client wrote it)
            assert sent_kept.body["input"] == history


async def test_a_messages_session_reads_the_same_over_kept_turns_and_whole(
        gateway_factory: GatewayFactory, fake: FakeAnthropic) -> None:
    kept = await _gateway(gateway_factory, fake, 16)
    whole = await _gateway(gateway_factory, fake, 0)
    await _alike(kept, whole, fake.requests, _session(), _send)
    # Each plain turn moved the breakpoint off the message before it and was read over the
    # turn before, but for the second (the first turn's one message is what changed); a
    # history with a fault in it is read whole (and its faults repaired on every turn).
    assert gateway_state(kept).messages_turns.extended == 3
    assert gateway_state(whole).messages_turns.extended == 0
    async with aiohttp.ClientSession() as http, http.get(f"{kept.root}/metrics") as r:
        scraped = await r.text()
    turns = len(_session())
    assert 'gateway_history_reads_total{read="incremental"} 3.0' in scraped
    assert f'gateway_history_reads_total{{read="whole"}} {turns - 3}.0' in scraped


async def test_the_faults_of_a_turn_read_over_a_kept_one_are_repaired(
        gateway_factory: GatewayFactory, fake: FakeAnthropic) -> None:
    gw = await _gateway(gateway_factory, fake, 16)
    turns = dict(_session())
    for what in ("plain turn 0", "plain turn 1", "plain turn 2", "plain turn 3"):
        await _send(gw, turns[what])
    _, headers = await _send(gw, turns["orphan result"])
    assert "orphan_tool_result_dropped" in (headers["x-gateway-repairs"] or "")
    sent = fake.requests[-1].body["messages"]
    assert not any(b.get("tool_use_id") == "toolu_gone" for m in sent
                   if isinstance(m["content"], list) for b in m["content"])
    # A turn that adds three breakpoints: with the system prompt's and the one on the turn
    # before, five (the API takes four).
    history = _marked_last(turns["plain turn 3"])
    await _send(gw, history, as_given=True)
    crowded = [*history, {"role": "assistant", "content": [
        {"type": "text", "text": "ok", "cache_control": MARK},
        {"type": "text", "text": "more", "cache_control": MARK}]},
        {"role": "user", "content": [{"type": "text", "text": "go on", "cache_control": MARK}]}]
    _, headers = await _send(gw, crowded, as_given=True)
    assert "cache_breakpoint_removed" in (headers["x-gateway-repairs"] or "")
    sent = fake.requests[-1].body
    marks = [b for m in sent["messages"] if isinstance(m["content"], list)
             for b in m["content"] if "cache_control" in b]
    assert len(marks) + 1 <= 4  # (the system prompt's is the fourth)


async def test_one_clients_messages_are_not_read_over_anothers(
        gateway_factory: GatewayFactory, fake: FakeAnthropic) -> None:
    keys = ["key-one-0123456789abcdef", "key-two-0123456789abcdef"]
    gw = await _gateway(gateway_factory, fake, 16, keys)
    history = _session()[2][1]
    await _send(gw, history[:-2], keys[0])
    await _send(gw, history, keys[1])
    assert gateway_state(gw).messages_turns.extended == 0


@pytest.mark.parametrize("added", [
    b',{"role":"tool","content":"x"}',  # no such role on this wire
    b',{"role":"user","content":',  # cut off
    b',{"role":"user","content":[{"type":"text"}]}',  # a block without its text
    b',"not a message"',
])
async def test_a_bad_message_added_to_a_kept_turn_is_a_clear_400(
        gateway_factory: GatewayFactory, fake: FakeAnthropic, added: bytes) -> None:
    gw = await _gateway(gateway_factory, fake, 16)
    body = {"model": "claude", "max_tokens": 64, "system": SYSTEM,
            "messages": _session()[1][1], "tools": TOOLS}
    raw = orjson.dumps(body)
    headers = {"x-api-key": "client-key-0123456789", "content-type": "application/json",
               "anthropic-version": "2023-06-01"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{gw.root}/v1/messages", data=raw, headers=headers) as r:
            assert r.status == 200
        at = raw.index(b'],"tools"')
        worse = raw[:at] + added + raw[at:]
        async with http.post(f"{gw.root}/v1/messages", data=worse, headers=headers) as r:
            assert r.status == 400
            error = await r.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert len(fake.requests) == 1  # the bad turn never went upstream


async def _sent_as_written(url: str, raw: bytes, written: str, requests: list[Any],
                           upstream_model: str, headers: dict[str, str]) -> None:
    """Post ``raw``: the upstream must get ``written`` (its history) byte for byte and the
    client's body with the model renamed, nothing else."""
    async with aiohttp.ClientSession() as http, http.post(
            url, data=raw, headers={**headers, "content-type": "application/json"}) as r:
        assert r.status == 200, await r.text()
    sent = requests[-1].raw
    assert written.encode() in sent
    assert orjson.loads(sent) == {**orjson.loads(raw), "model": upstream_model}


async def test_a_renamed_model_sends_the_clients_own_message_bytes(
        gateway_factory: GatewayFactory, fake: FakeAnthropic) -> None:
    """The model sits between the messages and the other fields (as the SDKs write it) and
    is renamed upstream: the messages go as the client wrote them (escapes, spacing), the
    rest serialized around them."""
    gw = await _gateway(gateway_factory, fake, 16)
    history = _session()[2][1]
    history[0] = {"role": "user", "content": "Fix the test — “quoted” ünïcode please"}
    for n in (1, 2):  # the second turn is read over the first
        messages = _marked_last(history[:2 * n + 1])
        written = json.dumps(messages, ensure_ascii=True, separators=(", ", ": "))
        raw = (b'{"max_tokens": 64, "messages": ' + written.encode() + b', "model": "claude", '
               b'"system": ' + orjson.dumps(SYSTEM) + b', "tools": ' + orjson.dumps(TOOLS) + b"}")
        await _sent_as_written(f"{gw.root}/v1/messages", raw, written, fake.requests,
                               "claude-sonnet-4-5", {"x-api-key": "client-key-0123456789",
                                                     "anthropic-version": "2023-06-01"})
    assert gateway_state(gw).messages_turns.extended == 1


# -- Responses ----------------------------------------------------------------------------

OPENAI_KEY = "upstream-openai-key-seen"
FUNCTIONS = [{"type": "function", "name": "shell", "description": "run a command",
              "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}]


@pytest.fixture
async def responses_fake() -> AsyncIterator[FakeResponses]:
    async with FakeResponses(api_key=OPENAI_KEY) as server:
        yield server


async def _responses_gateway(factory: GatewayFactory, fake: FakeResponses,
                             cache_mb: float) -> RunningGateway:
    return await factory({
        "model_list": [{"model_name": "codex", "litellm_params": {
            "model": "openai/gpt-5-codex", "api_base": f"{fake.base_url}/v1",
            "api_key": OPENAI_KEY}}],
        "gateway": {"history_cache_mb": cache_mb, "api_keys": ["client-key-0123456789"]},
    })


def _codex_step(n: int, ref: str | None = None) -> list[dict[str, Any]]:
    """Encrypted reasoning, a shell call and its output (Codex, nothing stored)."""
    ref = ref or f"call_{n}"
    return [{"type": "reasoning", "id": f"rs_{n}", "summary": [],
             "encrypted_content": f"gAAAA-fake-rs_{n}"},
            {"type": "function_call", "id": f"fc_{n}", "call_id": ref, "name": "shell",
             "arguments": orjson.dumps({"cmd": f"cat src/{n}.py"}).decode()},
            {"type": "function_call_output", "call_id": ref, "output": f"line {n}\n" * 30}]


def _codex_session() -> list[tuple[str, list[dict[str, Any]]]]:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Fix the failing test in tests/test_parse.py."}]}]
    turns = [("first turn", list(items))]
    for n in range(4):
        items += _codex_step(n)
        turns.append((f"plain turn {n}", list(items)))
    items += [{"type": "function_call_output", "call_id": "call_gone", "output": "late"},
              {"role": "user", "content": "also check the docs"}]
    turns.append(("orphan output", list(items)))
    items += _codex_step(5)
    turns.append(("after the fault", list(items)))
    return turns


async def _ask(gw: RunningGateway, items: list[dict[str, Any]],
               ) -> tuple[str, dict[str, str | None]]:
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key-0123456789",
                                  max_retries=0) as client:
        answer = await client.responses.with_raw_response.create(
            model="codex", input=items, tools=FUNCTIONS, store=False,  # type: ignore[arg-type]
            include=["reasoning.encrypted_content"])
        return answer.parse().output_text, {n: answer.headers.get(n) for n in REPORTED}


async def test_a_responses_session_reads_the_same_over_kept_turns_and_whole(
        gateway_factory: GatewayFactory, responses_fake: FakeResponses) -> None:
    kept = await _responses_gateway(gateway_factory, responses_fake, 16)
    whole = await _responses_gateway(gateway_factory, responses_fake, 0)
    await _alike(kept, whole, responses_fake.requests, _codex_session(), _ask)
    # What the upstream got is the client's body, the model renamed: no other field.
    assert all(set(r.body) == {"model", "input", "tools", "store", "include"}
               for r in responses_fake.requests)
    # Every plain turn after the first was read over the one before; the turns holding
    # the orphan output are read whole (and repaired every time).
    assert gateway_state(kept).responses_turns.extended == 4
    assert gateway_state(whole).responses_turns.extended == 0
    sent = responses_fake.requests[-1].body["input"]
    assert not any(item.get("call_id") == "call_gone" for item in sent)


async def test_a_renamed_model_sends_the_clients_own_input_bytes(
        gateway_factory: GatewayFactory, responses_fake: FakeResponses) -> None:
    """The Responses twin: the model sits before the input (as the SDKs write it) and is
    renamed upstream; the input goes as the client wrote it, the rest serialized around
    it, and no field is added."""
    gw = await _responses_gateway(gateway_factory, responses_fake, 16)
    items = _codex_session()[2][1]
    items[0] = {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Fix the test — “quoted” ünïcode please"}]}
    for n in (1, 2):  # the second turn is read over the first
        written = json.dumps(items[:1 + 3 * n], ensure_ascii=True, separators=(", ", ": "))
        raw = (b'{"model": "codex", "input": ' + written.encode() + b', "store": false, '
               b'"tools": ' + orjson.dumps(FUNCTIONS) + b"}")
        await _sent_as_written(f"{gw.base_url}/responses", raw, written,
                               responses_fake.requests, "gpt-5-codex",
                               {"authorization": "Bearer client-key-0123456789"})
    assert gateway_state(gw).responses_turns.extended == 1


# -- the reader alone: adversarial second turns ---------------------------------------------

_FIRST = {"model": "claude", "max_tokens": 64, "system": "You are terse. " * 8,
          "messages": [{"role": "user", "content": "Read the file please, then fix it."},
                       *_step(0)], "tools": TOOLS}
_ADDED = (b',{"role":"assistant","content":[{"type":"text","text":"done \\u2014 ok"}]},'
          b'{"role":"user","content":"next"}')


def _second_turns() -> dict[str, bytes]:
    """Bodies after the first, as clients and attackers may write them."""
    first = orjson.dumps(_FIRST)
    at = first.index(b'],"tools"')
    head, tail = first[:at], first[at:]
    return {
        "added compactly": head + _ADDED + tail,
        "added with whitespace": head + b" ,\n  " + _ADDED[1:].replace(b"},{", b"} ,\n{")
        + b"\n" + tail,
        "a string holding the key and brackets": head + b',{"role":"assistant","content":'
        b'"\\"messages\\": [ ] }"},{"role":"user","content":"go"}' + tail,
        "the array closed early and opened again": head + b',{"role":"user","content":"x"}],'
        b'"evil":1,"messages":[{"role":"user","content":"y"}' + tail,
        "a number for a message": head + b",7" + tail,
        "trailing bytes": head + _ADDED + tail + b"x",
        "another tail": head + _ADDED + b'],"tools":[],"stream":true}',
        "nothing added": first,
        "a cut message": head[:-3] + _ADDED + tail,
        "a duplicate id": head + b',{"role":"assistant","content":[{"type":"tool_use","id":'
        b'"toolu_00","name":"read_file","input":{}}]},{"role":"user","content":[{"type":'
        b'"tool_result","tool_use_id":"toolu_00","content":"again"}]}' + tail,
    }


@pytest.mark.parametrize("case", list(_second_turns()))
def test_a_turn_read_over_a_kept_one_is_the_body_read_whole(case: str) -> None:
    """Whatever the second body's bytes, reading it over the first gives what reading it
    whole gives (the same body, view and verdict), or declines (then it is read whole)."""
    seen = SeenNative(KeptSlots(16 << 20), MESSAGES)
    first = orjson.dumps(_FIRST)
    body, view, plain = read_plain_messages(orjson.loads(first))
    assert plain is not None
    seen.learn(first, "client", body, view, plain, None)
    raw = _second_turns()[case]
    turn = seen.read(raw, "client")
    if case in ("added compactly", "added with whitespace", "nothing added"):
        assert turn is not None, case  # (an agent's usual turns are read over the first)
    if turn is None:
        return
    whole = orjson.loads(raw)
    assert turn.body == whole
    _, whole_view, whole_plain = read_plain_messages(whole)
    assert turn.view.messages == whole_view.messages
    assert (turn.plain is None) == (whole_plain is None)
    assert turn.plain == whole_plain
    # What is kept of it: the bytes a renamed model sends are exactly its messages array,
    # and a third turn is read over it.
    learned = seen.learn(raw, "client", turn.body, turn.view, turn.plain, turn)
    assert learned.written is not None
    written = bytes(learned.written)
    assert written[:1] == b"[" and written[-1:] == b"]"
    assert orjson.loads(written) == whole["messages"]
    at = len(raw[:raw.rindex(b"]", 0, raw.index(b'"tools"'))].rstrip())
    third = raw[:at] + b',{"role":"assistant","content":"ok"},' \
        b'{"role":"user","content":"more"}' + raw[at:]
    assert seen.read(third, "client") is not None


# -- a history kept unparsed (read typed) and the turns read over it --------------------------


def _kept_typed(seen: SeenNative, raw: bytes) -> None:
    """``raw`` read as the edge reads a new plain body (typed, its history unparsed, its
    view unbuilt) and kept."""
    typed = read_plain_messages_typed(raw)
    assert typed is not None
    view = DeferredAnthropicView(typed.messages, (typed.neutral, typed.counted, typed.lead))
    seen.learn(raw, "client", typed.body, view, typed.plain, None, span=(typed.start,
                                                                         typed.close))


def _as_read_whole(turn: TurnReading, raw: bytes,
                   read: Callable[[dict[str, Any]], Any] = read_plain_messages) -> None:
    """What was read over a kept turn is what reading ``raw`` whole (``read``) gives: the
    body, the plain state, the view, every figure a deferred view tells before it is built
    and, then, the verdict (else a turn not called clean may be: the projection looks)."""
    whole = orjson.loads(raw)
    assert turn.body == whole
    _, eager, whole_plain = read(whole)
    assert turn.plain == whole_plain
    view = turn.view
    if isinstance(view, DeferredView) and not view.is_built:
        assert len(view.messages) == len(eager.messages)
        assert view.counted == count_messages(eager.messages)
        assert session_fingerprint(view.lead) == session_fingerprint(eager.messages)
        assert turn.shared <= len(eager.messages)
        assert turn.clean == is_clean(eager.messages)
    assert not turn.clean or is_clean(eager.messages)
    assert list(view.messages) == eager.messages


@pytest.mark.parametrize("case", list(_second_turns()))
def test_a_turn_over_a_history_kept_unparsed_is_the_body_read_whole(case: str) -> None:
    """The first turn read typed (its history kept as its bytes): each second turn read
    over it is the body read whole, and an agent's usual turns leave the history
    unparsed (what they added is all that is parsed), turn after turn."""
    seen = SeenNative(KeptSlots(16 << 20), MESSAGES)
    _kept_typed(seen, orjson.dumps(_FIRST))
    raw = _second_turns()[case]
    turn = seen.read(raw, "client")
    if case in ("added compactly", "added with whitespace"):
        assert turn is not None
        history = turn.body["messages"]
        assert isinstance(history, LazyMessages) and not history.parsed, case
    if turn is None:
        return
    learned = seen.learn(raw, "client", turn.body, turn.view, turn.plain, turn)
    _as_read_whole(turn, raw)
    if not learned.turn:
        return
    at = len(raw[:raw.rindex(b"]", 0, raw.index(b'"tools"'))].rstrip())
    third = raw[:at] + b',{"role":"assistant","content":"ok"},' \
        b'{"role":"user","content":"more"}' + raw[at:]
    again = seen.read(third, "client")
    assert again is not None
    _as_read_whole(again, third)


def test_a_breakpoint_moved_to_the_newest_message_keeps_the_history_unparsed() -> None:
    """Claude Code moves its cache breakpoint to the newest message every turn: the kept
    body's last message is read again without it, the history before it still unparsed,
    and the turn is the body read whole."""
    marked = {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}}
    first_messages = [*_FIRST["messages"],  # type: ignore[misc]
                      {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                      {"role": "user", "content": [marked]}]
    first = {**_FIRST, "messages": first_messages}
    seen = SeenNative(KeptSlots(16 << 20), MESSAGES)
    _kept_typed(seen, orjson.dumps(first))
    unmarked = {"type": "text", "text": "go on"}
    second = {**first, "messages": [
        *first_messages[:-1], {"role": "user", "content": [unmarked]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_9",
                                           "name": "read_file", "input": {"p": "a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9",
                                      "content": "text", "cache_control":
                                          {"type": "ephemeral"}}]}]}
    raw = orjson.dumps(second)
    turn = seen.read(raw, "client")
    assert turn is not None
    assert isinstance(turn.body["messages"], LazyMessages)
    assert not turn.body["messages"].parsed
    _as_read_whole(turn, raw)


@settings(max_examples=800, deadline=None)
@given(bodies(turns=6), st.integers(0, 5))
def test_any_plain_history_read_over_its_earlier_turn_kept_unparsed(
        body: dict[str, Any], split: int) -> None:
    """A plain history, its first turn (cut after a user message) kept as the edge keeps a
    new body, then the whole history read over it: the body read whole, or declined."""
    messages = body["messages"]
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if plain_body(body) is None or len(users) < 2:
        return
    cut = users[split % (len(users) - 1)] + 1
    first = orjson.dumps({**body, "messages": messages[:cut]})
    if read_plain_messages_typed(first) is None:
        return
    seen = SeenNative(KeptSlots(16 << 20), MESSAGES)
    _kept_typed(seen, first)
    raw = orjson.dumps(body)
    turn = seen.read(raw, "client")
    if turn is not None:
        _as_read_whole(turn, raw)


@settings(max_examples=1500, deadline=None)
@given(responses_bodies(turns=5), st.integers(0, 7))
def test_any_plain_input_read_over_its_earlier_turn_kept_unparsed(
        body: dict[str, Any], split: int) -> None:
    """A plain Responses input, its first turn (cut after a user message or an output)
    kept as the edge keeps a new body, then the whole input read over it: the body read
    whole (its view, figures and verdict), or declined; not kept answers (``store: false``)
    leave the input unparsed."""
    items = body["input"]
    cuts = [i + 1 for i, item in enumerate(items[:-1])
            if item.get("role") == "user" or item.get("type") == "function_call_output"]
    if plain_input(body) is None or not cuts:
        return
    first = orjson.dumps({**body, "input": items[:cuts[split % len(cuts)]]})
    typed = read_plain_input_typed(first)
    if typed is None or not typed.extensible:
        return
    seen = SeenNative(KeptSlots(16 << 20), RESPONSES)
    view = DeferredResponsesView(typed.items, (typed.neutral, typed.counted, typed.lead,
                                               typed.clean))
    seen.learn(first, "client", typed.body, view, typed.plain, None,
               span=(typed.start, typed.close))
    raw = orjson.dumps(body)
    turn = seen.read(raw, "client")
    if turn is None:
        return
    if isinstance(turn.view, DeferredResponsesView) and not turn.view.is_built:
        assert body.get("store") is False
        assert turn.shared == len(view.messages)
    _as_read_whole(turn, raw, read_plain_responses)


def test_a_sessions_second_turn_over_its_one_ask_keeps_the_history_unparsed() -> None:
    """A session's first turn is one ask (its only message, whose start is the array's):
    the second turn is read over it without parsing the history, and so are the next ones,
    also when something read a turn's view (a prefix comparison, the inspector)."""
    first = {**_FIRST, "messages": [{"role": "user", "content": "Read the file please."}]}
    seen = SeenNative(KeptSlots(16 << 20), MESSAGES)
    _kept_typed(seen, orjson.dumps(first))
    history = list(first["messages"])  # type: ignore[call-overload]
    for step in range(3):
        history += [{"role": "assistant", "content": [
                        {"type": "tool_use", "id": f"toolu_{step}", "name": "read_file",
                         "input": {"p": step}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": f"toolu_{step}",
                         "content": "text"}]}]
        raw = orjson.dumps({**first, "messages": history})
        turn = seen.read(raw, "client")
        assert turn is not None
        assert isinstance(turn.body["messages"], LazyMessages)
        assert not turn.body["messages"].parsed
        seen.learn(raw, "client", turn.body, turn.view, turn.plain, turn)
        # (read: its view built, its history parsed; the next turn is read unparsed still,
        # from the figures the view was made with)
        _as_read_whole(turn, raw)


async def test_a_plain_session_stays_unparsed_and_reports_its_context_as_read_whole(
        gateway_factory: GatewayFactory, fake: FakeAnthropic) -> None:
    """A plain Messages session (its breakpoint on the newest message, as Claude Code
    sends it): its turns are read over the one before with the history left unparsed, and
    say what fills their window as a gateway reading every body whole says it."""
    kept = await _gateway(gateway_factory, fake, 16)
    whole = await _gateway(gateway_factory, fake, 0)
    plain = [(what, history) for what, history in _session()
             if what.startswith(("first", "plain"))]
    for what, history in plain:
        reports = []
        for gw in (kept, whole):
            async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key-"
                                                "0123456789", max_retries=0) as client:
                answer = await client.messages.with_raw_response.create(
                    model="claude", max_tokens=256, system=SYSTEM, tools=TOOLS,  # type: ignore[arg-type]
                    thinking={"type": "enabled", "budget_tokens": 1024},
                    messages=_marked_last(history))  # type: ignore[arg-type]
                reports.append(answer.headers.get("x-gateway-context"))
        assert reports[0] is not None and reports[0] == reports[1], what
    turns = gateway_state(kept).messages_turns
    # (all but the first two: the second changed the first's one message, its breakpoint)
    assert turns.extended == turns.unparsed == len(plain) - 2
    # Nothing parsed the last turn's history after it was read (the context report took
    # what reading it counted): the next turn is read over its bytes alone again.
    newest = list(turns._kept._order.values())[-1][1]
    assert not newest.messages.parsed  # type: ignore[attr-defined]
