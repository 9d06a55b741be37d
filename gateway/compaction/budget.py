"""When to compact (SPEC §4.1) and how full the context is (SPEC §5 budget levels).

Usage is ``(input tokens + reserved context) / context window``.

Reserve scaling: the default reserve (50,000 tokens of room for the output) would eat a
small window whole, so the reserve used is the configured one capped by its share of the
window, ``50,000 * window / 128,000`` (and by half the window): exactly the configured
reserve from 128k tokens up, in proportion below (a 16k model reserves 6,250, a 2,048-token
local model 800), so usage stays continuous and monotonic in the window size and small
models remain usable (``window.scaled_reserve``).

Budget levels, by usage ratio (``trigger`` and ``block`` from the settings):

=============  =========================================  ==============================
level          ratio                                      meaning
=============  =========================================  ==============================
comfortable    < min(0.60, trigger)                       nothing to do
warning        < min(0.75, trigger)                       getting full
pressure       < trigger                                  compaction is near
critical       trigger <= ratio < 1.0                     compaction due (background from
                                                          the trigger, blocking from the
                                                          block ratio)
blocked        >= 1.0                                     input + reserve exceed the window
=============  =========================================  ==============================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gateway.compaction.window import scaled_reserve

BudgetLevel = Literal["comfortable", "warning", "pressure", "critical", "blocked"]
Decision = Literal["none", "background", "block"]

COMFORTABLE_BELOW = 0.60
WARNING_BELOW = 0.75
DEFAULT_BLOCK_FLOOR = 0.85


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    """Compaction policy for one model (SPEC §4.1 defaults).

    ``block_ratio`` None means ``max(trigger_ratio, 0.85)``. ``summarizer_model`` None means
    the summary is written by the session's own model. ``summary_time_share`` is the share
    of what is left of the request deadline the summary may take (the rest is for the
    safety net and the answer).
    """

    trigger_ratio: float = 0.85
    block_ratio: float | None = None
    reserved_context: int = 50_000
    max_attempts: int = 5
    summarizer_model: str | None = None
    summary_time_share: float = 0.5

    def __post_init__(self) -> None:
        if not 0.5 <= self.trigger_ratio <= 0.99:
            raise ValueError(f"trigger_ratio must be within 0.5-0.99, got {self.trigger_ratio}")
        if self.block_ratio is not None and not self.trigger_ratio <= self.block_ratio <= 1.0:
            raise ValueError(
                f"block_ratio must be within trigger_ratio ({self.trigger_ratio}) and 1.0, "
                f"got {self.block_ratio}"
            )
        if self.reserved_context < 0:
            raise ValueError("reserved_context must be >= 0")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if not 0 < self.summary_time_share <= 0.9:
            raise ValueError("summary_time_share must be within (0, 0.9]")

    @property
    def effective_block_ratio(self) -> float:
        """The block ratio in force: the configured one, else ``max(trigger, 0.85)``."""
        if self.block_ratio is not None:
            return self.block_ratio
        return max(self.trigger_ratio, DEFAULT_BLOCK_FLOOR)


DEFAULT_SETTINGS = CompactionSettings()


def effective_reserve(context_window: int, settings: CompactionSettings = DEFAULT_SETTINGS) -> int:
    """The reserve counted against ``context_window``, scaled with it (see module doc)."""
    return scaled_reserve(context_window, settings.reserved_context)


def usage_ratio(
    input_tokens: int, context_window: int, settings: CompactionSettings = DEFAULT_SETTINGS
) -> float:
    """``(input_tokens + reserve) / context_window``; ``inf`` for a non-positive window."""
    if context_window <= 0:
        return float("inf")
    return (input_tokens + effective_reserve(context_window, settings)) / context_window


def budget_level(ratio: float, settings: CompactionSettings = DEFAULT_SETTINGS) -> BudgetLevel:
    """The budget level of a usage ratio (thresholds in the module doc)."""
    trigger = settings.trigger_ratio
    if ratio >= 1.0:
        return "blocked"
    if ratio >= trigger:
        return "critical"
    if ratio < min(COMFORTABLE_BELOW, trigger):
        return "comfortable"
    if ratio < min(WARNING_BELOW, trigger):
        return "warning"
    return "pressure"


def decide(
    input_tokens: int, context_window: int, settings: CompactionSettings = DEFAULT_SETTINGS
) -> Decision:
    """Whether a request should compact first (SPEC §4.1).

    ``"block"`` at or above the block ratio (the request waits for compaction);
    ``"background"`` at or above the trigger when the trigger is below the block ratio (the
    request goes on uncompacted while a summary is prepared); ``"none"`` otherwise. An
    unknown window (``<= 0``) never compacts proactively: the provider's overflow error will.
    """
    if context_window <= 0:
        return "none"
    ratio = usage_ratio(input_tokens, context_window, settings)
    if ratio >= settings.effective_block_ratio:
        return "block"
    if ratio >= settings.trigger_ratio:
        return "background"
    return "none"
