"""The "nothing to do" check that lets a valid history skip projection entirely.

This runs on every request, so it is one flat pass with no allocation and no function call
per message in the common shapes. It must never call a history clean when project() would
repair it; calling a clean history dirty only costs time (the full pipeline then finds
nothing and returns the same messages).
"""

from __future__ import annotations

from typing import Any

from gateway.projection.content import assistant_has_payload, parts_are_clean
from gateway.projection.render import IS_ERROR_FIELD, MODEL_NOTE_FIELD


def is_clean(messages: list[Any], *, partial: bool = False) -> bool:
    """True when project() would return ``messages`` unchanged with no anomaly."""
    scan = CleanScan(partial=partial)
    return scan.feed(messages) and scan.finish()


class CleanScan:
    """:func:`is_clean` that can be resumed: ``feed`` a history in pieces (a prefix seen
    before, then the messages a later request added) and ``finish`` once it is whole.
    ``copy`` keeps a prefix's state for a later request that extends it."""

    __slots__ = (
        "calls",
        "clean",
        "done",
        "owed",
        "partial",
        "seen_assistant",
        "tool_before_assistant",
    )

    def __init__(self, *, partial: bool = False) -> None:
        self.partial = partial
        # The open exchange: the tool_calls list of the last assistant message, how many
        # calls it has (0 once the exchange is closed) and how many are answered so far.
        # Malformed calls (no string id) are skipped.
        self.calls: list[Any] = []
        self.owed = 0
        self.done = 0
        self.seen_assistant = False
        self.tool_before_assistant = False
        self.clean = True  # False once a message is found that project() would change

    def copy(self) -> CleanScan:
        """An independent scan in the same state."""
        twin = CleanScan(partial=self.partial)
        twin.calls, twin.owed, twin.done = self.calls, self.owed, self.done
        twin.seen_assistant, twin.tool_before_assistant = (self.seen_assistant,
                                                           self.tool_before_assistant)
        twin.clean = self.clean
        return twin

    def finish(self) -> bool:
        """True when the whole history fed so far is clean (no call left unanswered)."""
        if not self.clean or (self.done < self.owed and _owes(self.calls, self.done)):
            return False
        return not (self.tool_before_assistant and self.seen_assistant)

    def feed(self, messages: list[Any]) -> bool:
        """Scan the next messages of the history; False as soon as one is not clean."""
        if not self.clean:
            return False
        self.clean = clean = self._feed(messages)
        return clean

    def _feed(self, messages: list[Any]) -> bool:
        # One flat loop over locals, no call per message in the common shapes: this runs on
        # every request. The state is written back however the loop ends.
        calls, owed, done = self.calls, self.owed, self.done
        seen_assistant, partial = self.seen_assistant, self.partial
        tool_before_assistant = self.tool_before_assistant
        try:
            for m in messages:
                if m.__class__ is not dict:
                    if done < owed and _owes(calls, done):
                        return False
                    owed = 0
                    continue
                role = m.get("role")
                c = m.get("content")
                if role == "tool":
                    if done < owed:
                        call = calls[done]
                        cid = call.get("id") if call.__class__ is dict else None
                        if cid.__class__ is not str:
                            done = _skip_malformed(calls, done)
                            if done == owed:
                                return False  # nothing left to answer: orphan or duplicate
                            cid = calls[done]["id"]
                        tid = m.get("tool_call_id")
                        if tid != cid:  # results in another order than the calls?
                            later = _later_call(calls, done + 1, owed, tid)
                            if later < 0:
                                return False
                            # A private copy with the answered call moved up: calls[:done]
                            # stay the answered ones (the client's list is not touched).
                            calls = list(calls)
                            calls[done], calls[later] = calls[later], calls[done]
                        done += 1
                    elif seen_assistant or not partial:
                        return False  # orphan or duplicate
                    else:
                        tool_before_assistant = True  # fine only under the sizing guard
                    if IS_ERROR_FIELD in m or MODEL_NOTE_FIELD in m:
                        return False
                    if c.__class__ is str:
                        continue  # any string output, empty included, is valid as sent
                else:
                    if done < owed:
                        if _owes(calls, done):
                            return False  # a call without its result
                        owed = 0
                    if role == "assistant":
                        seen_assistant = True
                        tool_calls = m.get("tool_calls")
                        if tool_calls.__class__ is list and tool_calls:
                            calls = tool_calls
                            owed = len(tool_calls)
                            done = 0
                            if c is None or c.__class__ is str:
                                continue  # "" or null beside tool calls is valid as sent
                        elif tool_calls.__class__ is list:
                            return False  # `tool_calls: []`: refused upstream, dropped
                        elif c is None or (c.__class__ is str and (not c or c.isspace())):
                            if not assistant_has_payload(m):
                                return False
                            continue
                    elif role != "user" and role != "system" and role != "developer":
                        continue  # an unknown role: left as it is
                # The content of a tool, assistant, user, system or developer message
                # (adjacent user messages are valid as sent: only strict merges them).
                if c.__class__ is str:
                    if not c or c.isspace():
                        return False
                elif c.__class__ is list:
                    if not parts_are_clean(c):
                        return False
                elif c is None:
                    return False
            return True
        finally:
            self.calls, self.owed, self.done = calls, owed, done
            self.seen_assistant = seen_assistant
            self.tool_before_assistant = tool_before_assistant


def _later_call(calls: list[Any], start: int, end: int, call_id: Any) -> int:
    """Index of the well-formed call ``call_id`` in ``calls[start:end]``, else -1."""
    for i in range(start, end):
        call = calls[i]
        if type(call) is dict and call.get("id") == call_id and isinstance(call_id, str):
            return i
    return -1


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
