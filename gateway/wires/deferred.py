"""A wire history's neutral view built only when something reads it (pure).

A body the gateway never saw is most often plain (nothing in it the wire's rules change:
:mod:`gateway.wires.anthropic_plain`, :mod:`gateway.wires.responses_plain`) and goes to
its upstream as it came: nothing reads its neutral view unless the upstream refuses it,
the projection has work to do, compaction runs, the request is translated or the next
turn is read over it. Building that view, and freeing it, was a third of what such a body
cost. What the request needs of the view before then (how many neutral messages, the
context counts, what the session fingerprint hashes, whether the projection would change
it) is read from the wire items in one walk by each wire's deferred view, as the built
view would give it; the view is built (the wire's ``parse_*``) the first time anything
reads it, and the deferred view then answers as that view.
"""

from __future__ import annotations

from typing import Any

from gateway.projection.anomalies import Anomaly
from gateway.projection.lazy_messages import DeferredMessages
from gateway.telemetry.context import CountedMessages
from gateway.wires.base import Message, WireView


class DeferredView:
    """What the deferred views of the wires share (a mixin before the wire's view class:
    the view's attributes other than ``messages`` and ``anomalies`` are the built view's).

    ``counted``: the context counts of its neutral messages (``telemetry.context``'s
    estimate); ``lead``: the neutral messages the session fingerprint hashes; ``clean``:
    the projection returns its messages unchanged (``projection.fastpath.is_clean``)."""

    __slots__ = ()

    messages: list[Message]
    anomalies: list[Anomaly]
    counted: CountedMessages
    lead: list[Message]
    clean: bool

    def built(self) -> WireView:
        """The view, built now if nothing read it before."""
        messages = self.messages
        assert isinstance(messages, DeferredMessages)
        messages.fill()
        view: WireView = messages.built
        return view

    @property
    def is_built(self) -> bool:
        """True once something read the view."""
        messages = self.messages
        return not isinstance(messages, DeferredMessages) or messages.parsed

    def unchanged(self, projected: list[Any]) -> bool:
        """:meth:`WireView.unchanged`, without building the view for an unbuilt copy of its
        messages (the projection of a clean history)."""
        if self.anomalies:
            return False
        if isinstance(projected, DeferredMessages) and projected.is_twin_of(self.messages):
            return True
        return self.built().unchanged(projected)

    @property
    def sources(self) -> list[list[Any]]:
        return self.built().sources

    @sources.setter
    def sources(self, value: list[list[Any]]) -> None:
        self.built().sources = value

    @property
    def calls(self) -> dict[int, Any]:
        return self.built().calls

    @calls.setter
    def calls(self, value: dict[int, Any]) -> None:
        self.built().calls = value

    @property
    def parts(self) -> dict[int, Any]:
        return self.built().parts

    @parts.setter
    def parts(self, value: dict[int, Any]) -> None:
        self.built().parts = value
