"""The summary request: dynamic-tool context stripped, history rendered as text."""

from __future__ import annotations

import copy
import json
from typing import Any

from gateway.compaction import build_summary_request, strip_dynamic_tool_context

TOOLS = [{"type": "function", "function": {"name": "deploy_prod", "parameters": {}}}]


def _history() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "SYSTEM PROMPT TEXT"},
        {"role": "user", "content": "Migrate the DB.", "tools": TOOLS},
        {"role": "user", "content": "<tools_added>\n- deploy_prod: deploys\n</tools_added>"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<tools_removed>old_tool</tools_removed>"},
                {"type": "text", "text": "Here is the schema diagram."},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
        {
            "role": "assistant",
            "content": "Reading the schema.\n<tools-added>grep</tools-added>",
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "schema.sql"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": "CREATE TABLE users (id int);"},
        {"role": "assistant", "content": "The users table needs an index."},
    ]


def test_dynamic_tool_context_is_stripped() -> None:
    history = _history()
    before = copy.deepcopy(history)
    stripped = strip_dynamic_tool_context(history)
    assert history == before  # never mutated
    assert all("tools" not in m for m in stripped)
    dumped = json.dumps(stripped)
    assert "tools_added" not in dumped and "tools_removed" not in dumped
    assert "tools-added" not in dumped and "deploy_prod" not in dumped
    assert len(stripped) == len(history) - 1  # the announcement-only message is gone
    assert stripped[0] is history[0] and stripped[-1] is history[-1]
    assert stripped[1] == {"role": "user", "content": "Migrate the DB."}
    assert stripped[2]["content"] == [history[3]["content"][1], history[3]["content"][2]]
    assert stripped[3]["content"] == "Reading the schema."
    assert stripped[3]["tool_calls"] is history[4]["tool_calls"]


def test_summary_request_renders_the_history_as_text_without_tools() -> None:
    body = build_summary_request(_history(), model="gpt-4o-mini")
    assert body["model"] == "gpt-4o-mini"
    assert "tools" not in body and body["stream"] is False
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    instructions = body["messages"][0]["content"]
    for section in ("## Task", "## Key Decisions", "## Files", "## Current State", "## Next Steps"):
        assert section in instructions
    text = body["messages"][1]["content"]
    assert isinstance(text, str)
    assert "Migrate the DB." in text
    assert "[image]" in text and "base64" not in text
    assert '[tool call call_9] read_file({"path": "schema.sql"})' in text
    assert "[tool result call_9]\nCREATE TABLE users (id int);" in text
    assert "The users table needs an index." in text
    assert "SYSTEM PROMPT TEXT" not in text
    assert "deploy_prod" not in json.dumps(body) and "tools_added" not in text
    assert text.index("Migrate") < text.index("read_file") < text.index("needs an index")


def test_custom_instructions_and_max_tokens() -> None:
    body = build_summary_request(
        [{"role": "user", "content": "hi"}], model="m", instructions="Be brief.", max_tokens=500
    )
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["max_tokens"] == 500


def test_one_huge_message_is_clipped_in_the_transcript_keeping_both_ends() -> None:
    from gateway.compaction.summary_request import MAX_MESSAGE_CHARS, render_transcript

    huge = "START " + "x" * 500_000 + " END"
    text = render_transcript([{"role": "tool", "tool_call_id": "c1", "content": huge}])
    assert len(text) < MAX_MESSAGE_CHARS + 200
    assert "START" in text and "END" in text and "characters omitted" in text
