"""Reading a model's answer on the OpenAI Chat Completions wire, for the recall tool: the
tool calls of a ``chat.completion`` body, and of a ``chat.completion.chunk`` SSE stream
(incrementally, so a stream is held back only until its first events show what it is).
Pure: bytes in, values out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from gateway.providers.sse import SseReader

Signal = Literal["text", "tools"]


@dataclass(slots=True)
class ToolCall:
    """One function call of an answer."""

    id: str | None
    name: str
    arguments: str = ""

    def wire(self, fallback_id: str) -> dict[str, Any]:
        """The call as an assistant message's ``tool_calls`` entry."""
        return {"id": self.id or fallback_id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(slots=True)
class ModelAnswer:
    """The first choice of an answer: its text and its tool calls."""

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None

    def calls_named(self, name: str) -> list[ToolCall]:
        """The calls of the tool ``name``."""
        return [c for c in self.tool_calls if c.name == name]


def _calls(raw_calls: object) -> list[ToolCall]:
    out: list[ToolCall] = []
    if isinstance(raw_calls, list):
        for call in raw_calls:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                args = fn.get("arguments")
                ident = call.get("id")
                out.append(ToolCall(ident if isinstance(ident, str) else None, fn["name"],
                                    args if isinstance(args, str) else ""))
    return out


def answer_from_completion(raw: bytes) -> ModelAnswer | None:
    """The first choice of a ``chat.completion`` body, or None when it is not one."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    choices = data.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    return ModelAnswer(content if isinstance(content, str) else None,
                       _calls(message.get("tool_calls")), choices[0].get("finish_reason"))


class SseEvents:
    """The JSON objects of a chat stream's events (``gateway.providers.sse``); ``done``
    turns true at ``data: [DONE]``."""

    def __init__(self) -> None:
        self._reader = SseReader()
        self.done = False

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """The objects of the events ``chunk`` completes."""
        out: list[dict[str, Any]] = []
        for event in self._reader.feed(chunk):
            if event.done:
                self.done = True
                continue
            value = event.json()
            if isinstance(value, dict):
                out.append(value)
        return out


def _delta(chunk: dict[str, Any]) -> tuple[dict[str, Any], str | None] | None:
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    delta = choices[0].get("delta")
    reason = choices[0].get("finish_reason")
    return (delta if isinstance(delta, dict) else {}), (reason if isinstance(reason, str)
                                                         else None)


def signal(chunk: dict[str, Any]) -> Signal | None:
    """What one stream chunk shows: ``"tools"`` at the first tool-call delta, ``"text"`` at
    the first text (or an error, or the end); None while it shows nothing yet (a role-only
    delta, empty text, a usage-only chunk)."""
    if "error" in chunk:
        return "text"
    found = _delta(chunk)
    if found is None:
        return None
    delta, reason = found
    if delta.get("tool_calls"):
        return "tools"
    content = delta.get("content")
    if (isinstance(content, str) and content) or reason is not None:
        return "text"
    return None


class StreamAssembler:
    """Builds the first choice of a streamed answer from its chunks."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, ToolCall] = {}
        self._reason: str | None = None

    def add(self, chunk: dict[str, Any]) -> None:
        """Take one chunk's delta."""
        found = _delta(chunk)
        if found is None:
            return
        delta, reason = found
        self._reason = reason or self._reason
        content = delta.get("content")
        if isinstance(content, str):
            self._text.append(content)
        for position, call in enumerate(delta.get("tool_calls") or ()):
            if not isinstance(call, dict):
                continue
            index = call.get("index")
            key = index if isinstance(index, int) else position
            raw_fn = call.get("function")
            fn: dict[str, Any] = raw_fn if isinstance(raw_fn, dict) else {}
            current = self._calls.get(key)
            if current is None:
                current = self._calls[key] = ToolCall(None, "")
            if isinstance(call.get("id"), str):
                current.id = call["id"]
            name = fn.get("name")
            if isinstance(name, str) and not (current.name and current.name.endswith(name)):
                current.name += name  # some servers repeat the whole name in every delta
            if isinstance(fn.get("arguments"), str):
                current.arguments += fn["arguments"]

    def answer(self) -> ModelAnswer:
        """The answer so far."""
        text = "".join(self._text)
        calls = [self._calls[k] for k in sorted(self._calls)]
        return ModelAnswer(text or None, calls, self._reason)
