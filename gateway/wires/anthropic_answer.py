"""Chat Completions answers -> Anthropic Messages objects and SSE events.

One state machine serves both: a stream feeds it chunk by chunk and sends the events as
they come (``message_start``, ``content_block_start``/``_delta``/``_stop``,
``message_delta``, ``message_stop``); a whole answer is fed as one chunk and the finished
message object is read back.
"""

from __future__ import annotations

import secrets
from typing import Any

import orjson

from gateway.wires.errors import anthropic_type

_STOP = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
         "function_call": "tool_use", "content_filter": "refusal"}


def _event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class AnthropicAnswer:
    """Builds an Anthropic message from chat chunks (see the module docstring)."""

    def __init__(self, model: str) -> None:
        self.message: dict[str, Any] = {
            "id": "msg_" + secrets.token_hex(12), "type": "message", "role": "assistant",
            "model": model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        self._started = False
        self._open: str | None = None  # "text" or "tool:<chat index>"
        self._args: dict[int, str] = {}  # content index -> arguments so far

    def feed(self, chunk: Any) -> list[bytes]:
        """The events for one chat chunk (``message_start`` first)."""
        events: list[bytes] = []
        if not isinstance(chunk, dict):
            return events
        if isinstance(chunk.get("error"), dict):
            return [*events, self.error_event(chunk["error"])]
        if not self._started:
            self._started = True
            self._usage(chunk.get("usage"))
            start = {**self.message, "content": [], "usage": dict(self.message["usage"])}
            events.append(_event("message_start", {"type": "message_start", "message": start}))
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                if self._open != "text":
                    events += self._close()
                    events += self._start({"type": "text", "text": ""}, "text")
                self.message["content"][-1]["text"] += text
                events.append(self._delta({"type": "text_delta", "text": text}))
            for call in delta.get("tool_calls") or ():
                events += self._tool_delta(call)
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                self.message["stop_reason"] = _STOP.get(reason, "end_turn")
        self._usage(chunk.get("usage"))
        return events

    def _tool_delta(self, call: dict[str, Any]) -> list[bytes]:
        events: list[bytes] = []
        key = f"tool:{call.get('index', 0)}"
        function = call.get("function") or {}
        if self._open != key:
            events += self._close()
            tool_id = call.get("id") or "toolu_" + secrets.token_hex(8)
            block: dict[str, Any] = {"type": "tool_use", "id": tool_id,
                                     "name": function.get("name") or "", "input": {}}
            events += self._start(block, key)
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            index = len(self.message["content"]) - 1
            self._args[index] = self._args.get(index, "") + arguments
            events.append(self._delta({"type": "input_json_delta", "partial_json": arguments}))
        return events

    def _start(self, block: dict[str, Any], key: str) -> list[bytes]:
        self.message["content"].append(block)
        self._open = key
        index = len(self.message["content"]) - 1
        shown = {**block, "input": {}} if block["type"] == "tool_use" else dict(block)
        return [_event("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": shown})]

    def _delta(self, delta: dict[str, Any]) -> bytes:
        index = len(self.message["content"]) - 1
        return _event("content_block_delta",
                      {"type": "content_block_delta", "index": index, "delta": delta})

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        self._open = None
        index = len(self.message["content"]) - 1
        block = self.message["content"][index]
        if block["type"] == "tool_use":
            try:
                parsed = orjson.loads(self._args.get(index) or "{}")
            except orjson.JSONDecodeError:
                parsed = {}
            block["input"] = parsed if isinstance(parsed, dict) else {}
        return [_event("content_block_stop", {"type": "content_block_stop", "index": index})]

    def _usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        if isinstance(usage.get("prompt_tokens"), int):
            self.message["usage"]["input_tokens"] = usage["prompt_tokens"]
        if isinstance(usage.get("completion_tokens"), int):
            self.message["usage"]["output_tokens"] = usage["completion_tokens"]

    def finish(self) -> list[bytes]:
        """The closing events (``message_delta``, ``message_stop``)."""
        events = self._close()
        if self.message["stop_reason"] is None:
            has_tool = any(b["type"] == "tool_use" for b in self.message["content"])
            self.message["stop_reason"] = "tool_use" if has_tool else "end_turn"
        events.append(_event("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": self.message["stop_reason"], "stop_sequence": None},
            # As Anthropic's own: cumulative totals, the input too (a chat stream's usage
            # comes after message_start was sent; the SDKs' final message reads it here).
            "usage": {"input_tokens": self.message["usage"]["input_tokens"],
                      "output_tokens": self.message["usage"]["output_tokens"]}}))
        events.append(_event("message_stop", {"type": "message_stop"}))
        return events

    @staticmethod
    def error_event(error: dict[str, Any]) -> bytes:
        """An upstream failure after the stream began, as Anthropic's ``error`` event."""
        message = error.get("message") if isinstance(error.get("message"), str) else "error"
        kind = error.get("type") if isinstance(error.get("type"), str) else None
        data = {"type": "error", "error": {"type": anthropic_type(500, kind), "message": message}}
        return _event("error", data)
