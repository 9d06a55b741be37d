"""What the driver hands the compaction service: the chat request it reads and the caller
that sends summary requests (the other way, :mod:`gateway.compaction.outcome`)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from gateway.compaction.session_view import KnownHistory
from gateway.compaction.summarizer import SummaryReply
from gateway.projection.anomalies import Message

if TYPE_CHECKING:
    from gateway.routing import ModelRoute


class Request(Protocol):
    """The parts of a chat request the service reads (``gateway.flow.ChatRequest``)."""

    @property
    def body(self) -> dict[str, Any]: ...
    @property
    def raw(self) -> bytes: ...
    @property
    def messages(self) -> list[Message]: ...
    @property
    def route(self) -> ModelRoute: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def owner(self) -> str | None: ...
    @property
    def known(self) -> KnownHistory | None: ...

    @property
    def wire(self) -> object | None:
        """The codec of a native non-chat wire (None for chat): its upstream body is built
        from the client's wire body, which carries no recall tool."""

    @property
    def tool_outputs(self) -> str:
        """``condense`` when the request's tool results are sent condensed (``keep``,
        ``report``: as written)."""

    @property
    def policy(self) -> str:
        """The repair policy of the request's owner (``report``: sent as written)."""


class SummaryCaller(Protocol):
    """Sends one summary request to ``route``; raises ``SummaryCallFailed`` on refusal."""

    def __call__(self, route: ModelRoute, body: dict[str, object]) -> Awaitable[SummaryReply]:
        ...
