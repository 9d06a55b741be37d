"""The context window each route is planned with, and the budgets that follow from it.

The provider's own statement wins: a window named by the route's overflow refusal
(``window.overflow_numbers``) replaces the configured one (``model_info.max_input_tokens``)
or the default guess when it is smaller (a configured window the provider contradicts is
reported once, as a warning). Learned windows live in the pipeline's ``WindowBook`` (so
``/v1/models`` reports them) and in the session store (``window_share``), so another
replica or a restarted gateway knows them at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.compaction.budget import CompactionSettings
from gateway.compaction.summary_request import DEFAULT_INSTRUCTIONS, FINAL_ASK
from gateway.compaction.tokens import count_text_tokens, count_tools_tokens
from gateway.compaction.window import (
    MIN_REFUSED_BOUND,
    Budgets,
    WindowBook,
    overflow_numbers,
    scaled_budgets,
)
from gateway.compaction.window_share import SharedWindows
from gateway.providers.failure import UpstreamFailure

if TYPE_CHECKING:
    from gateway.routing import ModelRoute

log = logging.getLogger("gateway.compaction")

_BODY_CHARS = 20_000
# A refusal counting the refused prompt 1.5 to 10 times larger than the gateway does
# counts in other units (its tokenizer, images priced in tokens): its window is scaled to
# the gateway's count. Smaller gaps are ordinary tokenizer noise, left to the budgets'
# margins; larger ones are no count of the same request (a proxy's total, a stale number).
_OTHER_UNITS = (1.5, 10.0)


@dataclass(slots=True)
class RouteWindows:
    """Learned windows (``book``) and, with Redis, their shared copy (``shared``)."""

    book: WindowBook
    shared: SharedWindows | None = None
    _warned: set[str] = field(default_factory=set)  # routes whose config was contradicted

    @staticmethod
    def stated(route: ModelRoute) -> bool:
        """True when the config states the route's window."""
        return route.entry.model_info.max_input_tokens is not None

    def window_now(self, route: ModelRoute) -> int | None:
        """The window to plan with when it is known without asking the store, else None."""
        if (self.shared is not None and self.book.learned(route.name) is None
                and self.shared.due(route.name)):
            return None
        return self.book.effective(route.name, route.capabilities.context_window,
                                   stated=self.stated(route))

    async def window(self, route: ModelRoute) -> int:
        """The window to plan with: the one learned from an overflow refusal (here or, through
        the store, by another replica or before a restart) when smaller, else the configured
        one (or the default guess)."""
        if self.shared is not None and self.book.learned(route.name) is None:
            shared = await self.shared.lookup(route.name)
            if shared is not None and shared < route.capabilities.context_window:
                self._learned(route, shared, "the session store")
        return self.book.effective(route.name, route.capabilities.context_window,
                                   stated=self.stated(route))

    async def learn(self, route: ModelRoute, failure: UpstreamFailure | None,
                    refused_tokens: int | None = None) -> None:
        """Remember the window an overflow refusal names when it is below the one planned
        with (the configured one included: the provider's statement wins).

        A refusal that states the refused prompt's size in other units than the gateway's
        (far more tokens than it counted) has its window scaled to the gateway's count.

        A refusal that names no window ("Input is too long for requested model", "Please
        reduce the length of the messages") still proves the window is below the size of
        the request it refused: ``refused_tokens`` (the prompt plus the output it asked
        for, as the gateway counts them) is then learned as an upper bound, so the next
        plan (the summary request, the trimmed history) is sized below it instead of
        repeating a request the provider has already refused. A refused request smaller
        than ``MIN_REFUSED_BOUND`` bounds nothing (a glitch must not shrink the route's
        plan for good)."""
        if failure is None:
            return
        body = failure.body[:_BODY_CHARS].decode("utf-8", "replace")
        numbers = overflow_numbers(f"{failure.message} {body}")
        found, source = numbers.window, "its overflow refusal"
        low, high = _OTHER_UNITS
        if (found is not None and numbers.prompt is not None and refused_tokens
                and refused_tokens * low < numbers.prompt <= refused_tokens * high):
            # "window W, you sent P" where the gateway counted R for P: W in its own count
            found = found * refused_tokens // numbers.prompt
            source = (f"its overflow refusal ({numbers.window} of its tokens, scaled by the "
                      f"{refused_tokens} the gateway counted for the {numbers.prompt} it "
                      "refused)")
        if (numbers.window is not None and numbers.prompt is not None
                and numbers.prompt <= numbers.window and refused_tokens is not None
                and MIN_REFUSED_BOUND <= refused_tokens <= numbers.window):
            # By its own figures the window it states held the prompt it refused, and by the
            # gateway's count the output asked fitted too (a proxy's or a misconfigured
            # server's wording): the refusal itself is the evidence.
            found, source = refused_tokens, (f"the size of a request it refused as too long "
                                             f"(the {numbers.window} tokens it states held it)")
        if found is None and refused_tokens is not None and refused_tokens >= MIN_REFUSED_BOUND:
            found, source = refused_tokens, "the size of a request it refused as too long"
        if found is None or found >= self.book.effective(
                route.name, route.capabilities.context_window, stated=True):
            return
        if self._learned(route, found, source) and self.shared is not None:
            await self.shared.put(route.name, found)

    def _learned(self, route: ModelRoute, window: int, source: str) -> bool:
        if not self.book.learn(route.name, window):
            return False
        configured = route.entry.model_info.max_input_tokens
        if configured is not None and window < configured and route.name not in self._warned:
            self._warned.add(route.name)
            log.warning("the provider of %s states a context window of %d tokens (%s), below "
                        "its configured max_input_tokens of %d: planning with %d", route.name,
                        window, source, configured, window)
        else:
            log.info("learned the context window of %s from %s: %d tokens", route.name,
                     source, window)
        return True

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
