"""A 60-turn coding session that reads the same four files again and again (issue 22): the
cheap reduction keeps each file's latest read and replaces the earlier ones by a one-line
note, with no summary call; the earlier reads stay in the archive, where the recall tool
finds them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.compaction.reduce import SUPERSEDED_PREFIX
from gateway.referee import Referee
from tests.compaction.conftest import (
    Gateways,
    Session,
    accepted,
    chat_calls,
    compaction_header,
    demo_config,
    summary_calls,
)
from tests.factories import assistant, tool, tool_call, user

FILES = ("alpha.py", "beta.py", "gamma.py", "delta.py")
WINDOW = 16_000


@pytest.fixture
async def ref() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai", context_window=WINDOW) as r:
        yield r


def contents(path: str, turn: int) -> str:
    """The file as read at ``turn``: it is edited between reads, each read says when."""
    head = f"# {path} as read at turn {turn}\n"
    return head + "\n".join(f"def {path[:-3]}_{n}(value):  # revision {turn}, line {n}"
                            for n in range(30))


def reread_turn(turn: int) -> list[dict[str, Any]]:
    path = FILES[turn % len(FILES)]
    call = f"call_{turn}"
    return [user(f"Turn {turn}: look at {path} again and fix the next handler."),
            assistant(None, [tool_call(call, "read_file", {"path": path})]),
            tool(call, contents(path, turn))]


def recall_reply(arguments: dict[str, Any]) -> dict[str, Any]:
    """A model answer that calls only the recall tool."""
    return {
        "id": "chatcmpl-recall", "object": "chat.completion", "created": 1_700_000_000,
        "model": "referee",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": "call_recall", "type": "function", "function": {
                "name": "context_recall", "arguments": json.dumps(arguments)}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
    }


async def test_rereads_keep_one_copy_of_each_file_and_recall_finds_an_earlier_one(
    gateways: Gateways, ref: Referee
) -> None:
    gw = await gateways.start(demo_config(ref, window=WINDOW, compaction={"recall": True}))
    s = Session(gw, session_id="reread-1")
    hows = []
    for turn in range(60):
        raw = await s.send(reread_turn(turn))
        header = compaction_header(raw)
        hows.append(header[0] if header else None)
    assert "reduced" in hows, hows
    assert summary_calls(ref) == [], "the reduction alone was enough: no summary call"
    assert all(r.status == 200 for r in ref.requests), "no overflow reached the upstream"
    # The compacted history (the last compaction, as sent) keeps each file's latest read.
    at = max(n for n, how in enumerate(hows) if how == "reduced")
    last = accepted(chat_calls(ref))[at].json()["messages"]
    results = [m["content"] for m in last if m["role"] == "tool"]
    for index, path in enumerate(FILES):
        latest = max(t for t in range(at + 1) if t % len(FILES) == index)
        full = [r for r in results if r.startswith(f"# {path} as read at turn")]
        assert full == [contents(path, latest)], f"one copy of {path}: its latest read"
    notes = [r for r in results if r.startswith(SUPERSEDED_PREFIX)]
    assert len(notes) == at + 1 - len(FILES)
    assert all("read_file(" in n and "session archive" in n for n in notes)
    # Every user message is still there, verbatim: nothing was summarized or dropped.
    asks = [m["content"] for m in last if m["role"] == "user"]
    assert asks == [f"Turn {t}: look at {FILES[t % 4]} again and fix the next handler."
                    for t in range(at + 1)]

    # The model asks for an earlier read: the recall tool answers from the archive.
    assert "beta.py as read at turn 5\\n" not in json.dumps(last)
    ref.script(200, recall_reply({"query": "beta.py as read at turn 5"}))
    mark = len(ref.requests)
    raw = await s.send([user("What did beta.py look like at turn 5?")])
    _, again = chat_calls(ref, mark)
    result = again.json()["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_recall"
    assert "beta.py as read at turn 5" in result["content"]
    assert "revision 5, line 0" in result["content"]
    assert raw.headers["x-gateway-recall"] == "1"
