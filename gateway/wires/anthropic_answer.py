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

from gateway.wires.call_deltas import TOOL_KEY, CallDeltas, chunk_usage, delta_words
from gateway.wires.errors import anthropic_type
from gateway.wires.json_prefix import ObjectPrefix

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
        self._open: str | None = None  # "text", "thinking" or "tool:<chat index>"
        self._args: dict[int, str] = {}  # content index -> arguments so far
        # content index -> whether its arguments relayed so far can still be an object
        self._prefix: dict[int, ObjectPrefix] = {}
        # Tool calls by chat index (``HeldCall.at``: their content index once started).
        self._calls = CallDeltas()
        self._refused = False

    def feed(self, chunk: Any) -> list[bytes]:
        """The events for one chat chunk (``message_start`` first)."""
        events: list[bytes] = []
        if not isinstance(chunk, dict):
            return events
        if isinstance(chunk.get("error"), dict):
            return [*events, self.error_event(chunk["error"])]
        if not self._started:
            self._started = True
            self._usage(chunk_usage(chunk))
            start = {**self.message, "content": [], "usage": dict(self.message["usage"])}
            events.append(_event("message_start", {"type": "message_start", "message": start}))
        for choice in chunk.get("choices") or ():
            if choice.get("index") not in (0, None):
                continue  # (another alternative, n > 1: the wire holds one answer)
            delta = choice.get("delta") or {}
            # Reasoning (reasoning_content, reasoning, Magistral's thinking parts) is
            # Claude's thinking.
            for kind, words in delta_words(delta):
                events += self._stream(kind, words)
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:  # Claude refuses in text
                self._refused = True
                events += self._stream("text", refusal)
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    events += self._tool_delta(call)
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                self.message["stop_reason"] = _STOP.get(reason, "end_turn")
        self._usage(chunk_usage(chunk))
        return events

    def _stream(self, kind: str, text: str) -> list[bytes]:
        """A text or thinking delta, in its own block."""
        events: list[bytes] = []
        if self._open != kind:
            events += self._close()
            block = ({"type": "text", "text": ""} if kind == "text"
                     else {"type": "thinking", "thinking": "", "signature": ""})
            events += self._start(block, kind)
        self.message["content"][-1][kind] += text
        events.append(self._delta({"type": f"{kind}_delta", kind: text}))
        return events

    def _tool_delta(self, call: dict[str, Any]) -> list[bytes]:
        """One tool call delta. Anthropic streams one block at a time, each opened with its
        id and name: a call is started once its name is known and no other call is open;
        until then (interleaved parallel calls, a name that comes after the first
        arguments) its arguments are kept and sent with its start."""
        chat_index, held, arguments = self._calls.read(call)
        if self._open == f"{TOOL_KEY}{chat_index}":
            if not arguments or held.at is None:
                return []
            self._args[held.at] = self._args.get(held.at, "") + arguments
            if not self._relayable(held.at, arguments):
                return []
            return [self._delta({"type": "input_json_delta", "partial_json": arguments})]
        held.args += arguments
        if self._calls.ready(held, self._open):
            return self._close() + self._open_call(chat_index)
        return []

    def _open_call(self, chat_index: int) -> list[bytes]:
        held = self._calls.calls[chat_index]
        block: dict[str, Any] = {"type": "tool_use",
                                 "id": held.id or "toolu_" + secrets.token_hex(8),
                                 "name": held.name, "input": {}}
        events = self._start(block, f"{TOOL_KEY}{chat_index}")
        held.at = len(self.message["content"]) - 1
        if held.args:
            self._args[held.at] = held.args
            if self._relayable(held.at, held.args):
                events.append(self._delta({"type": "input_json_delta",
                                           "partial_json": held.args}))
        return events

    def _relayable(self, at: int, arguments: str) -> bool:
        """Whether a call's arguments so far (``arguments`` the latest) can still be a JSON
        object: Anthropic's SDKs parse them as they come and raise on anything else (a
        weak model's ``{'path': ...}``), so once they cannot, no more of them is relayed
        (the client reads the object relayed so far; a whole answer's input is ``{}``)."""
        return self._prefix.setdefault(at, ObjectPrefix()).feed(arguments)

    def _flush(self, *, last: bool) -> list[bytes]:
        """The calls held back, each as a whole block (``last``: nameless ones too)."""
        events: list[bytes] = []
        for chat_index in self._calls.waiting(last=last):
            events += self._open_call(chat_index)
            events += self._end_block()
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
        tool = (self._open or "").startswith(TOOL_KEY)
        events = self._end_block()
        return events + self._flush(last=False) if tool else events

    def _end_block(self) -> list[bytes]:
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
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if isinstance(cached, int) and cached:
            # Anthropic counts cache reads apart: input_tokens is what was not read.
            self.message["usage"]["cache_read_input_tokens"] = cached
        if isinstance(usage.get("prompt_tokens"), int):
            self.message["usage"]["input_tokens"] = max(
                usage["prompt_tokens"] - self.message["usage"].get("cache_read_input_tokens", 0),
                0)
        if isinstance(usage.get("completion_tokens"), int):
            self.message["usage"]["output_tokens"] = usage["completion_tokens"]

    def finish(self) -> list[bytes]:
        """The closing events (``message_delta``, ``message_stop``)."""
        events = self._close() + self._flush(last=True)
        has_tool = any(b["type"] == "tool_use" for b in self.message["content"])
        # (Gemini's OpenAI endpoint streams calls with finish_reason "stop": Anthropic
        # never ends a message holding tool_use blocks with end_turn.)
        if self.message["stop_reason"] in (None, "end_turn"):
            self.message["stop_reason"] = "tool_use" if has_tool else "end_turn"
        if self._refused and self.message["stop_reason"] == "end_turn":
            self.message["stop_reason"] = "refusal"
        events.append(_event("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": self.message["stop_reason"], "stop_sequence": None},
            # As Anthropic's own: cumulative totals, the input too (a chat stream's usage
            # comes after message_start was sent; the SDKs' final message reads it here).
            "usage": dict(self.message["usage"])}))
        events.append(_event("message_stop", {"type": "message_stop"}))
        return events

    @staticmethod
    def error_event(error: dict[str, Any]) -> bytes:
        """An upstream failure after the stream began, as Anthropic's ``error`` event."""
        message = error.get("message") if isinstance(error.get("message"), str) else "error"
        kind = error.get("type") if isinstance(error.get("type"), str) else None
        data = {"type": "error", "error": {"type": anthropic_type(500, kind), "message": message}}
        return _event("error", data)
