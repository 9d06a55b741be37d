"""Chat values in a shape every provider refuses, repaired up front: tool values sent as
JSON objects, and content parts without their type.

Chat Completions takes a tool call's ``function.arguments`` and a tool result's ``content``
as text. Histories replayed from servers that parse them (llama-server, some LangGraph.js
versions) or converted from the Messages API (where a tool's input is an object) send them
as JSON objects or arrays, which every provider refuses. Their JSON text is what the client
meant: :func:`serialized_tool_values` writes it, reported as ``tool_value_serialized`` (the
same repair the Responses wire makes); so are a tool result sent as a number or a boolean
(n8n, Flowise), and a call's missing or null arguments, written ``{}`` (a call with no
arguments; OpenAI: "Missing required parameter: '...function.arguments'"). A content part
without ``type`` whose one payload key says which part it is (``{"text": "..."}``,
``{"image_url": {...}}``), a bare string in a content list, a lone part sent as the whole
content, or a Responses API part in a chat history (``input_text``, ``output_text``,
``input_image`` by URL: an Agents SDK or Codex history converted by hand; OpenAI: "Invalid
value: 'output_text'. Supported values are: 'text' and 'refusal'."):
:func:`typed_content_parts` types and lists them as Chat Completions parts
(``content_part_typed``). Pure: the client's objects are never edited.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.projection.anomalies import CONTENT_PART_TYPED, Anomaly
from gateway.wires.chat_validation import dumps_within_depth
from gateway.wires.responses_rules import TOOL_VALUE_SERIALIZED

__all__ = ["repaired_chat_values", "serialized_tool_values", "typed_content_parts"]

# A part's payload key, which names its type.
_PART_PAYLOADS = ("text", "image_url", "input_audio", "file")
# The Responses API's text parts, which are Chat Completions' text parts.
RESPONSES_TEXT_PARTS = ("input_text", "output_text")


def repaired_chat_values(body: dict[str, Any],
                         ) -> tuple[dict[str, Any], tuple[Anomaly, ...]] | None:
    """``body`` with both repairs of this module made (None when neither had anything to
    do), and their anomalies."""
    found: list[Anomaly] = []
    changed = False
    for repair in (serialized_tool_values, typed_content_parts):
        repaired = repair(body)
        if repaired is not None:
            body, anomalies = repaired
            found += anomalies
            changed = True
    return (body, tuple(found)) if changed else None


def typed_content_parts(body: dict[str, Any],
                        ) -> tuple[dict[str, Any], tuple[Anomaly, ...]] | None:
    """``body`` with the content parts that lack their type typed (see the module), one
    anomaly per message; None when no part needs it."""
    return _repaired_messages(body, _typed_content)


def _typed_content(index: int, message: dict[str, Any]) -> tuple[dict[str, Any], list[Anomaly]]:
    content = message.get("content")
    parts: list[Any] | None = None
    if type(content) is dict and message.get("role") != "tool":
        part = _typed_part(content)
        if part is not None or isinstance(content.get("type"), str):
            parts = [part if part is not None else content]
    elif isinstance(content, list):
        typed = [_typed_part(part) for part in content]
        if any(new is not None for new in typed):
            parts = [part if new is None else new
                     for part, new in zip(content, typed, strict=True)]
    if parts is None:
        return message, []
    return {**message, "content": parts}, [Anomaly(CONTENT_PART_TYPED, index)]


def _typed_part(part: Any) -> dict[str, Any] | None:
    """``part`` with the type its one payload key names (a string: a text part), or the
    Chat Completions part for a Responses API one; None when it has a chat type, or
    nothing tells which it is."""
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if type(part) is not dict:
        return None
    kind = part.get("type")
    if kind in RESPONSES_TEXT_PARTS and isinstance(part.get("text"), str):
        # (its annotations and logprobs are an answer's, no request field)
        return {"type": "text", "text": part["text"]}
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        detail = part.get("detail")
        image = {"url": part["image_url"], **({"detail": detail} if detail is not None else {})}
        return {"type": "image_url", "image_url": image}
    if kind is not None:
        return None
    kinds = [key for key in _PART_PAYLOADS if key in part]
    if len(kinds) != 1 or (kinds[0] == "text" and not isinstance(part["text"], str)):
        return None
    return {"type": kinds[0], **{k: v for k, v in part.items() if k != "type"}}


def serialized_tool_values(body: dict[str, Any],
                           ) -> tuple[dict[str, Any], tuple[Anomaly, ...]] | None:
    """``body`` with the tool-call arguments and tool results that are JSON objects or
    arrays (a result also a number or a boolean) written as their JSON text, missing or
    null arguments as ``{}``, and one anomaly for each; None when it has none."""
    return _repaired_messages(body, _serialized_values)


def _serialized_values(index: int, message: dict[str, Any],
                       ) -> tuple[dict[str, Any], list[Anomaly]]:
    new = message
    anomalies: list[Anomaly] = []
    calls = message.get("tool_calls")
    if isinstance(calls, list) and any(_unwritten_arguments(call) for call in calls):
        written = []
        for call in calls:
            if _unwritten_arguments(call):
                function = call["function"]
                arguments = function.get("arguments")
                text = ("{}" if arguments is None
                        else dumps_within_depth(arguments, "sent as text").decode())
                call = {**call, "function": {**function, "arguments": text}}
                call_id = call.get("id")
                anomalies.append(Anomaly(TOOL_VALUE_SERIALIZED, index,
                                         call_id if isinstance(call_id, str) else None))
            written.append(call)
        new = {**new, "tool_calls": written}
    content = message.get("content")
    if message.get("role") == "tool" and isinstance(content, dict | int | float):
        text = dumps_within_depth(content, "sent as text").decode()
        new = {**new, "content": text}
        call_id = message.get("tool_call_id")
        anomalies.append(Anomaly(TOOL_VALUE_SERIALIZED, index,
                                 call_id if isinstance(call_id, str) else None))
    return new, anomalies


def _repaired_messages(
    body: dict[str, Any],
    repair: Callable[[int, dict[str, Any]], tuple[dict[str, Any], list[Anomaly]]],
) -> tuple[dict[str, Any], tuple[Anomaly, ...]] | None:
    """``body`` with each message ``repair`` changed (the same message: unchanged), and
    what it reported; None when it changed none."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    out: list[Any] | None = None
    anomalies: list[Anomaly] = []
    for index, message in enumerate(messages):
        if type(message) is not dict:
            continue
        new, found = repair(index, message)
        if new is message:
            continue
        if out is None:
            out = list(messages)
        out[index] = new
        anomalies += found
    if out is None:
        return None
    return {**body, "messages": out}, tuple(anomalies)


def _unwritten_arguments(call: Any) -> bool:
    """A call whose arguments are a JSON object or array, null, or missing."""
    function = call.get("function") if type(call) is dict else None
    return type(function) is dict and isinstance(function.get("name"), str) and (
        function.get("arguments") is None or isinstance(function["arguments"], dict | list))
