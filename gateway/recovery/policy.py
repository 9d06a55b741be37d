"""Recovery policy as data, and the values the ladder hands to its driver."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gateway.providers.failure import UpstreamFailure

__all__ = [
    "AttemptPlan",
    "GiveUp",
    "Media",
    "RecoveryPolicy",
    "Step",
    "Structure",
    "TransientKind",
    "transient_kind",
]

Structure = Literal["default", "strict"]
Media = Literal["original", "degraded", "strip"]
Step = Literal["strict", "media=degraded", "media=strip", "compact", "retry", "fallback",
              "drop_param"]
TransientKind = Literal["rate_limit", "timeout", "server_error"]


def transient_kind(failure: UpstreamFailure) -> TransientKind:
    """The kind of a transient failure: a rate limit (429), a timeout (504), or a server
    error (any other)."""
    if failure.status == 429:
        return "rate_limit"
    return "timeout" if failure.status in (408, 504) else "server_error"


@dataclass(frozen=True, slots=True)
class RecoveryPolicy:
    """What the ladder may try for one request, and its bounds.

    ``deadline`` is the total time budget of one request in seconds. A ``Retry-After``
    longer than ``max_retry_after`` (or one that would end past the deadline) makes the
    ladder give up instead of waiting. Backoff without ``Retry-After`` is full jitter:
    ``uniform(0, min(backoff_cap, backoff_base * 2**n))`` for the n-th retry (from 0).
    """

    strict_on_structural: bool = True
    media_on_refusal: bool = True
    strip_media_last: bool = True
    compact_on_overflow: bool = True
    max_overflow_compactions: int = 3
    max_transient_retries: int = 3
    backoff_base: float = 0.5
    backoff_cap: float = 8.0
    deadline: float = 60.0
    max_retry_after: float = 30.0
    # Retries by kind of transient failure ("rate_limit", "timeout", "server_error"),
    # replacing max_transient_retries for that kind (LiteLLM's retry_policy).
    retries_by_kind: tuple[tuple[TransientKind, int], ...] = ()
    # The shortest wait before a retry (LiteLLM's router_settings.retry_after).
    min_retry_delay: float = 0.0

    def __post_init__(self) -> None:
        for name in ("max_overflow_compactions", "max_transient_retries"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative int, got {value!r}")
        for kind, count in self.retries_by_kind:
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"retries for {kind} must be a non-negative int, got "
                                 f"{count!r}")
        for name in ("backoff_base", "backoff_cap", "deadline", "max_retry_after",
                     "min_retry_delay"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class AttemptPlan:
    """How to build and send one attempt.

    ``number`` counts attempts actually sent, from 1. ``structure`` picks ``project()`` or
    ``project_strict()``; ``media`` keeps, degrades or strips images; ``compactions`` is
    how many overflow compactions the history has been through for this request (they
    carry over to every later attempt); ``delay`` is the wait before sending; ``step`` is
    what changed from the previous attempt (None for the first); ``dropped`` are the
    request's top-level fields the upstream refused as unsupported (LiteLLM's
    ``drop_params``: they carry over to every later attempt).
    """

    number: int = 1
    structure: Structure = "default"
    media: Media = "original"
    compactions: int = 0
    delay: float = 0.0
    step: Step | None = None
    model: str | None = None  # the fallback model group the attempt goes to (None: the
    # requested one)
    dropped: tuple[str, ...] = ()  # top-level request fields left out (drop_params)


@dataclass(frozen=True, slots=True)
class GiveUp:
    """The ladder has nothing left to try: the driver returns ``failure`` to the client.

    ``reason`` starts with a stable token (``fatal``, ``deadline``, or the verdict whose
    steps ran out: ``structural``, ``media``, ``overflow``, ``request_too_large``,
    ``transient``), then a colon and a short human explanation.
    """

    reason: str
    failure: UpstreamFailure
