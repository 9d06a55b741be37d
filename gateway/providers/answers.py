"""Typed models of the upstream answers the gateway reads, checked once where they arrive.

Each model names every field the gateway (its translations, usage counting, the recall
tool) reads from an answer, with the type the code assumes; fields it does not read are
not checked and pass through untouched. An answer that does not fit is unusable: the
provider reports it as a ``502`` failure before the first byte (the ladder may retry it),
or ends a stream with the wire's terminal error event after it.

- Chat Completions: a whole ``chat.completion`` (at least one choice with a ``message``)
  and each ``chat.completion.chunk`` of a stream.
- Anthropic Messages: a whole ``message`` (``type: "message"``, a ``content`` list of
  typed blocks), a ``count_tokens`` answer, and stream events (JSON objects with a
  ``type``).
- Responses: a whole ``response`` object (``object: "response"``, an ``output`` list of
  typed items) and stream events (JSON objects with a ``type``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from gateway.providers.sse import DONE, EVENT_END, parse_event

Count = int | float | None  # token counts: some servers send 12.0


class _PromptDetails(Struct):
    cached_tokens: Count = None


class _CompletionDetails(Struct):
    reasoning_tokens: Count = None


class ChatUsage(Struct):
    """``usage`` of a chat answer (OpenAI names; Anthropic-style names tolerated)."""

    prompt_tokens: Count = None
    completion_tokens: Count = None
    total_tokens: Count = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _Function(Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(Struct):
    id: str | None = None
    type: str | None = None
    function: _Function | None = None


# Content is text, or (some servers, e.g. reasoning models behind Mistral) a list of parts.
_Content = str | list[dict[str, Any]] | None


class _Message(Struct):
    role: str | None = None
    content: _Content = None
    reasoning_content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(Struct):
    message: _Message
    index: int = 0
    finish_reason: str | None = None


class ChatCompletion(Struct):
    """A whole ``chat.completion``: at least one choice, each with its ``message``."""

    choices: Annotated[list[_Choice], Meta(min_length=1)]
    id: str | None = None
    model: str | None = None
    usage: ChatUsage | None = None


class _ToolCallDelta(Struct):
    index: int = 0
    id: str | None = None
    type: str | None = None
    function: _Function | None = None


class _Delta(Struct):
    role: str | None = None
    content: _Content = None
    reasoning_content: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _ChunkChoice(Struct):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class ChatChunk(Struct):
    """One ``chat.completion.chunk`` (a usage-only chunk has no choices; an in-stream
    failure is ``{"error": {...}}``)."""

    choices: list[_ChunkChoice] | None = []  # (null: MiniMax and some proxies, usage only)
    id: str | None = None
    model: str | None = None
    usage: ChatUsage | None = None
    error: dict[str, Any] | None = None


class _Typed(Struct):
    type: str


class _InputOutputUsage(Struct):
    """The usage of an Anthropic message or a Responses object (same two counts)."""

    input_tokens: Count = None
    output_tokens: Count = None


class AnthropicMessage(Struct):
    """A whole Anthropic ``message``."""

    type: Literal["message"]
    content: list[_Typed]
    model: str | None = None
    usage: _InputOutputUsage | None = None


class TokenCount(Struct):
    """An Anthropic ``count_tokens`` answer."""

    input_tokens: int


class ResponsesObject(Struct):
    """A whole Responses ``response`` object."""

    object: Literal["response"]
    output: list[_Typed]
    model: str | None = None
    usage: _InputOutputUsage | None = None


class CompactedResponse(Struct):
    """A Responses ``response.compaction`` object (``POST /responses/compact``)."""

    object: Literal["response.compaction"]
    output: list[_Typed]
    usage: _InputOutputUsage | None = None


@dataclass(frozen=True, slots=True)
class AnswerShape:
    """What one upstream endpoint answers: the model of a whole answer and of one stream
    event's ``data``."""

    name: str  # "a chat.completion", for messages
    answer: msgspec.json.Decoder[Any]
    event_name: str
    event: msgspec.json.Decoder[Any]

    def whole_problem(self, parsed: object) -> str | None:
        """Why an already parsed whole answer is unusable (None when it is usable)."""
        try:
            msgspec.convert(parsed, self.answer.type)
        except msgspec.ValidationError as err:
            return f"is not {self.name} ({err})"
        return None


CHAT = AnswerShape("a chat.completion", msgspec.json.Decoder(ChatCompletion),
                   "a chat.completion.chunk", msgspec.json.Decoder(ChatChunk))
ANTHROPIC = AnswerShape("an Anthropic message", msgspec.json.Decoder(AnthropicMessage),
                        "an Anthropic stream event", msgspec.json.Decoder(_Typed))
ANTHROPIC_COUNT = AnswerShape("a count_tokens answer", msgspec.json.Decoder(TokenCount),
                              "an Anthropic stream event", msgspec.json.Decoder(_Typed))
RESPONSES = AnswerShape("a Responses response", msgspec.json.Decoder(ResponsesObject),
                        "a Responses stream event", msgspec.json.Decoder(_Typed))
RESPONSES_COMPACTED = AnswerShape("a compacted Responses response",
                                  msgspec.json.Decoder(CompactedResponse),
                                  "a Responses stream event", msgspec.json.Decoder(_Typed))



def event_problem(event: bytes, shape: AnswerShape) -> str | None:
    """Why one SSE event (``gateway.providers.sse``) is unusable: a line that is no SSE
    field, or ``data`` that does not fit ``shape``'s event model."""
    fields = parse_event(event)
    if fields.stray is not None:
        return f"sent a line that is not an SSE field ({fields.stray[:40]!r})"
    payload = fields.data
    if payload is None or payload == DONE:
        return None
    try:
        shape.event.decode(payload)
    except msgspec.ValidationError as err:
        return f"sent a stream event that is not {shape.event_name} ({err})"
    except msgspec.DecodeError:
        return "sent a stream event whose data is not JSON"
    return None


def first_bad_event(data: bytes, shape: AnswerShape) -> tuple[int, str] | None:
    """The offset where the first unusable event of ``data`` (whole events) starts, and
    why it is unusable; None when every event is usable."""
    start = 0
    decode = shape.event.decode
    for match in EVENT_END.finditer(data):
        event = data[start:match.start()]
        if event[:6] == b"data: " and b"\n" not in event and event[6:] != b"[DONE]":
            try:  # the usual one-line event, checked without splitting it into lines
                decode(event[6:])
            except (msgspec.ValidationError, msgspec.DecodeError):
                pass  # (event_problem says why)
            else:
                start = match.end()
                continue
        problem = event_problem(event, shape)
        if problem is not None:
            return start, problem
        start = match.end()
    if start < len(data) and data[start:].strip():
        problem = event_problem(data[start:], shape)
        if problem is not None:
            return start, problem
    return None
