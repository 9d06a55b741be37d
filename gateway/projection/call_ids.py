"""Tool calls without ids, given ids (and their results with them).

Clients written for an API without call ids (Ollama's) send tool calls without an ``id``
and results without a ``tool_call_id``. Such a call cannot be paired with its result, and
OpenAI refuses it. :func:`add_call_ids` gives each call an id (``call_gw_<n>``, unused in the
history) and each result after it that answers none the id of the call it answers: by the
tool name the result gives (``name`` / ``tool_name``), else in call order, among the calls
of the assistant message before it (until the next user or assistant message). Pure: the
client's objects are never edited.
"""

from __future__ import annotations

from typing import Any

from gateway.projection.anomalies import CALL_ID_SYNTHESIZED, Anomaly
from gateway.projection.exchanges import Entry

__all__ = ["add_call_ids", "has_calls_without_ids"]


def has_calls_without_ids(messages: list[Any]) -> bool:
    """True when an assistant message holds a tool call without an id."""
    return any(type(m) is dict and isinstance(m.get("tool_calls"), list)
               and any(_without_id(c) for c in m["tool_calls"]) for m in messages)


def add_call_ids(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    """``entries`` (input index, message) with ids given as the module says, and one
    ``call_id_synthesized`` per call (``entries`` themselves when no call lacks an id)."""
    if not has_calls_without_ids([m for _, m in entries]):
        return entries, []
    taken = {c["id"] for _, m in entries if type(m) is dict
             and isinstance(m.get("tool_calls"), list) for c in m["tool_calls"]
             if type(c) is dict and isinstance(c.get("id"), str)}
    out = list(entries)
    anomalies: list[Anomaly] = []
    waiting: list[tuple[str, Any]] = []  # (id given, tool name) of the latest calls
    number = 0
    for position, (index, message) in enumerate(entries):
        if type(message) is not dict:
            continue
        role = message.get("role")
        if role == "tool":
            answered = message.get("tool_call_id")
            if waiting and not (isinstance(answered, str) and answered):
                named = message.get("name") or message.get("tool_name")
                pick = next((w for w in waiting if named and w[1] == named), waiting[0])
                waiting.remove(pick)
                out[position] = (index, {**message, "tool_call_id": pick[0]})
            continue
        waiting = []  # a user or assistant message: earlier calls are answered or not
        calls = message.get("tool_calls")
        if role != "assistant" or not isinstance(calls, list):
            continue
        written = []
        for call in calls:
            if _without_id(call):
                number += 1
                while f"call_gw_{number}" in taken:
                    number += 1
                call_id = f"call_gw_{number}"
                function = call.get("function")
                waiting.append((call_id, function.get("name")
                                if type(function) is dict else None))
                call = {**call, "id": call_id}
                anomalies.append(Anomaly(CALL_ID_SYNTHESIZED, index, call_id))
            written.append(call)
        if waiting:
            out[position] = (index, {**message, "tool_calls": written})
    return out, anomalies


def _without_id(call: Any) -> bool:
    return type(call) is dict and not (isinstance(call.get("id"), str) and call["id"])
