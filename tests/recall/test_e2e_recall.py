"""The recall tool end to end: after a compaction the model is offered
``context_recall``; when it calls it, the gateway answers from the session's archive and asks
again, and the client gets one ordinary answer. Real sockets, the real openai SDK, the
referee as the upstream (scripted to call the tool; it judges the follow-up's wire shape)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from gateway.referee import RecordedRequest, Referee
from tests.compaction.conftest import (
    Gateways,
    Session,
    accepted,
    agent_turn,
    chat_calls,
    compaction_header,
    demo_config,
    messages_prefix_bytes,
    overflow_reply,
    summary_calls,
)
from tests.factories import assistant, tool, tool_call, user

REFEREE_WINDOW = 1500
SECRET_FACT = "LAUNCH_CODE = 'ORCHID-7731'"
KEYS = ["key-alice", "key-bob"]


@pytest.fixture
async def ref() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai", context_window=REFEREE_WINDOW) as r:
        yield r


def first_turn() -> list[dict[str, Any]]:
    """A turn whose tool result holds a fact the later question needs."""
    return [
        user("Open config.py and check the launch settings."),
        assistant(None, [tool_call("call_cfg", "read_file", {"path": "config.py"})]),
        tool("call_cfg", "# launch settings\nRETRIES = 3\n" + SECRET_FACT + "\nTIMEOUT = 30\n"
             "UPSTREAM_TOKEN = 'upstream-secret-key'"),  # the gateway's own provider key
    ]


async def compacted_session(gateways: Gateways, ref: Referee, *,
                            compaction: dict[str, Any] | None = None,
                            model_compaction: dict[str, Any] | None = None,
                            ) -> tuple[Any, Session, RecordedRequest]:
    raw = demo_config(ref, compaction={"recall": True, **(compaction or {})},
                      gateway={"api_keys": KEYS})
    if model_compaction is not None:
        raw["model_list"][0]["model_info"]["compaction"] = model_compaction
    gw = await gateways.start(raw)
    s = Session(gw, session_id="recall-1", key="key-alice")
    await s.send(first_turn())
    for i in range(1, 9):
        mark = len(ref.requests)
        raw = await s.send(agent_turn(i))
        header = compaction_header(raw)
        if header is not None and header[0] == "summarized":
            return gw, s, accepted(chat_calls(ref, mark))[-1]
    raise AssertionError("the session never needed a compaction")


def recall_reply(arguments: dict[str, Any], call_id: str = "call_recall_a") -> dict[str, Any]:
    """A model answer that calls only the recall tool."""
    return {
        "id": "chatcmpl-recall", "object": "chat.completion", "created": 1_700_000_000,
        "model": "referee",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {
                "name": "context_recall", "arguments": json.dumps(arguments)}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


def recall_stream(arguments: dict[str, Any], text: str | None = None) -> bytes:
    """The same answer as an SSE stream: role, tool call head, arguments in two pieces
    (after some text first, when ``text`` is given)."""
    args = json.dumps(arguments)
    base = {"id": "chatcmpl-recall", "object": "chat.completion.chunk",
            "created": 1_700_000_000, "model": "referee"}
    deltas: list[tuple[dict[str, Any], str | None]] = [
        ({"role": "assistant", "content": None if text is None else ""}, None),
        *([({"content": text}, None)] if text else []),
        ({"tool_calls": [{"index": 0, "id": "call_recall_s", "type": "function",
                          "function": {"name": "context_recall", "arguments": ""}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": args[:7]}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": args[7:]}}]}, None),
        ({}, "tool_calls"),
    ]
    events = [b"data: " + json.dumps({**base, "choices": [
        {"index": 0, "delta": d, "finish_reason": f}]}).encode() + b"\n\n" for d, f in deltas]
    return b"".join(events) + b"data: [DONE]\n\n"


def offered_tool(record: RecordedRequest) -> str | None:
    tools = record.json().get("tools") or []
    return tools[-1]["function"]["name"] if tools else None


def text_of(record: RecordedRequest) -> str:
    return record.body.decode()


async def test_the_model_recalls_an_archived_fact_and_the_client_sees_a_plain_answer(
    gateways: Gateways, ref: Referee
) -> None:
    gw, s, compacted = await compacted_session(gateways, ref)
    # The compacted request offers the tool and its footer says to use it; the fact is gone
    # from what the model sees (it lives only in the archive).
    assert offered_tool(compacted) == "context_recall"
    summary = compacted.json()["messages"][-2]["content"]
    assert "Call the `context_recall` tool" in summary
    assert "ORCHID-7731" not in text_of(compacted)

    ref.script(200, recall_reply({"query": "launch_code"}))
    mark = len(ref.requests)
    raw = await s.send([user("What is the launch code in config.py?")])
    asked, again = chat_calls(ref, mark)
    assert summary_calls(ref, mark) == []
    # The upstream saw the archived text in the recall's tool result, after the recall call.
    call_msg, result_msg = again.json()["messages"][-2:]
    assert call_msg["role"] == "assistant"
    assert [c["function"]["name"] for c in call_msg["tool_calls"]] == ["context_recall"]
    assert result_msg["role"] == "tool" and result_msg["tool_call_id"] == "call_recall_a"
    assert "ORCHID-7731" in result_msg["content"]
    # The gateway's provider key never comes out of a recall, even from the client's text.
    assert "upstream-secret-key" not in result_msg["content"]
    assert "UPSTREAM_TOKEN = '***'" in result_msg["content"]
    assert again.status == 200  # the referee accepted the follow-up's wire shape
    # ... the first ask had the client's history as usual (the same compacted prefix).
    n = len(compacted.json()["messages"])
    assert messages_prefix_bytes(asked, n) == messages_prefix_bytes(compacted, n)
    assert asked.json()["messages"][n:] == again.json()["messages"][n:-2]

    # The client: one ordinary answer, no trace of the recall turn.
    completion = raw.parse()
    message = completion.choices[0].message
    assert message.content == f"referee: accepted {len(again.json()['messages'])} messages"
    assert not message.tool_calls and completion.choices[0].finish_reason == "stop"
    assert "context_recall" not in raw.http_response.text
    assert raw.headers["x-gateway-recall"] == "1"
    (chat,) = [sp for sp in gw.spans.get_finished_spans() if sp.name == "gateway.chat"
               and sp.attributes and sp.attributes.get("gateway.recall.calls")]
    assert [e.name for e in chat.events] == ["gateway.recall"]
    async with aiohttp.ClientSession() as http, http.get(
            gw.root + "/metrics", headers={"Authorization": "Bearer key-alice"}) as r:
        assert 'gateway_recalls_total{model="demo"} 1' in await r.text()

    # The next turn carries the client's history (no recall turns): same prefix bytes, so
    # the provider's prompt cache keeps hitting; the tool table is the same too.
    mark = len(ref.requests)
    raw = await s.send([user("Thanks. Anything else?")])
    (nxt,) = chat_calls(ref, mark)
    assert messages_prefix_bytes(nxt, n) == messages_prefix_bytes(compacted, n)
    assert nxt.json()["tools"] == compacted.json()["tools"]
    assert "x-gateway-recall" not in raw.headers


async def test_a_normal_answer_passes_through_untouched(gateways: Gateways,
                                                        ref: Referee) -> None:
    _, s, compacted = await compacted_session(gateways, ref)
    mark = len(ref.requests)
    raw = await s.send([user("Carry on with the next step.")])
    (asked,) = chat_calls(ref, mark)
    assert offered_tool(asked) == "context_recall"
    n = len(compacted.json()["messages"])
    assert messages_prefix_bytes(asked, n) == messages_prefix_bytes(compacted, n)
    assert raw.parse().choices[0].message.content == (
        f"referee: accepted {len(asked.json()['messages'])} messages")
    assert "x-gateway-recall" not in raw.headers


async def test_streamed_recall_then_streamed_answer(gateways: Gateways, ref: Referee) -> None:
    _, s, _ = await compacted_session(gateways, ref)
    ref.script(200, recall_stream({"query": "ORCHID", "from_line": 1}),
               {"Content-Type": "text/event-stream"})
    s.history.append(user("Quote the launch code line from config.py."))
    mark = len(ref.requests)
    async with s.client() as c:
        stream = await c.chat.completions.create(
            model="demo", messages=s.history, stream=True,
            extra_headers={"x-session-id": s.session_id})
        text = ""
        async for chunk in stream:
            if chunk.choices:
                delta = chunk.choices[0].delta
                assert not delta.tool_calls, "the client never sees the recall call"
                text += delta.content or ""
    _, again = chat_calls(ref, mark)
    assert again.json()["stream"] is True
    assert "ORCHID-7731" in again.json()["messages"][-1]["content"]
    assert text == f"referee: accepted {len(again.json()['messages'])} messages"


async def test_another_key_cannot_recall_the_first_keys_session(gateways: Gateways,
                                                                ref: Referee) -> None:
    gw, _, compacted = await compacted_session(gateways, ref)
    # Bob replays what Alice's compacted request looked like, under her session id, and the
    # upstream calls the recall tool anyway: the gateway offered no tool and answers nothing.
    bob_history = [*compacted.json()["messages"],
                   user("What is the launch code in config.py?")]
    ref.script(200, recall_reply({"query": "launch_code"}, "call_bob"))
    mark = len(ref.requests)
    async with openai.AsyncOpenAI(base_url=gw.base_url,
                                  api_key="key-bob", max_retries=0) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=bob_history, extra_headers={"x-session-id": "recall-1"})
    (asked,) = chat_calls(ref, mark)  # no follow-up: nothing was answered for Bob
    assert offered_tool(asked) is None
    assert "x-gateway-recall" not in raw.headers
    assert "ORCHID-7731" not in raw.http_response.text
    assert all("ORCHID-7731" not in text_of(r) for r in ref.requests[mark:])


async def send_with_tools(gw: Any, s: Session, question: str,
                          tools: list[dict[str, Any]]) -> Any:
    s.history.append(user(question))
    async with s.client() as c:
        return await c.chat.completions.with_raw_response.create(
            model="demo", messages=s.history, tools=tools,  # type: ignore[arg-type]
            extra_headers={"x-session-id": s.session_id})


def client_tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "client tool",
                                             "parameters": {"type": "object"}}}


async def test_mixed_answers_get_the_recall_answered_and_the_model_asked_again(
    gateways: Gateways, ref: Referee
) -> None:
    gw, s, _ = await compacted_session(gateways, ref)
    mixed = recall_reply({"query": "ORCHID"})
    mixed["choices"][0]["message"]["tool_calls"].insert(0, {
        "id": "call_client", "type": "function",
        "function": {"name": "read_file", "arguments": "{\"path\": \"config.py\"}"}})
    ref.script(200, mixed)
    mark = len(ref.requests)
    raw = await send_with_tools(gw, s, "What is the launch code?", [client_tool("read_file")])
    asked, again = chat_calls(ref, mark)
    assert [t["function"]["name"] for t in asked.json()["tools"]] == [
        "read_file", "context_recall"]
    call_msg, result_msg = again.json()["messages"][-2:]
    # Only the recall call is answered and shown to the model: its own call to the client's
    # tool is left for the model to make again, where the client sees it.
    assert [c["id"] for c in call_msg["tool_calls"]] == ["call_recall_a"]
    assert "ORCHID-7731" in result_msg["content"]
    message = raw.parse().choices[0].message
    assert message.content and message.content.startswith("referee: accepted")
    assert not message.tool_calls


async def test_recall_rounds_are_bounded(gateways: Gateways, ref: Referee) -> None:
    _, s, _ = await compacted_session(gateways, ref, compaction={"recall_rounds": 1})
    ref.script(200, recall_reply({"query": "ORCHID"}))
    ref.script(200, recall_reply({"query": "RETRIES"}, "call_recall_b"))
    mark = len(ref.requests)
    raw = await s.send([user("What is the launch code?")])
    asked, again, last = chat_calls(ref, mark)
    assert "last recall this request allows" in again.json()["messages"][-1]["content"]
    # Still asking after the last round: one more answer with tools off, never the call.
    assert last.json()["tool_choice"] == "none"
    assert last.json()["messages"] == again.json()["messages"]
    assert "tool_choice" not in asked.json()
    assert raw.headers["x-gateway-recall"] == "1"
    assert raw.parse().choices[0].message.content.startswith("referee: accepted")


async def test_a_client_tool_of_the_same_name_keeps_its_name_and_its_calls(
    gateways: Gateways, ref: Referee
) -> None:
    gw, s, _ = await compacted_session(gateways, ref)
    ref.script(200, recall_reply({"query": "mine"}, "call_clients_own"))
    mark = len(ref.requests)
    raw = await send_with_tools(gw, s, "Use your tool.", [client_tool("context_recall")])
    (asked,) = chat_calls(ref, mark)
    names = [t["function"]["name"] for t in asked.json()["tools"]]
    assert names == ["context_recall", "context_recall_gw"]
    # The call was to the client's own tool: relayed to the client, not answered.
    (call,) = raw.parse().choices[0].message.tool_calls or []
    assert call.function.name == "context_recall" and call.id == "call_clients_own"
    assert "x-gateway-recall" not in raw.headers


async def test_recall_can_be_switched_off_per_model(gateways: Gateways, ref: Referee) -> None:
    _, _, compacted = await compacted_session(gateways, ref,
                                              model_compaction={"recall": False})
    assert "tools" not in compacted.json()
    summary = compacted.json()["messages"][-2]["content"]
    assert "## Context Recovery" in summary and "context_recall" not in summary


async def test_a_refused_follow_up_falls_back_to_the_request_without_recall(
    gateways: Gateways, ref: Referee
) -> None:
    _, s, _ = await compacted_session(gateways, ref)
    ref.script(200, recall_reply({"query": "ORCHID"}))
    # The recall's result made the follow-up too big for the window.
    ref.script(overflow_reply(window=REFEREE_WINDOW, tokens=REFEREE_WINDOW + 400))
    mark = len(ref.requests)
    raw = await s.send([user("What is the launch code?")])
    asked, refused, fallback = chat_calls(ref, mark)
    assert refused.status == 400 and "ORCHID-7731" in text_of(refused)
    # Asked as if there were no recall tool: the client's request, answered normally.
    assert "tools" not in fallback.json()
    assert fallback.json()["messages"] == asked.json()["messages"]
    assert raw.parse().choices[0].message.content.startswith("referee: accepted")
    assert raw.headers["x-gateway-recall"] == "1"


async def test_a_fork_under_the_same_session_id_recalls_only_its_own_lines(
    gateways: Gateways, ref: Referee
) -> None:
    gw, first, _ = await compacted_session(gateways, ref)
    # Another conversation under the same session id (as two clients sharing a
    # fingerprint would be): its archive lines follow the first one's in the same archive.
    other = Session(gw, session_id=first.session_id, key="key-alice")
    for i in range(20, 28):
        raw = await other.send(agent_turn(i))
        if (compaction_header(raw) or ("",))[0] == "summarized":
            break
    else:
        raise AssertionError("the second conversation never needed a compaction")
    ref.script(200, recall_reply({"query": "ORCHID"}))
    mark = len(ref.requests)
    await other.send([user("What is the launch code?")])
    _, again = chat_calls(ref, mark)
    result = again.json()["messages"][-1]["content"]
    assert "0 matching line(s)" in result and "ORCHID" not in result.replace(
        "'ORCHID'", "")
    # It is told which lines are its own: the ones after the first conversation's.
    found = re.search(r"lines of this conversation: (\d+) to (\d+)\)", result)
    assert found is not None, result
    archived_first = len(first.history) - 1  # all but the answer to its last request
    assert int(found.group(1)) == archived_first + 1


async def test_a_stream_that_speaks_first_then_recalls_continues_as_one_answer(
    gateways: Gateways, ref: Referee
) -> None:
    gw, s, _ = await compacted_session(gateways, ref)
    ref.script(200, recall_stream({"query": "ORCHID"}, text="Let me look that up. "),
               {"Content-Type": "text/event-stream"})
    s.history.append(user("Quote the launch code line from config.py."))
    mark = len(ref.requests)
    async with s.client() as c:
        stream = await c.chat.completions.create(
            model="demo", messages=s.history, stream=True,
            extra_headers={"x-session-id": s.session_id})
        text, reasons = "", []
        async for chunk in stream:
            if chunk.choices:
                delta = chunk.choices[0].delta
                assert not delta.tool_calls, "the client never sees the recall call"
                text += delta.content or ""
                reasons.append(chunk.choices[0].finish_reason)
    _, again = chat_calls(ref, mark)
    spoken, result = again.json()["messages"][-2:]
    # The model's text before its call stays with the call; the result follows it.
    assert spoken["content"] == "Let me look that up. "
    assert [c["function"]["name"] for c in spoken["tool_calls"]] == ["context_recall"]
    assert "ORCHID-7731" in result["content"]
    # The client got the text it already saw, continued by the next answer: one answer.
    assert text == ("Let me look that up. referee: accepted "
                    f"{len(again.json()['messages'])} messages")
    assert "tool_calls" not in reasons and reasons[-1] == "stop"
    # Answered after the headers went out: counted all the same.
    async with aiohttp.ClientSession() as http, http.get(
            gw.root + "/metrics", headers={"Authorization": "Bearer key-alice"}) as r:
        assert 'gateway_recalls_total{model="demo"} 1' in await r.text()
