"""project() of a history that extends one projected before: only the added messages are laid
out (pure, no I/O).

Agents resend their history with a few messages added, and a repaired break stays in it, so
every later turn of such a session needs the whole projection. The default projection lays a
history out in one walk whose state at the boundary only matters through the call ids seen:
when none of the added tool messages answers a call of the earlier messages, the projection of
the whole history is the earlier projection followed by the added messages' own, the anomalies
merged step by step (a call left unanswered at the end of the earlier history is no longer
trailing once messages follow it). Otherwise the whole history is projected again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from gateway.projection.anomalies import TOOL_RESULT_SYNTHESIZED, Anomaly, Projection
from gateway.projection.call_ids import function_results
from gateway.projection.exchanges import Found, lay_out


@dataclass(slots=True)
class Layout:
    """A history's default projection, kept to extend it: never changed once made, but for
    ``json`` (filled in when it is first serialized) and ``handed``."""

    count: int  # how many messages were projected
    out: list[Any]  # the projected messages
    found: Found  # the anomalies, by pipeline step
    call_ids: frozenset[str]  # every call id the history's assistant messages made
    # ``out`` serialized (orjson), in pieces that join into it: a later turn's adds its
    # own messages' pieces to these without copying them (they are joined once, into the
    # upstream body).
    json: tuple[bytes | memoryview, ...] | None = None
    # The list project() last gave out for it (a copy of ``out``): a later turn laid out
    # over this one begins with its very items.
    handed: list[Any] | None = None


class TurnLayouts:
    """One request's projection over its previous turn's Layout (when there is one), and its
    own Layout once made, for the next turn."""

    __slots__ = ("_added", "_extended", "_handed", "_prior", "current", "previous")

    def __init__(self, previous: Layout | None = None,
                 added: list[Any] | None = None) -> None:
        self.previous = previous  # of the previous turn, whose messages begin this one's
        # The messages this turn added after the previous one's, when the reader parsed
        # them (the turn's own list may be unparsed: LazyMessages).
        self._added = added
        self.current: Layout | None = None
        self._handed: list[Any] | None = None
        self._prior: list[Any] | None = None  # the previous turn's list, when laid over it
        self._extended = False

    def project(self, messages: list[Any]) -> Projection:
        """What project() gives for the whole of ``messages`` (a history that is not clean),
        laying out only what the previous turn did not when it can."""
        previous = self.previous
        extended = extend_layout(previous, messages, self._added) if previous else None
        self._extended = extended is not None
        self._prior = previous.handed if extended is not None and previous else None
        if extended is None:
            extended = project_layout(messages)
        projection, self.current = extended
        self._handed = self.current.handed = projection.messages
        return projection

    def extends(self, messages: object) -> list[Any] | None:
        """When ``messages`` is the list :meth:`project` returned, laid out over the
        previous turn's: the list that turn was given (its items are the first of
        ``messages``, the very objects), so that comparing the two turns needs no walk;
        None otherwise."""
        return self._prior if messages is self._handed else None

    def json_of(self, messages: list[Any]) -> Sequence[bytes | memoryview] | None:
        """``orjson.dumps(messages)`` in pieces (``b"".join`` gives it) when ``messages`` is
        the list :meth:`project` returned: the previous turn's pieces and the added
        messages' when it was laid out over it (nothing serialized or copied again); None
        for another list or one orjson cannot write (the caller then serializes and
        reports)."""
        current = self.current
        if current is None or messages is not self._handed:
            return None
        if current.json is None:
            previous = self.previous if self._extended else None
            try:
                if previous is None or previous.json is None or not previous.out:
                    current.json = (orjson.dumps(current.out),)
                elif len(current.out) == len(previous.out):
                    current.json = previous.json  # nothing added reached the output
                else:
                    more = memoryview(orjson.dumps(current.out[len(previous.out):]))
                    *pieces, last = previous.json  # (views: "]" of the one, "[" of the other)
                    current.json = (*pieces, memoryview(last)[:-1], b",", more[1:])
            except orjson.JSONEncodeError:
                return None
        return current.json


def project_layout(messages: list[Any]) -> tuple[Projection, Layout]:
    """``run_pipeline(messages, strict=False)`` (what project() gives) and its Layout."""
    found = Found()
    entries, found.converted = function_results(list(enumerate(messages)))
    laid = [m for _, m in entries] if found.converted else messages
    out = lay_out(laid, range(len(messages)), found, guard=False, merge_assistants=False)
    layout = Layout(len(messages), out, found, frozenset(_call_ids(messages)))
    return Projection(list(out), found.in_step_order()), layout


def extend_layout(layout: Layout, messages: list[Any], added: list[Any] | None = None,
                  ) -> tuple[Projection, Layout] | None:
    """The projection of ``messages``, whose first ``layout.count`` are the very messages
    ``layout`` was made of (or the same as they), and its Layout; None when the added
    messages answer an earlier call (then only projecting the whole history gives the
    right layout). ``added``: ``messages[layout.count:]`` when the caller has them (then
    ``messages`` is not read: it may be a list still unparsed)."""
    count = layout.count
    if added is None or len(messages) != count + len(added):
        added = messages[count:]
    for message in added:
        if message.__class__ is dict and message.get("role") == "tool":
            answers = message.get("tool_call_id")
            if answers.__class__ is str and answers in layout.call_ids:
                return None
        elif message.__class__ is dict and message.get("role") == "function":
            return None  # it may answer an earlier call (call_ids.function_results)
    if not added:
        return Projection(list(layout.out), layout.found.in_step_order()), layout
    more = Found()
    out_added = lay_out(added, range(count, count + len(added)), more, guard=False,
                        merge_assistants=False)
    before = layout.found
    walked, laid = before.paired[:before.walked], before.paired[before.walked:]
    if out_added:  # the earlier last call is followed by messages now: not trailing
        laid = [replace(a, trailing=False) if _trailing(a) else a for a in laid]
    found = Found(
        converted=before.converted,
        blank=before.blank + more.blank,
        paired=walked + more.paired[:more.walked] + laid + more.paired[more.walked:],
        rendered=before.rendered + more.rendered,
        walked=before.walked + more.walked,
    )
    out = layout.out + out_added
    more_ids = _call_ids(added)
    ids = layout.call_ids | more_ids if more_ids else layout.call_ids
    return Projection(list(out), found.in_step_order()), Layout(len(messages), out, found, ids)


def _trailing(anomaly: Anomaly) -> bool:
    return anomaly.kind == TOOL_RESULT_SYNTHESIZED and anomaly.trailing


def _call_ids(messages: list[Any]) -> set[str]:
    """The ids of every call any assistant message makes (well formed or not, a superset of
    what the walk pairs results with)."""
    ids: set[str] = set()
    for message in messages:
        if message.__class__ is not dict:
            continue
        calls = message.get("tool_calls")
        if calls.__class__ is list:
            for call in calls:
                if call.__class__ is dict and isinstance(cid := call.get("id"), str):
                    ids.add(cid)
    return ids
