"""A circuit breaker for the summarizer, across requests.

After ``threshold`` consecutive failed summary calls for a session or for a route (an
error, an empty or cut-off summary), the summarizer is not called for that session / route
for ``cooldown`` seconds: requests go straight to the safety net (window trimming) instead
of paying seconds for a summary that will not come. After the cooldown one call is let
through (half-open); a success closes the breaker, a failure opens it again.

In memory, per process; the clock is injected so tests need no sleeping.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

DEFAULT_THRESHOLD = 3
DEFAULT_COOLDOWN = 120.0
_MAX_KEYS = 10_000


@dataclass(slots=True)
class _State:
    failures: int = 0
    open_until: float = 0.0


class SummaryBreaker:
    """Consecutive summary failures per key (``session:<key>``, ``route:<name>``)."""

    def __init__(self, threshold: int = DEFAULT_THRESHOLD, cooldown: float = DEFAULT_COOLDOWN,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = max(1, threshold)
        self.cooldown = cooldown
        self._clock = clock
        self._states: OrderedDict[str, _State] = OrderedDict()

    def allows(self, keys: Iterable[str]) -> bool:
        """False while any of ``keys`` is open (in its cooldown)."""
        now = self._clock()
        return all(self._states.get(k, _State()).open_until <= now for k in keys)

    def failed(self, keys: Iterable[str]) -> None:
        """Count one failed summary call for each key; open those at the threshold."""
        now = self._clock()
        for key in keys:
            state = self._states.get(key)
            if state is None:
                state = self._states[key] = _State()
                if len(self._states) > _MAX_KEYS:
                    self._states.popitem(last=False)
            state.failures += 1
            if state.failures >= self.threshold:
                state.open_until = now + self.cooldown
                state.failures = self.threshold - 1  # half-open after the cooldown

    def succeeded(self, keys: Iterable[str]) -> None:
        """A summary came back: close the breaker for each key."""
        for key in keys:
            self._states.pop(key, None)


def breaker_keys(session_key: str, route: str) -> tuple[str, str]:
    """The keys one summary call counts against."""
    return (f"session:{session_key}", f"route:{route}")
