"""One request's view of its session, and the per-model compaction settings: the small
pure pieces the compaction service works with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.compaction.budget import CompactionSettings
from gateway.compaction.user_input import is_real_user_message
from gateway.config import CompactionConfig, GatewayConfig
from gateway.projection.anomalies import Message
from gateway.projection.incremental import TurnLayouts
from gateway.sessions import CompactionRecord, prefix_chain
from gateway.telemetry.context import CountedMessages

if TYPE_CHECKING:
    from gateway.routing import ModelRoute


@dataclass(frozen=True, slots=True)
class KnownHistory:
    """What the edge already learned of a request's messages while reading them (over the
    history the client sent before): the driver and compaction do not walk them again."""

    clean: bool  # project() would return the messages unchanged, with no anomaly
    media_parts: int  # non-text content parts (images, audio, files)
    fingerprint: str  # the session fingerprint (clients that send no session id)
    # The previous turn's projection to extend, and this one's for the next turn.
    layouts: TurnLayouts | None = field(default=None, compare=False)
    # False when the body's bytes hold no invisible character (``projection.invisible``):
    # checked on the bytes a turn added, the rest known from the turn before.
    invisible: bool = field(default=True, compare=False)
    # Which body this one is, and which kept body it was read over (its first ``reused``
    # messages are that body's very objects): per-session telemetry compares a turn with
    # the one before by these instead of walking both message lists.
    turn: object | None = field(default=None, compare=False)
    extends: object | None = field(default=None, compare=False)
    reused: int = field(default=0, compare=False)
    # What validating the messages counted for the context report (from message ``reused``).
    counted: CountedMessages | None = field(default=None, compare=False)
    # The contents of the system and developer messages, in order, when the edge collected
    # them (the prompt's fingerprint for traces: the messages are not walked again).
    systems: list[Any] | None = field(default=None, compare=False)
    # The client's bytes of its messages array, when the edge found where it sits: a body
    # that only renames the model is these bytes with its other fields serialized around.
    written: memoryview | None = field(default=None, compare=False)


def media_parts(messages: list[Message]) -> int:
    """How many non-text content parts (images, audio, files) the messages carry."""
    count = 0
    for message in messages:
        content = message.get("content")
        if content.__class__ is list:
            count += sum(1 for part in content if part.get("type") != "text")
    return count


def merged_compaction(config: GatewayConfig, route: ModelRoute) -> dict[str, Any]:
    """The global ``compaction:`` section with the model's ``model_info.compaction`` keys."""
    merged = config.compaction.model_dump()
    override: CompactionConfig | None = route.entry.model_info.compaction
    if override is not None:
        merged.update(override.model_dump(include=override.model_fields_set))
    return merged


def settings_for(config: GatewayConfig, route: ModelRoute) -> CompactionSettings:
    """The model's compaction settings (see :func:`merged_compaction`)."""
    merged = merged_compaction(config, route)
    return CompactionSettings(
        trigger_ratio=merged["trigger_ratio"],
        block_ratio=merged["block_ratio"],
        reserved_context=merged["reserved_context_size"],
        max_attempts=merged["max_attempts"],
        summarizer_model=merged["summarizer_model"],
        summary_time_share=merged["summary_time_share"],
    )


@dataclass(slots=True)
class SessionView:
    """What the service knows about the session of one request.

    ``session_id`` is the id the client knows (archive endpoint, Context Recovery);
    ``key`` is where the session lives in the store: scoped by the client key when
    clients authenticate, so two keys using the same session id never share compactions
    or archives.
    """

    session_id: str
    key: str
    original: list[Message]
    owner: str | None
    chain: list[str] | None = None
    applied: CompactionRecord | None = None
    failure: str | None = None  # why the last compaction attempt produced nothing
    unstored: bool = False  # the compaction was kept in memory: the store was down

    def full_chain(self) -> list[str]:
        """The prefix hashes of the history as sent (computed once)."""
        if self.chain is None:
            self.chain = prefix_chain(self.original)
        return self.chain

    def chain_at(self, length: int) -> str:
        return self.full_chain()[length - 1]

    @property
    def prefix_key(self) -> str:
        """The lock key of the whole history as sent: one compaction per prefix at a time."""
        return self.chain_at(len(self.original)) if self.original else "empty"


def store_key(session_id: str, owner: str | None) -> str:
    """Where a session lives in the store (``.`` never occurs in an owner hash)."""
    return session_id if owner is None else f"{owner}.{session_id}"


def head_is(history: list[Message], replacement: list[Message]) -> bool:
    return len(history) >= len(replacement) and history[: len(replacement)] == replacement


def is_new_input(message: Message) -> bool:
    """Real user input, or the model's plain answer to it (no tool activity)."""
    role = message.get("role")
    if role == "user":
        return is_real_user_message(message)
    return role == "assistant" and not message.get("tool_calls") and not message.get(
        "function_call")
