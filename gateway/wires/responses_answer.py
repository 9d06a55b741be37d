"""Chat Completions answers -> Responses API objects and SSE events.

As for Anthropic, one state machine serves streams (events sent as chunks arrive:
``response.created``, ``response.in_progress``, ``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta``,
``response.function_call_arguments.delta``, the ``.done`` events, ``response.completed``)
and whole answers (fed as one chunk; the finished response object is read back).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import orjson

from gateway.wires.call_deltas import TOOL_KEY, CallDeltas, chunk_usage, delta_words
from gateway.wires.chat_validation import dumps_within_depth

_ECHOED = ("instructions", "max_output_tokens", "metadata", "temperature", "top_p", "user",
           "reasoning", "text", "truncation", "store", "previous_response_id")


def _event(data: dict[str, Any]) -> bytes:
    kind: str = data["type"]
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class ResponsesAnswer:
    """Builds a Responses ``response`` object from chat chunks."""

    def __init__(self, model: str, request: dict[str, Any]) -> None:
        self.response: dict[str, Any] = {
            "id": "resp_" + secrets.token_hex(16), "object": "response",
            "created_at": int(time.time()), "status": "in_progress", "model": model,
            "output": [], "error": None, "incomplete_details": None,
            "parallel_tool_calls": request.get("parallel_tool_calls", True),
            "tool_choice": request.get("tool_choice", "auto"),
            "tools": request.get("tools") or [],
            "usage": None,
        }
        for key in _ECHOED:
            if key in request:
                self.response[key] = request[key]
        # Echoed in events one level deeper than sent (``{"response": {...}}``).
        dumps_within_depth({"response": self.response}, "echoed in the response events")
        self._seq = 0
        self._started = False
        self._open: str | None = None  # "text", "refusal", "reasoning" or "tool:<index>"
        # Tool calls by chat index (``HeldCall.at``: their output index once added).
        self._calls = CallDeltas()
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None

    def _emit(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return _event(data)

    def _snapshot(self) -> dict[str, Any]:
        return orjson.loads(orjson.dumps(self.response))  # type: ignore[no-any-return]

    def feed(self, chunk: Any) -> list[bytes]:
        """The events for one chat chunk (``response.created`` first)."""
        events: list[bytes] = []
        if not isinstance(chunk, dict):
            return events
        if isinstance(chunk.get("error"), dict):
            return [self.error_event(chunk["error"])]
        if not self._started:
            self._started = True
            events.append(self._emit("response.created", response=self._snapshot()))
            events.append(self._emit("response.in_progress", response=self._snapshot()))
        for choice in chunk.get("choices") or ():
            if choice.get("index") not in (0, None):
                continue  # (another alternative, n > 1: the wire holds one answer)
            delta = choice.get("delta") or {}
            # Reasoning (reasoning_content, reasoning, Magistral's thinking parts) is a
            # reasoning item with its text, as gpt-oss's.
            for kind, words in delta_words(delta):
                events += self._reasoning(words) if kind == "thinking" else self._text(
                    words, "text")
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                events += self._text(refusal, "refusal")
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict):
                    events += self._tool(call)
            if isinstance(choice.get("finish_reason"), str):
                self._finish = choice["finish_reason"]
        if (usage := chunk_usage(chunk)) is not None:
            self._usage = usage
        return events

    def _item(self) -> dict[str, Any]:
        return self.response["output"][-1]  # type: ignore[no-any-return]

    def _add(self, item: dict[str, Any], kind: str) -> list[bytes]:
        self.response["output"].append(item)
        self._open = kind
        return [self._emit("response.output_item.added",
                           output_index=len(self.response["output"]) - 1,
                           item=orjson.loads(orjson.dumps(item)))]

    def _text(self, text: str, kind: str) -> list[bytes]:
        """Output text or a refusal (``kind``), each a message of its own content part."""
        events: list[bytes] = []
        field = "text" if kind == "text" else "refusal"
        if self._open != kind:
            events += self._close()
            item: dict[str, Any] = {"id": "msg_" + secrets.token_hex(12), "type": "message",
                    "status": "in_progress", "role": "assistant", "content": []}
            events += self._add(item, kind)
            part: dict[str, Any] = ({"type": "output_text", "text": "", "annotations": []}
                                    if kind == "text" else {"type": "refusal", "refusal": ""})
            item["content"].append(part)
            events.append(self._emit("response.content_part.added", item_id=item["id"],
                                     output_index=len(self.response["output"]) - 1,
                                     content_index=0, part=dict(part)))
        item = self._item()
        item["content"][0][field] += text
        extra: dict[str, Any] = {"logprobs": []} if kind == "text" else {}
        name = "response.output_text.delta" if kind == "text" else "response.refusal.delta"
        events.append(self._emit(name, item_id=item["id"],
                                 output_index=len(self.response["output"]) - 1,
                                 content_index=0, delta=text, **extra))
        return events

    def _reasoning(self, text: str) -> list[bytes]:
        events: list[bytes] = []
        if self._open != "reasoning":
            events += self._close()
            item: dict[str, Any] = {"id": "rs_" + secrets.token_hex(12), "type": "reasoning",
                                    "summary": [], "content": []}
            events += self._add(item, "reasoning")
            part = {"type": "reasoning_text", "text": ""}
            item["content"].append(part)
            events.append(self._emit("response.content_part.added", item_id=item["id"],
                                     output_index=len(self.response["output"]) - 1,
                                     content_index=0, part=dict(part)))
        item = self._item()
        item["content"][0]["text"] += text
        events.append(self._emit("response.reasoning_text.delta", item_id=item["id"],
                                 output_index=len(self.response["output"]) - 1,
                                 content_index=0, delta=text))
        return events

    def _tool(self, call: dict[str, Any]) -> list[bytes]:
        """One tool call delta. Items stream one at a time, each added with its call id
        and name: a call is added once its name is known and no other call is open; until
        then (interleaved parallel calls, a name that comes after the first arguments) its
        arguments are kept and sent with it."""
        chat_index, held, arguments = self._calls.read(call)
        if self._open == f"{TOOL_KEY}{chat_index}":
            return self._arguments(arguments)
        held.args += arguments
        if self._calls.ready(held, self._open):
            return self._close() + self._add_call(chat_index)
        return []

    def _arguments(self, arguments: str) -> list[bytes]:
        if not arguments:
            return []
        item = self._item()
        item["arguments"] += arguments
        return [self._emit("response.function_call_arguments.delta", item_id=item["id"],
                           output_index=len(self.response["output"]) - 1, delta=arguments)]

    def _add_call(self, chat_index: int) -> list[bytes]:
        held = self._calls.calls[chat_index]
        item: dict[str, Any] = {"id": "fc_" + secrets.token_hex(12), "type": "function_call",
                                "status": "in_progress", "arguments": "",
                                "call_id": held.id or "call_" + secrets.token_hex(12),
                                "name": held.name}
        events = self._add(item, f"{TOOL_KEY}{chat_index}")
        held.at = len(self.response["output"]) - 1
        return events + self._arguments(held.args)

    def _flush(self, *, last: bool) -> list[bytes]:
        """The calls held back, each as a whole item (``last``: nameless ones too)."""
        events: list[bytes] = []
        for chat_index in self._calls.waiting(last=last):
            events += self._add_call(chat_index)
            events += self._end_item()
        return events

    def _close(self) -> list[bytes]:
        tool = (self._open or "").startswith(TOOL_KEY)
        events = self._end_item()
        return events + self._flush(last=False) if tool else events

    def _end_item(self) -> list[bytes]:
        if self._open is None:
            return []
        kind, self._open = self._open, None
        item = self._item()
        index = len(self.response["output"]) - 1
        events: list[bytes] = []
        if item["type"] == "function_call":
            # As OpenAI's own calls of a tool without parameters: "{}", never "".
            item["arguments"] = item["arguments"] or "{}"
            events.append(self._emit("response.function_call_arguments.done",
                                     item_id=item["id"], output_index=index,
                                     arguments=item["arguments"], name=item["name"]))
        else:
            part = item["content"][0]
            done = {"text": ("response.output_text.done", {"text": part.get("text"),
                                                           "logprobs": []}),
                    "refusal": ("response.refusal.done", {"refusal": part.get("refusal")}),
                    "reasoning": ("response.reasoning_text.done", {"text": part.get("text")}),
                    }[kind]
            events.append(self._emit(done[0], item_id=item["id"], output_index=index,
                                     content_index=0, **done[1]))
            events.append(self._emit("response.content_part.done", item_id=item["id"],
                                     output_index=index, content_index=0, part=dict(part)))
        if item["type"] != "reasoning":
            item["status"] = "completed"
        events.append(self._emit("response.output_item.done", output_index=index,
                                 item=orjson.loads(orjson.dumps(item))))
        return events

    def finish(self) -> list[bytes]:
        """The closing events, ending with ``response.completed`` (or ``.incomplete``)."""
        events = self._close() + self._flush(last=True)
        usage = self._usage or {}
        prompt = usage.get("prompt_tokens") or 0
        completion = usage.get("completion_tokens") or 0
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
        self.response["usage"] = {
            "input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": usage.get("total_tokens") or prompt + completion}
        if self._finish in ("length", "content_filter"):
            self.response["status"] = "incomplete"
            self.response["incomplete_details"] = {
                "reason": "max_output_tokens" if self._finish == "length" else "content_filter"}
            events.append(self._emit("response.incomplete", response=self._snapshot()))
        else:
            self.response["status"] = "completed"
            events.append(self._emit("response.completed", response=self._snapshot()))
        return events

    def error_event(self, error: dict[str, Any]) -> bytes:
        """An upstream failure after the stream began, as the Responses ``error`` event."""
        message = error.get("message") if isinstance(error.get("message"), str) else "error"
        code = error.get("code")
        return self._emit("error", code=str(code) if code is not None else None,
                          message=message, param=None)

    def fail(self, status: int, message: str) -> list[bytes]:
        """A failure after the stream began: the ``error`` event, then ``response.failed``
        (the terminal event, with the output made so far)."""
        self._open = None
        events = responses_failure_events(self.response, self._seq, status, message)
        self.response["status"] = "failed"
        self._seq += len(events)
        return events


def responses_failure_events(response: dict[str, Any], seq: int, status: int,
                             message: str) -> list[bytes]:
    """The ``error`` event and the terminal ``response.failed`` (``response``: the object
    streamed so far) that end a Responses stream which failed after it began; ``seq``: the
    next sequence number."""
    code = "rate_limit_exceeded" if status == 429 else "server_error"
    return [_event({"type": "error", "sequence_number": seq, "code": code,
                    "message": message, "param": None}),
            responses_failed_event(response, seq + 1, code, message)]


def responses_failed_event(response: dict[str, Any], seq: int, code: str,
                           message: str) -> bytes:
    """The terminal ``response.failed`` event (number ``seq``) of ``response``, the object
    streamed so far, with the error ``code`` and ``message``."""
    error = {"code": code, "message": message}
    try:
        return _event({"type": "response.failed", "sequence_number": seq,
                       "response": {**response, "status": "failed", "error": error}})
    except orjson.JSONEncodeError:  # what failed may be the object itself: its bare bones
        bare = {k: response.get(k) for k in ("id", "object", "created_at", "model")}
        return _event({"type": "response.failed", "sequence_number": seq,
                       "response": {**bare, "status": "failed", "error": error,
                                    "output": []}})
