"""The referee's answers to accepted requests: real-looking ``chat.completion`` bodies and
``chat.completion.chunk`` SSE streams, deterministic apart from ids and timestamps.

The reply text is ``referee: accepted N messages``. When the request offers ``tools`` and
its last message is a user message containing the word ``TOOL``, the reply is instead one
call to the first tool with arguments ``{}`` (finish_reason ``tool_calls``).

Token counts are estimates: ``ceil(len(compact JSON) / 4)`` of the ``messages`` (and of the
``tools``, counted separately). The same estimate drives the context-window check.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_TOOL_WORD = re.compile(r"\bTOOL\b")


def estimate_tokens(value: object) -> int:
    """Approximate tokens of a JSON value: a quarter of its compact JSON length, rounded up."""
    if not value:
        return 0
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return math.ceil(len(text) / 4)


@dataclass(frozen=True, slots=True)
class Answer:
    """What the referee says: text, or one tool call (name and id)."""

    text: str | None
    tool_name: str | None = None
    tool_call_id: str | None = None

    @property
    def finish_reason(self) -> str:
        """'tool_calls' for a tool call, else 'stop'."""
        return "tool_calls" if self.tool_name is not None else "stop"


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _first_tool_name(body: Mapping[str, Any]) -> str | None:
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools or not isinstance(tools[0], dict):
        return None
    function = tools[0].get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) and name else None


def decide(body: Mapping[str, Any]) -> Answer:
    """The answer to an accepted request body."""
    messages = body["messages"]
    last = messages[-1]
    tool = _first_tool_name(body)
    asks_tool = last.get("role") == "user" and _TOOL_WORD.search(_text_of(last.get("content")))
    if tool is not None and asks_tool:
        return Answer(None, tool, f"call_{uuid.uuid4().hex[:24]}")
    return Answer(f"referee: accepted {len(messages)} messages")


def usage(body: Mapping[str, Any], answer: Answer) -> dict[str, int]:
    """Usage numbers for the answer, from the token estimate."""
    prompt = estimate_tokens(body.get("messages")) + estimate_tokens(body.get("tools"))
    completion = max(1, math.ceil(len(answer.text or "{}") / 4))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def new_completion_id() -> str:
    """A fresh ``chatcmpl-`` id."""
    return "chatcmpl-" + uuid.uuid4().hex[:29]


def _tool_call(answer: Answer, arguments: str, *, with_index: bool) -> dict[str, Any]:
    call: dict[str, Any] = {
        "id": answer.tool_call_id,
        "type": "function",
        "function": {"name": answer.tool_name, "arguments": arguments},
    }
    return {"index": 0, **call} if with_index else call


def completion(body: Mapping[str, Any], answer: Answer, completion_id: str) -> dict[str, Any]:
    """A non-streamed ``chat.completion`` body."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.text, "refusal": None}
    if answer.tool_name is not None:
        message["tool_calls"] = [_tool_call(answer, "{}", with_index=False)]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body["model"],
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": answer.finish_reason,
            }
        ],
        "usage": usage(body, answer),
        "system_fingerprint": None,
    }


def _pieces(text: str) -> list[str]:
    """The text split into word-sized deltas that join back to it."""
    return re.findall(r"\s*\S+", text) or [text]


def stream_events(body: Mapping[str, Any], answer: Answer, completion_id: str) -> list[bytes]:
    """The SSE events of a streamed answer: role chunk, deltas, finish chunk, optional usage
    chunk (``stream_options.include_usage``), then ``data: [DONE]``."""
    options = body.get("stream_options")
    include_usage = isinstance(options, dict) and options.get("include_usage") is True
    base = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body["model"],
        "system_fingerprint": None,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        extra = {"usage": None} if include_usage else {}
        return {**base, "choices": [choice], **extra}

    chunks: list[dict[str, Any]] = []
    if answer.tool_name is not None:
        first = _tool_call(answer, "", with_index=True)
        chunks.append(chunk({"role": "assistant", "content": None, "tool_calls": [first]}))
        arguments = {"index": 0, "function": {"arguments": "{}"}}
        chunks.append(chunk({"tool_calls": [arguments]}))
    else:
        chunks.append(chunk({"role": "assistant", "content": "", "refusal": None}))
        chunks.extend(chunk({"content": piece}) for piece in _pieces(answer.text or ""))
    chunks.append(chunk({}, answer.finish_reason))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": usage(body, answer)})
    events = [b"data: " + json.dumps(c, separators=(",", ":")).encode() + b"\n\n" for c in chunks]
    return [*events, b"data: [DONE]\n\n"]
