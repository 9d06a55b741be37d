"""The one backoff policy: full jitter, ``Retry-After`` honoured as given.

Used by the recovery ladder (transient upstream failures), the summarizer (transient summary
call failures) and the session stores (waiting for a lock or a busy database file), so every
wait in the gateway follows the same rule. ``Retry-After`` and ``retry-after-ms`` are read
once, by ``gateway.providers.errors.parse_retry_after``, into ``UpstreamFailure.retry_after``.
Pure: the randomness is injected.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

__all__ = ["MAX_EXPONENT", "backoff_delay"]

MAX_EXPONENT = 60  # 2**60 * base is far beyond any cap; avoids float overflow


def backoff_delay(
    retry: int,
    *,
    base: float,
    cap: float,
    retry_after: float | None = None,
    max_retry_after: float = math.inf,
    rng: Callable[[], float] = random.random,
) -> float | None:
    """Seconds to wait before retry number ``retry`` (from 0).

    A readable ``retry_after`` (seconds) is waited exactly; one longer than
    ``max_retry_after`` gives None (do not wait: give up). Otherwise full jitter:
    ``rng() * min(cap, base * 2**retry)``.
    """
    if retry_after is not None and not math.isnan(retry_after):
        delay = max(0.0, float(retry_after))
        return None if delay > max_retry_after else delay
    ceiling = min(cap, base * 2.0 ** min(max(retry, 0), MAX_EXPONENT))
    return ceiling * rng()
