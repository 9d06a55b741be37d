"""The context window each route is planned with, and the budgets that follow from it.

The configured window wins (``model_info.max_input_tokens``); otherwise the window named by
the route's own overflow refusal is learned (``window.overflow_numbers``), kept in the
pipeline's ``WindowBook`` (so ``/v1/models`` reports it) and shared with other replicas
through Redis when configured.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.compaction.budget import CompactionSettings
from gateway.compaction.summary_request import DEFAULT_INSTRUCTIONS, FINAL_ASK
from gateway.compaction.tokens import count_text_tokens, count_tools_tokens
from gateway.compaction.window import Budgets, WindowBook, overflow_numbers, scaled_budgets
from gateway.compaction.window_share import SharedWindows
from gateway.providers.failure import UpstreamFailure

if TYPE_CHECKING:
    from gateway.routing import ModelRoute

log = logging.getLogger("gateway.compaction")

_BODY_CHARS = 20_000


@dataclass(slots=True)
class RouteWindows:
    """Learned windows (``book``) and, with Redis, their shared copy (``shared``)."""

    book: WindowBook
    shared: SharedWindows | None = None

    @staticmethod
    def stated(route: ModelRoute) -> bool:
        """True when the config states the route's window."""
        return route.entry.model_info.max_input_tokens is not None

    def window_now(self, route: ModelRoute) -> int | None:
        """The window to plan with when it is known without asking Redis, else None."""
        stated = self.stated(route)
        if not stated and self.shared is not None and self.book.learned(route.name) is None:
            return None
        return self.book.effective(route.name, route.capabilities.context_window,
                                   stated=stated)

    async def window(self, route: ModelRoute) -> int:
        """The window to plan with: the configured one, else the one learned from an
        overflow refusal (here or, through Redis, by another replica)."""
        stated = self.stated(route)
        if not stated and self.shared is not None and self.book.learned(route.name) is None:
            shared = await self.shared.lookup(route.name)
            if shared is not None:
                self.book.learn(route.name, shared)
        return self.book.effective(route.name, route.capabilities.context_window,
                                   stated=stated)

    async def learn(self, route: ModelRoute, failure: UpstreamFailure | None) -> None:
        """Remember the window an overflow refusal names (when the config names none)."""
        if failure is None or self.stated(route):
            return
        body = failure.body[:_BODY_CHARS].decode("utf-8", "replace")
        found = overflow_numbers(f"{failure.message} {body}").window
        if found is None or found >= route.capabilities.context_window:
            return
        if self.book.learn(route.name, found):
            log.info("learned the context window of %s from its overflow refusal: %d tokens",
                     route.name, found)
            if self.shared is not None:
                await self.shared.put(route.name, found)

    async def budgets(self, route: ModelRoute, body: Mapping[str, Any],
                      settings: CompactionSettings) -> Budgets:
        """Every compaction budget for the route's window (SPEC constants as caps)."""
        model = route.upstream_model
        instructions = (count_text_tokens(DEFAULT_INSTRUCTIONS, model)
                        + count_text_tokens(FINAL_ASK, model) + 32)
        return scaled_budgets(
            await self.window(route), reserved_context=settings.reserved_context,
            block_ratio=settings.effective_block_ratio, instructions_tokens=instructions,
            fixed_tokens=count_tools_tokens(body, model))

    async def close(self) -> None:
        """Close the shared store."""
        if self.shared is not None:
            await self.shared.close()
