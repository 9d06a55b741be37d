"""The neutral exchange view every wire adapter builds, and the codec the Flow calls.

A wire adapter (Responses, Anthropic Messages) turns its history into OpenAI chat messages
so the same ``project()`` / ``project_strict()`` rules repair it. Each neutral message
carries :data:`WIRE_KEY`, the index of the wire item(s) it came from; a message the
projection did not touch is the very same object, so the adapter writes the original
item(s) back as they were. A changed message still carries the key (projection copies
unknown fields) and is rebuilt from its source; a message without the key is new
(synthesized result, placeholder, compaction summary). Tool calls are matched back to
their wire item by object identity: projection moves call dicts, never copies them.

Neutral messages never go upstream: the codec maps them back first. The key also keeps
neutral user messages from counting as "plain" (projection merges adjacent plain user
messages, which both wires accept as they are).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from gateway.projection.anomalies import Anomaly
from gateway.providers.base import Provider

if TYPE_CHECKING:
    from gateway.routing import ModelRoute

WIRE_KEY = "x-wire-source"

Message = dict[str, Any]
K = TypeVar("K")


def entries_before(by_index: dict[K, int], cut: int) -> dict[K, int]:
    """The entries of ``by_index`` whose value (an index) is below ``cut``, when the
    entries were added in index order (as a walk over a history adds them): a copy made
    in C when the last one is below ``cut`` too, as on an agent's next turn (only added
    items), instead of a Python loop over every entry of the history."""
    if next(reversed(by_index.values()), -1) < cut:
        return dict(by_index)
    return {key: index for key, index in by_index.items() if index < cut}


@dataclass(slots=True)
class WireView:
    """Neutral chat messages of a wire history and the wire items they came from.

    ``sources[k]`` is the list of wire items (messages, blocks, input items) behind the
    neutral message ``messages[k]`` as first built; ``calls`` maps ``id(call dict)`` to the
    wire item (``tool_use`` block, ``function_call`` item) behind each tool call.
    """

    messages: list[Message] = field(default_factory=list)
    sources: list[list[Any]] = field(default_factory=list)
    calls: dict[int, Any] = field(default_factory=dict)
    parts: dict[int, Any] = field(default_factory=dict)
    # Repairs made while reading the wire itself (what has no chat counterpart, such as a
    # Responses input item sent twice); reported with the projection's.
    anomalies: list[Anomaly] = field(default_factory=list)

    def add(self, message: Message, source: list[Any]) -> Message:
        """Append a neutral message built from ``source`` (tagged with its index)."""
        message[WIRE_KEY] = len(self.messages)
        self.messages.append(message)
        self.sources.append(source)
        return message

    def origin(self, message: Any) -> tuple[int | None, bool]:
        """(source index or None for a new message, True when the message is untouched)."""
        if type(message) is not dict:
            return None, False
        k = message.get(WIRE_KEY)
        if not isinstance(k, int) or not 0 <= k < len(self.messages):
            return None, False
        return k, self.messages[k] is message

    def unchanged(self, projected: list[Any]) -> bool:
        """True when the projection returned the view's messages as they are (and reading
        the wire dropped nothing)."""
        return not self.anomalies and len(projected) == len(self.messages) and all(
            a is b for a, b in zip(projected, self.messages, strict=True)
        )


@dataclass(frozen=True, slots=True)
class NativeSenders:
    """How a native request reaches the other deployments of its model group (and of its
    fallback groups): which of them speak the wire natively, and a sender to one."""

    speaks: Callable[[ModelRoute], bool]
    sender: Callable[[ModelRoute], Provider]


class WireCodec(Protocol):
    """What the Flow asks a native wire: the upstream body for projected neutral messages,
    and the provider that sends it (native endpoint, wire's own auth headers)."""

    provider: Provider
    upstream_model: str
    # Other deployments that may serve the request natively; None: its first one only (a
    # history that lives at that provider: ``previous_response_id``).
    senders: NativeSenders | None
    view: Any  # the WireView the request was read into (its ``anomalies`` are reported)
    # The wire pairs a tool output with its call by id wherever it comes after it (the
    # Responses API): a result placed later is valid as sent; strict upstreams refuse it.
    results_by_id: bool

    @property
    def history_key(self) -> str:
        """The body's field that holds the history (``messages``, ``input``)."""
        ...

    def sent_to(self, route: ModelRoute) -> WireCodec:
        """The request as sent to another deployment that speaks the wire (``senders``)."""
        ...

    def upstream_body(self, messages: list[Message], refusal: str | None = None,
                      ) -> tuple[dict[str, Any], tuple[Anomaly, ...]]:
        """The wire body to send, its history rebuilt from the projected messages, and what
        the wire's own rules repaired on it (more after a refusal: ``refusal`` is the
        provider's wording, for the strict rung)."""
        ...

    def to_chat(self) -> dict[str, Any]:
        """The request as a Chat Completions body: a fallback that speaks only chat gets it
        translated, and its answer is translated back."""
        ...
