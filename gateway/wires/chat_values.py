"""Chat tool values sent as JSON objects, repaired up front.

Chat Completions takes a tool call's ``function.arguments`` and a tool result's ``content``
as text. Histories replayed from servers that parse them (llama-server, some LangGraph.js
versions) or converted from the Messages API (where a tool's input is an object) send them
as JSON objects or arrays, which every provider refuses. Their JSON text is what the client
meant: :func:`serialized_tool_values` writes it, reported as ``tool_value_serialized`` (the
same repair the Responses wire makes). Pure: the client's objects are never edited.
"""

from __future__ import annotations

from typing import Any

from gateway.projection.anomalies import Anomaly
from gateway.wires.chat_validation import dumps_within_depth
from gateway.wires.responses_rules import TOOL_VALUE_SERIALIZED

__all__ = ["serialized_tool_values"]


def serialized_tool_values(body: dict[str, Any],
                           ) -> tuple[dict[str, Any], tuple[Anomaly, ...]] | None:
    """``body`` with the tool-call arguments and tool results that are JSON objects or
    arrays written as their JSON text, and one anomaly for each; None when it has none."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    out: list[Any] | None = None
    anomalies: list[Anomaly] = []
    for index, message in enumerate(messages):
        if type(message) is not dict:
            continue
        new = message
        calls = message.get("tool_calls")
        if isinstance(calls, list) and any(_object_arguments(call) for call in calls):
            written = []
            for call in calls:
                if _object_arguments(call):
                    function = call["function"]
                    text = dumps_within_depth(function["arguments"], "sent as text").decode()
                    call = {**call, "function": {**function, "arguments": text}}
                    call_id = call.get("id")
                    anomalies.append(Anomaly(TOOL_VALUE_SERIALIZED, index,
                                             call_id if isinstance(call_id, str) else None))
                written.append(call)
            new = {**new, "tool_calls": written}
        content = message.get("content")
        if message.get("role") == "tool" and isinstance(content, dict):
            text = dumps_within_depth(content, "sent as text").decode()
            new = {**new, "content": text}
            call_id = message.get("tool_call_id")
            anomalies.append(Anomaly(TOOL_VALUE_SERIALIZED, index,
                                     call_id if isinstance(call_id, str) else None))
        if new is not message:
            if out is None:
                out = list(messages)
            out[index] = new
    if out is None:
        return None
    return {**body, "messages": out}, tuple(anomalies)


def _object_arguments(call: Any) -> bool:
    function = call.get("function") if type(call) is dict else None
    return type(function) is dict and isinstance(function.get("arguments"), (dict, list))
