"""A new clean chat body read without building its messages (``wires.chat_typed``), end to
end: what the upstream receives is the client's history whichever way the body leaves the
gateway (its own bytes, re-serialized for a renamed model, rebuilt after a refusal, read
over by the session's next turn), and what the gateway reports of it is what it reports of a
body read the general way."""

from __future__ import annotations

import asyncio
import gc
import json
import traceback
from typing import Any

import aiohttp
import orjson

from gateway.projection.lazy_messages import LazyMessages
from gateway.wires.chat_typed import CleanChat, read_clean_chat
from tests.conftest import GatewayFactory, model_entry
from tests.fakes.faulty_upstream import FaultyUpstream, answer, chunk_event, ok_json, stream

HISTORY: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent. Tabs\tand \"quotes\" — naïve."},
    {"role": "user", "content": [{"type": "text", "text": "What is in a.py?"},
                                 {"type": "image_url", "image_url": {"url": "data:image/png;"
                                                                    "base64,iVBORw0KGgo=",
                                                                    "detail": "low"}}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "1  x = 1\n2  y = 2\n"},
    {"role": "assistant", "content": "It sets x and y."},
    {"role": "user", "content": "Now fix the test.", "name": "ann"},
]
# Mistral's refusal of a tool call id in another provider's form: the strict rung rewrites
# the ids, so the body is rebuilt from the client's messages.
REFUSAL = (b'{"object":"error","message":"Tool call id was call_1 but must be a-z, A-Z, 0-9, '
           b'with a length of 9.","type":"BadRequestError","param":null,"code":400}')


async def _post(url: str, raw: bytes) -> tuple[int, dict[str, str], Any]:
    async with aiohttp.ClientSession() as http, http.post(
            url, data=raw, headers={"Content-Type": "application/json"}) as reply:
        return reply.status, dict(reply.headers), await reply.json()


async def test_a_renamed_model_and_a_refusal_send_the_clients_history(
        gateway_factory: GatewayFactory) -> None:
    async with FaultyUpstream() as up:
        up.then(ok_json(), answer(400, REFUSAL, {"Content-Type": "application/json"}),
                ok_json())
        gw = await gateway_factory({"model_list": [
            model_entry("coder", up.base_url, model="openai/gpt-4o")],
            "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05}})
        # "model" first: the upstream's name cannot be spliced in at the end of the bytes,
        # so the body is serialized again, messages and all.
        raw = orjson.dumps({"model": "coder", "messages": HISTORY, "temperature": 0})
        status, _, _ = await _post(gw.base_url + "/chat/completions", raw)
        assert status == 200
        sent = up.received[0].json()
        assert sent["model"] == "gpt-4o" and sent["messages"] == HISTORY
        # The same body again (read over the first now): refused once, then sent rebuilt.
        status, _, reply = await _post(gw.base_url + "/chat/completions", raw)
        assert status == 200, reply
        assert up.received[1].json()["messages"] == HISTORY
        rebuilt = up.received[2].json()["messages"]
        new_id = rebuilt[2]["tool_calls"][0]["id"]
        assert len(new_id) == 9 and rebuilt[3]["tool_call_id"] == new_id
        assert [{k: v for k, v in m.items() if k not in ("tool_calls", "tool_call_id")}
                for m in rebuilt] == [{k: v for k, v in m.items()
                                       if k not in ("tool_calls", "tool_call_id")}
                                      for m in HISTORY]


async def test_the_next_turn_is_read_over_it_and_reports_the_same_context(
        gateway_factory: GatewayFactory) -> None:
    async with FaultyUpstream() as up:
        gw = await gateway_factory({"model_list": [
            model_entry("coder", up.base_url, model="openai/coder", max_input_tokens=100_000)]})
        first = {"model": "coder", "messages": HISTORY, "tools": [{"type": "function",
                 "function": {"name": "read_file", "parameters": {"type": "object"}}}]}
        raw = json.dumps(first, indent=1).encode()
        status, headers, _ = await _post(gw.base_url + "/chat/completions", raw)
        assert status == 200
        first_context = headers["x-gateway-context"]
        later = [{"role": "assistant", "content": "Fixed."},
                 {"role": "user", "content": "Thanks; commit it."}]
        nxt = json.dumps({**first, "messages": [*HISTORY, *later]}, indent=1).encode()
        status, headers, _ = await _post(gw.base_url + "/chat/completions", nxt)
        assert status == 200
        assert up.received[0].body == raw and up.received[1].body == nxt  # as sent
        # The same history read the general way (a field the typed read does not know, on a
        # gateway that never saw the first turn) reports the same context.
        gw2 = await gateway_factory({"model_list": [
            model_entry("coder", up.base_url, model="openai/coder", max_input_tokens=100_000)]})
        general = [*HISTORY, later[0], {**later[1], "x_client_note": "kept as sent"}]
        assert read_clean_chat(orjson.dumps({**first, "messages": general}), count=True) is None
        status, headers2, _ = await _post(gw2.base_url + "/chat/completions",
                                          orjson.dumps({**first, "messages": general}))
        assert status == 200
        assert headers["x-gateway-context"] == headers2["x-gateway-context"]
        assert first_context != headers["x-gateway-context"]


async def test_an_open_stream_holds_nothing_of_the_body_it_was_read_from(
        gateway_factory: GatewayFactory) -> None:
    """A stream may stay open for minutes: while it is relayed, nothing of its request's
    body (the typed read, the unparsed messages over the client's bytes) stays alive."""
    hold = asyncio.Event()
    async with FaultyUpstream() as up:
        up.then(*(stream(chunk_event("working"), hold=hold) for _ in range(3)))
        gw = await gateway_factory({
            "model_list": [model_entry("coder", up.base_url, model="openai/coder")],
            "gateway": {"history_cache_mb": 0}})  # (no body kept for a next turn)
        marker = "a history only these streams sent"
        bodies = [orjson.dumps({"model": "coder", "stream": True, "messages": [
            {"role": "system", "content": f"{marker} #{i}"}, *HISTORY]}) for i in range(3)]
        assert all(read_clean_chat(b, count=True) is not None for b in bodies)
        async with aiohttp.ClientSession() as http:
            replies = [await http.post(gw.base_url + "/chat/completions", data=b,
                                       headers={"Content-Type": "application/json"})
                       for b in bodies]
            try:
                for reply in replies:
                    assert reply.status == 200 and b"working" in await reply.content.readany()
                gc.collect()
                alive = [o for o in gc.get_objects() if isinstance(o, CleanChat)
                         or (isinstance(o, LazyMessages) and not o.parsed
                             and marker in repr(bytes(o._source or b"")))]
                # (per-session telemetry keeps a session's last turn: one at most each)
                assert not any(isinstance(o, CleanChat) for o in alive)
                assert len(alive) <= len(bodies) * 2
            finally:
                hold.set()
                for reply in replies:
                    reply.close()


async def test_a_session_back_after_many_others_is_counted_without_reading_its_history(
        gateway_factory: GatewayFactory, monkeypatch: Any) -> None:
    """More sessions than per-session telemetry remembers: a session's next turn, read over
    its kept body, is counted from what the edge counted of that body (not by walking its
    history again), the same counts as a whole read; and its history is never parsed."""
    async with FaultyUpstream() as up:
        entry = model_entry("coder", up.base_url, model="openai/coder", max_input_tokens=100_000)
        gw = await gateway_factory({"model_list": [entry]})

        def turn(session: str, later: list[dict[str, Any]]) -> bytes:
            messages = [{"role": "system", "content": f"Agent for {session}."}, *HISTORY, *later]
            return orjson.dumps({"model": "coder", "messages": messages})

        status, _, _ = await _post(gw.base_url + "/chat/completions", turn("a", []))
        assert status == 200
        for n in range(40):  # (more than the 32 sessions remembered)
            assert (await _post(gw.base_url + "/chat/completions", turn(f"s{n}", [])))[0] == 200
        parsed: list[str] = []  # where unparsed messages were read
        fill = LazyMessages.fill

        def counting_fill(self: LazyMessages) -> None:
            if not self.parsed:
                parsed.append("".join(traceback.format_stack(limit=8)))
            fill(self)

        monkeypatch.setattr(LazyMessages, "fill", counting_fill)
        later = [{"role": "assistant", "content": "Fixed."}, {"role": "user", "content": "Go."}]
        status, headers, _ = await _post(gw.base_url + "/chat/completions", turn("a", later))
        assert status == 200
        assert not parsed, parsed[0]
        monkeypatch.setattr(LazyMessages, "fill", fill)
        whole = await gateway_factory({"model_list": [entry]})
        status, headers2, _ = await _post(whole.base_url + "/chat/completions",
                                          turn("a", later))
        assert status == 200
        assert headers["x-gateway-context"] == headers2["x-gateway-context"]


async def test_a_field_no_reader_can_hold_is_a_clear_400_not_a_crash(
        gateway_factory: GatewayFactory) -> None:
    """A top-level number past a double's range in a body whose messages are clean: the typed
    read leaves it to the general read, which names the problem in the client's format."""
    async with FaultyUpstream() as up:
        gw = await gateway_factory({"model_list": [model_entry("coder", up.base_url)]})
        messages = orjson.dumps(HISTORY)
        for value in (b"1e999999", b"-1e400"):
            raw = b'{"model": "coder", "seed": ' + value + b', "messages": ' + messages + b"}"
            status, _, reply = await _post(gw.base_url + "/chat/completions", raw)
            assert status == 400, reply
            assert "not valid JSON" in reply["error"]["message"]
        assert up.received == []
