"""The passes project_strict() adds to project() (SPEC §2.2).

Each pass takes and returns entries (input index, message) and never mutates a message:
a changed message is a new dict, an untouched one is passed along as the same object.
Consecutive assistant messages merge during the layout walk (exchanges.lay_out); the
placeholder goes into the final messages.
"""

from __future__ import annotations

from typing import Any

from gateway.projection.anomalies import (
    DUPLICATE_TOOL_CALL_DEDUPED,
    LEADING_NON_USER_DROPPED,
    USER_PLACEHOLDER_INSERTED,
    Anomaly,
)
from gateway.projection.content import clean_message
from gateway.projection.exchanges import OPAQUE_ROLE, Entry, role_of, tool_call_id_of

USER_PLACEHOLDER_TEXT = (
    "<system-reminder>The start of this conversation is not available in the current "
    "context. Continue from the messages that follow.</system-reminder>"
)

_PREAMBLE_ROLES = ("system", "developer")
_KEPT_ROLES = (*_PREAMBLE_ROLES, OPAQUE_ROLE)


def dedupe_tool_calls(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    """Keep only the first occurrence of each tool call id across the history.

    A later call with a seen id is removed from its assistant message; an assistant message
    left with no calls and no content goes too. Results are re-paired afterwards, so every
    result carrying the id answers the first call.
    """
    seen: set[str] = set()
    anomalies: list[Anomaly] = []
    out: list[Entry] = []
    for index, message in entries:
        calls = message.get("tool_calls") if role_of(message) == "assistant" else None
        if not isinstance(calls, list) or not calls:
            out.append((index, message))
            continue
        kept: list[Any] = []
        for call in calls:
            cid = call.get("id") if type(call) is dict else None
            if isinstance(cid, str):
                if cid in seen:
                    anomalies.append(Anomaly(DUPLICATE_TOOL_CALL_DEDUPED, index, cid))
                    continue
                seen.add(cid)
            kept.append(call)
        if len(kept) == len(calls):
            out.append((index, message))
            continue
        new = {k: v for k, v in message.items() if k != "tool_calls"}
        if kept:
            new["tool_calls"] = kept
        cleaned = clean_message(new, strict=True)
        if cleaned is not None:
            out.append((index, cleaned))
    return out, anomalies


def has_user(entries: list[Entry]) -> bool:
    """True when some entry is a user message."""
    return any(role_of(m) == "user" for _, m in entries)


def drop_leading_non_user(entries: list[Entry]) -> tuple[list[Entry], list[Anomaly]]:
    """Drop everything before the first user message but the system/developer messages and
    the items a wire keeps opaque to the projection (a Responses ``compaction`` item opens
    a history).

    Only called when the history has a user message. Tool results of a dropped assistant
    that sit after the first user message become orphans for the pairing that follows.
    """
    first_user = next(i for i, (_, m) in enumerate(entries) if role_of(m) == "user")
    anomalies: list[Anomaly] = []
    out: list[Entry] = []
    for index, message in entries[:first_user]:
        if role_of(message) in _KEPT_ROLES:
            out.append((index, message))
        else:
            anomalies.append(Anomaly(LEADING_NON_USER_DROPPED, index, tool_call_id_of(message)))
    if not anomalies:
        return entries, anomalies
    out.extend(entries[first_user:])
    return out, anomalies


def insert_user_placeholder(messages: list[Any]) -> tuple[list[Any], list[Anomaly]]:
    """Put a placeholder user message after the system/developer preamble.

    Only called, on the final messages, when the history has no user message. A history
    with nothing but preamble messages (or nothing at all) is left as it is: there is
    nothing to continue from.
    """
    start = 0
    while start < len(messages) and role_of(messages[start]) in _PREAMBLE_ROLES:
        start += 1
    if start == len(messages):
        return messages, []
    placeholder = {"role": "user", "content": USER_PLACEHOLDER_TEXT}
    return (
        [*messages[:start], placeholder, *messages[start:]],
        [Anomaly(USER_PLACEHOLDER_INSERTED)],
    )
