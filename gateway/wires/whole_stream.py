"""A whole answer given to a client that asked for a stream, as that wire's events.

Some upstreams (proxies, older local servers) ignore ``"stream": true`` and answer one JSON
object. Relayed as it came, the client's SDK reads an event stream out of a JSON body and
finds nothing in it: an empty answer, silently. Instead the object is written as the
stream its wire would have sent (pure, no I/O):

- Chat Completions: one ``chat.completion.chunk`` carrying the whole message, then
  ``data: [DONE]``;
- Anthropic Messages: ``message_start``, each content block as ``content_block_start`` /
  one ``content_block_delta`` / ``content_block_stop``, ``message_delta``, ``message_stop``;
- Responses: ``response.created``, each output item as ``response.output_item.added`` /
  (a message's text as its ``output_text`` delta and done events) /
  ``response.output_item.done``, then the response's own terminal event.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import error_body, sse_error_event
from gateway.wires.errors import anthropic_error, anthropic_type
from gateway.wires.responses_answer import responses_failure_events

DONE = b"data: [DONE]\n\n"
_RESPONSES_ENDS = {"completed": "response.completed", "incomplete": "response.incomplete",
                   "failed": "response.failed"}


def _event(name: str | None, data: Any) -> bytes:
    head = b"event: " + name.encode() + b"\n" if name is not None else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def chat_events(body: dict[str, Any]) -> list[bytes]:
    """A ``chat.completion`` as one chunk and ``[DONE]``."""
    choices = []
    for choice in body.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        if not isinstance(message, dict):
            message = {}
        delta = {k: v for k, v in message.items() if v is not None}
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            delta["tool_calls"] = [{**call, "index": n} if isinstance(call, dict) else call
                                   for n, call in enumerate(calls)]
        choices.append({"index": choice.get("index", 0), "delta": delta,
                        "logprobs": choice.get("logprobs"),
                        "finish_reason": choice.get("finish_reason")})
    chunk = {**{k: v for k, v in body.items() if k != "choices"},
             "object": "chat.completion.chunk", "choices": choices}
    return [_event(None, chunk), DONE]


def anthropic_events(message: dict[str, Any]) -> list[bytes]:
    """An Anthropic ``message`` as the events of its stream."""
    usage = message.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage, "output_tokens": 0}}
    out = [_event("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message.get("content") or ()):
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        delta: dict[str, Any] | None = None
        shown = dict(block)
        if kind == "text":
            shown["text"] = ""
            delta = {"type": "text_delta", "text": block.get("text") or ""}
        elif kind in ("tool_use", "server_tool_use"):
            shown["input"] = {}
            delta = {"type": "input_json_delta",
                     "partial_json": orjson.dumps(block.get("input") or {}).decode()}
        elif kind == "thinking":
            shown["thinking"], shown["signature"] = "", ""
            delta = {"type": "thinking_delta", "thinking": block.get("thinking") or ""}
        out.append(_event("content_block_start", {"type": "content_block_start",
                                                  "index": index, "content_block": shown}))
        if delta is not None:
            out.append(_event("content_block_delta", {"type": "content_block_delta",
                                                      "index": index, "delta": delta}))
        if kind == "thinking" and block.get("signature"):
            out.append(_event("content_block_delta", {
                "type": "content_block_delta", "index": index,
                "delta": {"type": "signature_delta", "signature": block["signature"]}}))
        out.append(_event("content_block_stop", {"type": "content_block_stop",
                                                 "index": index}))
    out.append(_event("message_delta", {
        "type": "message_delta", "delta": {"stop_reason": message.get("stop_reason"),
                                           "stop_sequence": message.get("stop_sequence")},
        "usage": {"output_tokens": usage.get("output_tokens", 0)}}))
    out.append(_event("message_stop", {"type": "message_stop"}))
    return out


def responses_events(response: dict[str, Any]) -> list[bytes]:
    """A Responses ``response`` as the events of its stream."""
    seq = 0
    out: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        nonlocal seq
        out.append(_event(kind, {"type": kind, "sequence_number": seq, **fields}))
        seq += 1

    emit("response.created", response={**response, "status": "in_progress", "output": []})
    for index, item in enumerate(response.get("output") or ()):
        if not isinstance(item, dict):
            continue
        content = item.get("content")
        texts = item.get("type") == "message" and isinstance(content, list)
        emit("response.output_item.added", output_index=index,
             item={**item, "status": "in_progress", **({"content": []} if texts else {})})
        if texts:
            assert isinstance(content, list)
            for part_index, part in enumerate(content):
                if not isinstance(part, dict):
                    continue
                where = {"item_id": item.get("id"), "output_index": index,
                         "content_index": part_index}
                text = part.get("text") if part.get("type") == "output_text" else None
                emit("response.content_part.added", **where,
                     part={**part, "text": ""} if isinstance(text, str) else part)
                if isinstance(text, str):
                    emit("response.output_text.delta", **where, delta=text, logprobs=[])
                    emit("response.output_text.done", **where, text=text, logprobs=[])
                emit("response.content_part.done", **where, part=part)
        emit("response.output_item.done", output_index=index, item=item)
    end = _RESPONSES_ENDS.get(str(response.get("status")), "response.completed")
    emit(end, response=response)
    return out


class WholeAsStream:
    """A stream shape (``gateway.wires.relaying.StreamShape``) for a whole answer: the body
    is gathered, then written as the wire's events (``wire``: chat, anthropic or
    responses)."""

    def __init__(self, wire: str) -> None:
        self.ended = False
        self._wire = wire
        self._body = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        """Nothing yet: the body is gathered."""
        if not self.ended:
            self._body += chunk
        return []

    def finish(self) -> list[bytes]:
        """The whole answer's events (the wire's error event when it is no object)."""
        if self.ended:
            return []
        try:
            body = orjson.loads(self._body)
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            return self.failed(502, "the upstream answer is not a JSON object")
        self.ended = True
        if self._wire == "anthropic":
            return anthropic_events(body)
        if self._wire == "responses":
            return responses_events(body)
        return chat_events(body)

    def failed(self, status: int, message: str) -> list[bytes]:
        """The wire's terminal error event(s)."""
        self.ended = True
        if self._wire == "anthropic":
            data = anthropic_error(status, message, anthropic_type(status))
            return [_event("error", data)]
        if self._wire == "responses":
            return responses_failure_events({"id": "resp_failed", "object": "response",
                                             "output": []}, 0, status, message)
        return [sse_error_event(error_body(message, status=status)), DONE]
