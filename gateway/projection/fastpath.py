"""The "nothing to do" check that lets a valid history skip projection entirely.

This runs on every request, so it is one flat pass with no allocation beyond the id list
of each tool-calling assistant message. It must never call a history clean when project()
would repair it; calling a clean history dirty only costs time (the full pipeline then
finds nothing and returns the same messages).
"""

from __future__ import annotations

from typing import Any

from gateway.projection.content import assistant_has_payload, parts_are_clean
from gateway.projection.render import IS_ERROR_FIELD, MODEL_NOTE_FIELD


def is_clean(messages: list[Any], *, partial: bool = False) -> bool:
    """True when project() would return ``messages`` unchanged with no anomaly."""
    # The open exchange: the tool_calls list of the last assistant message and how many of
    # its calls are answered so far (`done`). Malformed calls (no string id) are skipped.
    calls: list[Any] = []
    done = 0
    prev_plain_user = False
    seen_assistant = False
    tool_before_assistant = False
    for m in messages:
        if m.__class__ is not dict:
            if done < len(calls) and _owes(calls, done):
                return False
            calls = []
            prev_plain_user = False
            continue
        role = m.get("role")
        if role == "tool":
            prev_plain_user = False
            if done < len(calls):
                call = calls[done]
                if call.__class__ is not dict or call.get("id").__class__ is not str:
                    done = _skip_malformed(calls, done)
                    if done == len(calls):
                        return False  # nothing left to answer: orphan or duplicate
                    call = calls[done]
                if m.get("tool_call_id") != call["id"]:
                    return False
                done += 1
            elif seen_assistant or not partial:
                return False  # orphan or duplicate
            else:
                tool_before_assistant = True  # fine only under the sizing guard
            if IS_ERROR_FIELD in m or MODEL_NOTE_FIELD in m:
                return False
            c = m.get("content")
            if c.__class__ is str:
                if not c or c.isspace():
                    return False
            elif c.__class__ is list:
                if not parts_are_clean(c):
                    return False
            elif c is None:
                return False
            continue
        if done < len(calls):
            if _owes(calls, done):
                return False  # a call without its result
            calls = []
        c = m.get("content")
        if role == "user":
            if c.__class__ is str:
                if not c or c.isspace():
                    return False
                plain = len(m) == 2
            elif c.__class__ is list:
                if not parts_are_clean(c):
                    return False
                plain = len(m) == 2
            elif c is None:
                return False
            else:
                plain = False
            if plain and prev_plain_user:
                return False
            prev_plain_user = plain
            continue
        prev_plain_user = False
        if role == "assistant":
            seen_assistant = True
            tool_calls = m.get("tool_calls")
            if tool_calls.__class__ is list and tool_calls:
                calls = tool_calls
                done = 0
                if c is None:
                    continue
            elif c is None:
                if not assistant_has_payload(m):
                    return False
                continue
        elif role != "system" and role != "developer":
            continue
        if c.__class__ is str:
            if not c or c.isspace():
                return False
        elif c.__class__ is list:
            if not parts_are_clean(c):
                return False
        elif c is None:
            return False
    if done < len(calls) and _owes(calls, done):
        return False
    return not (tool_before_assistant and seen_assistant)


def _is_call(call: Any) -> bool:
    return type(call) is dict and isinstance(call.get("id"), str)


def _skip_malformed(calls: list[Any], start: int) -> int:
    """Index of the next well-formed call at or after ``start`` (len(calls) if none)."""
    while start < len(calls) and not _is_call(calls[start]):
        start += 1
    return start


def _owes(calls: list[Any], start: int) -> bool:
    """True when a well-formed call at or after ``start`` still waits for its result."""
    return _skip_malformed(calls, start) < len(calls)
