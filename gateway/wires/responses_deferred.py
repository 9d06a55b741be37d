"""A plain Responses input's neutral view, built only when something reads it (pure;
:mod:`gateway.wires.deferred` says why).

What the request needs of the view before then is read from the input items in one walk,
as :func:`~gateway.wires.responses_view.parse_input` would build the view: a run of
``function_call`` items (with an assistant message among them) is one assistant message
with tool calls, an output a tool message, a message item a message of its role, a
reasoning item an opaque message. From that: how many neutral messages, the context
counts (``telemetry.context``'s estimate of each), what the session fingerprint hashes
(the leading system and developer messages and the first user message) and whether the
projection would change the view (``projection.fastpath.is_clean``: a plain input's text
is never blank and its calls well formed, so that is whether every output answers a call
of the run of calls right before it, and every call of a run is answered before the next
item that is not an output). ``tests/wires/test_responses_deferred.py`` checks every
figure against the built view on generated plain inputs.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from gateway.projection.lazy_messages import DeferredMessages
from gateway.telemetry.context import (
    CALL_OVERHEAD,
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD,
    CountedMessages,
    counted_after,
)
from gateway.wires.base import Message, WireView
from gateway.wires.deferred import DeferredView
from gateway.wires.responses_view import parse_input


class DeferredResponsesView(DeferredView, WireView):
    """The neutral view of a plain ``input`` list, built on first read (see the module
    docstring and :class:`~gateway.wires.deferred.DeferredView`)."""

    __slots__ = ("clean", "counted", "lead")

    def __init__(self, items: list[Any],
                 walked: tuple[int, CountedMessages, list[Message], bool] | None = None,
                 ) -> None:
        """The view of plain ``items``; ``walked``: what :func:`_walk` gives of them, when
        a typed read found it (``responses_typed``)."""
        # (no WireView.__init__: every attribute but these is the built view's)
        count, self.counted, self.lead, self.clean = \
            walked if walked is not None else _walk(items)
        self.messages = DeferredMessages(partial(parse_input, items), count)
        self.anomalies = []


def _walk(items: list[Any]) -> tuple[int, CountedMessages, list[Message], bool]:
    """(neutral messages, their counts, the fingerprint's messages, clean) of a plain
    input (see the module docstring)."""
    overhead, per_token = MESSAGE_OVERHEAD, CHARS_PER_TOKEN
    t = s = o = n = 0
    turn = at_t = at_s = at_o = 0
    lead: list[Message] = []
    user_found = False
    clean = True
    run: set[str] = set()  # the call ids of the run of calls being read
    chars = 0  # their names' and arguments' characters
    said: Any = None  # the assistant message item among them
    open_calls: set[str] = set()  # calls of the last run not answered yet
    for item in items:
        kind = item.get("type")
        if kind is None:
            kind = "message"
        if kind == "function_call":
            if not run and open_calls:
                clean = False  # (a call of the run before without its output)
            run.add(item["call_id"])
            chars += len(item["name"]) + len(item["arguments"])
            continue
        if run:
            if kind == "message" and said is None and item["role"] == "assistant":
                said = item
                continue
            t += overhead + (_text(said["content"]) if said is not None else 0) \
                + -(-chars // per_token) + CALL_OVERHEAD * len(run)
            n += 1
            turn, at_t, at_s, at_o = n, t, s, o
            open_calls, run, chars, said = run, set(), 0, None
        n += 1
        if kind == "function_call_output":
            tokens = overhead + -(-len(item["output"]) // per_token)
            t += tokens
            o += tokens
            call = item["call_id"]
            if call in open_calls:
                open_calls.discard(call)
            else:
                clean = False  # an orphan for the scan, or an output of an earlier run
            continue
        if open_calls:
            clean = False  # a call without its output before this item
            open_calls = set()
        if kind == "reasoning":
            t += overhead
            continue
        role, content = item["role"], item["content"]
        tokens = overhead + _text(content)
        t += tokens
        if role == "assistant":
            turn, at_t, at_s, at_o = n, t, s, o
        elif role != "user":
            s += tokens
        if not user_found and role != "assistant":
            lead.append({"role": role, "content": _neutral(content)})
            user_found = role == "user"
    if run:
        t += overhead + (_text(said["content"]) if said is not None else 0) \
            + -(-chars // per_token) + CALL_OVERHEAD * len(run)
        n += 1
        turn, at_t, at_s, at_o = n, t, s, o
        clean = False  # (calls the input ends with wait for their outputs)
    if open_calls:
        clean = False
    totals = (t, s, o, 0)
    counted = (CountedMessages(0, totals) if turn == 0
               else CountedMessages(0, totals, turn, (at_t, at_s, at_o, 0)))
    return n, counted, lead, clean


def _text(content: Any) -> int:
    """The tokens of a plain message's text (a string or text parts)."""
    if content.__class__ is str:
        return -(-len(content) // CHARS_PER_TOKEN)
    return -(-sum(len(part["text"]) for part in content) // CHARS_PER_TOKEN)


def _neutral(content: Any) -> Any:
    """A plain message's content as the view holds it (text parts as chat's)."""
    if content.__class__ is str:
        return content
    return [{"type": "text", "text": part["text"]} for part in content]



def deferred_after(view: WireView, replaced: list[Any], added: list[Any],
                   items: list[Any]) -> tuple[DeferredResponsesView, int] | None:
    """The unbuilt view of ``items`` (a kept plain input, then the plain items ``added``)
    over ``view``, the kept input's deferred view (built since or not: its figures stay):
    those figures plus a walk of ``added`` alone (every call of a clean input is answered,
    so the walk starts as it would after it). None when ``view`` is no deferred view, is
    not clean, holds no user message yet (the fingerprint's messages may go on), or the
    turn replaced kept items. With the view, how many of its neutral messages are the kept
    view's."""
    if (not isinstance(view, DeferredResponsesView) or replaced
            or not view.clean or not any(m["role"] == "user" for m in view.lead)):
        return None
    kept = len(view.messages)
    count, counted, _lead, clean = _walk(added)
    after = CountedMessages(kept, counted.totals,
                            kept + counted.turn if counted.turn >= 0 else -1, counted.at_turn)
    return DeferredResponsesView(items, (kept + count, counted_after(view.counted, after),
                                         view.lead, clean)), kept
