"""What compaction hands the recall tool (``gateway.recall``): the recall settings of a
model (the Context Recovery note names the tool) and the archive lines one request may
read. The recall package builds on these; compaction never imports it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.compaction.session_view import merged_compaction
from gateway.config import GatewayConfig
from gateway.sessions.archive import Archive

if TYPE_CHECKING:
    from gateway.routing import ModelRoute


@dataclass(frozen=True, slots=True)
class RecallSettings:
    """``compaction.recall*`` of one model (``model_info.compaction`` overrides applied)."""

    enabled: bool = True
    rounds: int = 3
    tool: str = "context_recall"
    max_chars: int = 12_000


def recall_settings(config: GatewayConfig, route: ModelRoute) -> RecallSettings:
    """The global ``compaction:`` recall keys with the model's ``model_info.compaction``."""
    merged = merged_compaction(config, route)
    return RecallSettings(
        enabled=bool(merged["recall"]) and bool(merged["enabled"])
        and route.capabilities.supports_tools,
        rounds=merged["recall_rounds"], tool=merged["recall_tool"],
        max_chars=merged["recall_max_chars"],
    )


@dataclass(frozen=True, slots=True)
class RecallScope:
    """The archive lines a request may recall: the line ranges of the compactions whose
    prefixes the request carries (its own messages), in its owner's namespace."""

    session_id: str
    key: str
    ranges: tuple[tuple[int, int], ...]  # sorted, inclusive
    archive: Archive

    @property
    def last_line(self) -> int:
        """The last line it may read."""
        return self.ranges[-1][1] if self.ranges else 0
