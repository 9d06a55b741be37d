"""A plain Messages history's neutral view, built only when something reads it (pure;
:mod:`gateway.wires.deferred` says why).

What the request needs of the view before then is read from the wire messages in one
walk, as the view would give it: how many neutral messages, the context counts
(``telemetry.context``'s estimate of each neutral message) and what the session
fingerprint hashes (the first neutral user message). :class:`DeferredAnthropicView` holds
those and builds the view (:func:`~gateway.wires.anthropic_view.parse_messages`) the
first time anything reads it.

Why a plain history is clean (``projection.fastpath.is_clean`` of its view): roles
alternate and it ends with a user message; every tool result answers the calls of the
assistant message right before it, in their order, and all of them; no text (a message's,
a block's, a result's) is blank; an assistant message says something besides thinking.
``tests/wires/test_anthropic_deferred.py`` checks that and every figure here against the
built view on generated plain bodies.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import orjson

from gateway.projection.lazy_messages import DeferredMessages
from gateway.telemetry.context import (
    CALL_OVERHEAD,
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD,
    CountedMessages,
    counted_after,
)
from gateway.wires.anthropic_view import AnthropicView, parse_messages
from gateway.wires.base import Message, WireView
from gateway.wires.deferred import DeferredView


class DeferredAnthropicView(DeferredView, AnthropicView):
    """The neutral view of a plain ``messages`` list, built on first read (see the module
    docstring and :class:`~gateway.wires.deferred.DeferredView`)."""

    __slots__ = ("clean", "counted", "lead")

    def __init__(self, messages: list[Any],
                 walked: tuple[int, CountedMessages, list[Message]] | None = None) -> None:
        """The view of plain ``messages``; ``walked``: what :func:`_walk` gives of them,
        when a typed read found it (``anthropic_typed``)."""
        # (no AnthropicView.__init__: every attribute but these is the built view's)
        count, self.counted, self.lead = walked if walked is not None else _walk(messages)
        self.clean = True
        self.messages = DeferredMessages(partial(parse_messages, messages), count)
        self.anomalies = []

    def built(self) -> AnthropicView:
        """The view, built now if nothing read it before."""
        view = super().built()
        assert isinstance(view, AnthropicView)
        return view

    @property
    def groups(self) -> list[int]:
        return self.built().groups

    @groups.setter
    def groups(self, value: list[int]) -> None:
        self.built().groups = value

    @property
    def members(self) -> dict[int, list[int]]:
        return self.built().members

    @members.setter
    def members(self, value: dict[int, list[int]]) -> None:
        self.built().members = value

    @property
    def originals(self) -> list[Any]:
        return self.built().originals

    @originals.setter
    def originals(self, value: list[Any]) -> None:
        self.built().originals = value

    @property
    def positions(self) -> dict[int, tuple[int, int]]:
        return self.built().positions


def _walk(messages: list[Any]) -> tuple[int, CountedMessages, list[Message]]:
    """How many neutral messages a plain history's view holds, their context counts and
    the first neutral user message (what the fingerprint hashes), from its wire messages.
    Each neutral message costs ``MESSAGE_OVERHEAD`` and its text by ``CHARS_PER_TOKEN``; an
    assistant's calls their name and arguments (its ``input`` as JSON) and ``CALL_OVERHEAD``
    each; thinking counts nothing (``telemetry.context._walk`` on the view)."""
    overhead, per_token = MESSAGE_OVERHEAD, CHARS_PER_TOKEN
    t = o = n = 0
    turn = at_t = at_o = 0
    lead: list[Message] = []
    for message in messages:
        content = message["content"]
        if message["role"] == "assistant":
            if content.__class__ is str:
                t += overhead + -(-len(content) // per_token)
            else:
                text = calls = chars = 0
                for block in content:
                    kind = block["type"]
                    if kind == "text":
                        text += len(block["text"])
                    elif kind == "tool_use":
                        calls += 1
                        chars += len(block["name"]) + len(orjson.dumps(block["input"]).decode())
                t += overhead + -(-text // per_token)
                if calls:
                    t += -(-chars // per_token) + CALL_OVERHEAD * calls
            n += 1
            turn, at_t, at_o = n, t, o
            continue
        if content.__class__ is str:
            t += overhead + -(-len(content) // per_token)
            n += 1
            if not lead:
                lead.append({"role": "user", "content": content})
            continue
        text = 0
        run: list[Any] = []
        for block in content:
            if block["type"] == "tool_result":
                result = block["content"]
                if result.__class__ is str:
                    tokens = overhead + -(-len(result) // per_token)
                else:
                    tokens = overhead + -(-sum(len(b["text"]) for b in result) // per_token)
                t += tokens
                o += tokens
                n += 1
            else:
                text += len(block["text"])
                run.append(block)
        if run:
            t += overhead + -(-text // per_token)
            n += 1
            if not lead:
                lead.append({"role": "user", "content": run})
    totals = (t, 0, o, 0)
    counted = (CountedMessages(0, totals) if turn == 0
               else CountedMessages(0, totals, turn, (at_t, 0, at_o, 0)))
    return n, counted, lead


def deferred_after(view: WireView, replaced: list[Any], added: list[Any],
                   messages: list[Any]) -> tuple[DeferredAnthropicView, int] | None:
    """The unbuilt view of ``messages`` (a kept plain history cut after one of its
    messages, then the plain messages ``added``), over ``view``, the kept history's
    deferred view (built since or not: its figures stay): those figures, less those of the
    kept messages after the cut (``replaced``), plus a walk of ``added`` alone. None when
    ``view`` is no deferred view, or the cut leaves the kept history's last assistant
    message out (its counts then need the whole history walked). With the view, how many
    of its neutral messages are the kept view's."""
    if not isinstance(view, DeferredAnthropicView):
        return None
    if any(message["role"] == "assistant" for message in replaced):
        return None
    before = view.counted
    kept = len(view.messages)
    if replaced:
        count, counted, _lead = _walk(replaced)
        kept -= count
        totals = before.totals
        less = counted.totals
        before = CountedMessages(0, (totals[0] - less[0], totals[1] - less[1],
                                     totals[2] - less[2], totals[3] - less[3]),
                                 before.turn, before.at_turn)
        if before.turn > kept:
            return None
    count, counted, lead = _walk(added)
    after = CountedMessages(kept, counted.totals,
                            kept + counted.turn if counted.turn >= 0 else -1, counted.at_turn)
    return DeferredAnthropicView(messages, (kept + count, counted_after(before, after),
                                            view.lead or lead)), kept
