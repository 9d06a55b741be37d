"""The recovery ladder: a pure state machine from (attempt, failure, verdict) to the next plan.

No I/O, no sleeping, no clock: the driver passes ``elapsed`` (seconds since the request
began) and the ladder's randomness comes from an injected ``random.Random``. One Ladder
serves one client request. The driver:

1. sends ``first()``;
2. on a refusal, calls ``after_failure(plan, failure, classify(failure), elapsed)`` and
   either waits ``plan.delay`` and sends the new plan, or returns ``GiveUp.failure`` to
   the client (in its wire format, with what was tried);
3. when a new plan would produce a request byte-identical to the one just refused (strict
   projection or media degradation changed nothing), calls ``after_unchanged`` instead of
   sending, which skips to the next applicable step or gives up.

Rules: structural -> strict once; media -> degraded, then strip (strip at once when the
refusal says the model takes no images at all); request_too_large ->
degraded, then strip, then compact; overflow -> compact, up to ``max_overflow_compactions``
for the request; transient -> the same plan again after ``Retry-After`` or full-jitter
backoff (``gateway.backoff``), bounded by count and deadline; fatal -> give up. Structure,
media and compactions carry over to every later plan. Where the driver allows it
(LiteLLM's ``drop_params``), ``drop_param`` resends a plan without the request field an
OpenAI-style 400 names as unsupported (``unsupported_parameter`` / ``unsupported_value``),
once per field; the dropped fields carry over too.

Fallbacks (``FallbackChains``): where the ladder would give up, a failure another model
group may serve moves to the next untried group of its chain instead (step ``fallback``,
``plan.model`` names the group), with the same repaired request and fresh retries. A
context overflow tries a context-window fallback with a larger window before compacting.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import replace

from gateway.backoff import backoff_delay
from gateway.providers.failure import UpstreamFailure
from gateway.recovery.classifier import Verdict, images_unsupported
from gateway.recovery.drop import unsupported_param
from gateway.recovery.fallback import FallbackChains, FallbackKind, failure_kind
from gateway.recovery.policy import AttemptPlan, GiveUp, RecoveryPolicy, Step, transient_kind

__all__ = ["AttemptPlan", "FallbackChains", "GiveUp", "Ladder", "RecoveryPolicy"]

# Steps each verdict may take, in order. Transient and fatal are handled apart.
_STEPS_FOR: dict[Verdict, tuple[Step, ...]] = {
    Verdict.STRUCTURAL: ("strict",),
    Verdict.MEDIA: ("media=degraded", "media=strip"),
    Verdict.REQUEST_TOO_LARGE: ("media=degraded", "media=strip", "compact"),
    Verdict.OVERFLOW: ("compact",),
}

# Jitter needs no per-request generator (seeding one from the OS costs ~10 µs a request).
_JITTER = random.Random()


class Ladder:
    """Decides what to try after each refusal of one request (see the module docstring)."""

    def __init__(
        self,
        policy: RecoveryPolicy | None = None,
        *,
        rng: random.Random | None = None,
        fallbacks: FallbackChains | None = None,
        group: str = "",
    ) -> None:
        self.policy = policy if policy is not None else RecoveryPolicy()
        self._rng = rng if rng is not None else _JITTER
        self._fallbacks = fallbacks
        self._group = group  # the requested model group (its chains are the ones followed)
        self._tried: list[str] = [group]
        self._issued: list[AttemptPlan] = []
        self._unsent: list[AttemptPlan] = []
        self._exhausted: set[Step] = set()
        self._retries = 0

    @property
    def steps_taken(self) -> tuple[Step, ...]:
        """The steps of the plans handed out and sent (or being sent), in order."""
        unsent = list(self._unsent)
        steps: list[Step] = []
        for plan in self._issued:
            if plan in unsent:
                unsent.remove(plan)
            elif plan.step is not None:
                steps.append(plan.step)
        return tuple(steps)

    @property
    def retries(self) -> int:
        """Transient retries handed out so far."""
        return self._retries

    def first(self) -> AttemptPlan:
        """The plan of the first attempt: default structure, original media, no delay."""
        if self._issued:
            raise RuntimeError("first() was already called for this request")
        plan = AttemptPlan()
        self._issued.append(plan)
        return plan

    def after_failure(
        self, plan: AttemptPlan, failure: UpstreamFailure, verdict: Verdict, elapsed: float
    ) -> AttemptPlan | GiveUp:
        """The next plan after ``plan`` was sent and refused, or GiveUp."""
        verdict = Verdict(verdict)
        return self._issue(self._next(plan, failure, verdict, elapsed, plan.number + 1))

    def drop_param(self, plan: AttemptPlan, failure: UpstreamFailure,
                   fields: Collection[str]) -> AttemptPlan | None:
        """``plan`` again without the request field ``failure`` refuses as unsupported
        (step ``drop_param``; LiteLLM's ``drop_params`` would not have sent it), or None
        when the failure names none of ``fields`` that may go, or it was dropped already."""
        param = unsupported_param(failure, fields)
        if param is None or param in plan.dropped:
            return None
        dropping = replace(plan, number=plan.number + 1, delay=0.0, step="drop_param",
                           dropped=(*plan.dropped, param))
        self._issued.append(dropping)
        return dropping

    def after_unchanged(
        self, plan: AttemptPlan, failure: UpstreamFailure, verdict: Verdict, elapsed: float
    ) -> AttemptPlan | GiveUp:
        """``plan`` would resend the refused request unchanged: skip to the next step.

        ``failure`` and ``verdict`` are those of the refusal that led to ``plan``. The
        skipped step is not tried again for this request and is not counted as sent.
        """
        verdict = Verdict(verdict)
        if plan.step is None or plan.step == "retry":
            raise ValueError(f"after_unchanged() needs a recovery step plan, got {plan.step!r}")
        self._unsent.append(plan)
        self._exhausted.add(plan.step)
        base = plan
        if plan.step == "compact":  # nothing was compacted: do not count it
            base = replace(plan, compactions=max(0, plan.compactions - 1))
        return self._issue(self._next(base, failure, verdict, elapsed, plan.number))

    # --- decisions ---------------------------------------------------------------------

    def _issue(self, result: AttemptPlan | GiveUp) -> AttemptPlan | GiveUp:
        if isinstance(result, AttemptPlan):
            self._issued.append(result)
        return result

    def _next(
        self,
        base: AttemptPlan,
        failure: UpstreamFailure,
        verdict: Verdict,
        elapsed: float,
        number: int,
    ) -> AttemptPlan | GiveUp:
        elapsed = max(0.0, float(elapsed))
        if elapsed >= self.policy.deadline:
            return GiveUp(
                f"deadline: {elapsed:.1f}s elapsed of {self.policy.deadline:g}s", failure
            )
        if verdict is Verdict.FATAL:
            return self._or_fallback(
                GiveUp(f"fatal: HTTP {failure.status} is not recoverable", failure),
                base, verdict, number)
        if verdict is Verdict.TRANSIENT:
            retry = self._retry(base, failure, elapsed, number)
            if isinstance(retry, GiveUp) and not retry.reason.startswith("deadline"):
                return self._or_fallback(retry, base, verdict, number)
            return retry
        if verdict is Verdict.OVERFLOW:
            # A larger model loses nothing; a summary does: fall back first.
            moved = self._fallback(base, "context_window", number)
            if moved is not None:
                return moved
        steps = _STEPS_FOR[verdict]
        if verdict is Verdict.MEDIA and images_unsupported(failure):
            steps = ("media=strip",)  # a model without images: degrading them cannot help
        why: list[str] = []
        for step in steps:
            blocked = self._blocked(base, step)
            if blocked is None:
                return self._apply(base, step, number)
            why.append(f"{step} {blocked}")
        return GiveUp(f"{verdict.value}: " + "; ".join(why), failure)

    def _or_fallback(
        self, give_up: GiveUp, base: AttemptPlan, verdict: Verdict, number: int
    ) -> AttemptPlan | GiveUp:
        kind = failure_kind(give_up.failure, verdict)
        moved = self._fallback(base, kind, number) if kind is not None else None
        return moved if moved is not None else give_up

    def _fallback(self, base: AttemptPlan, kind: FallbackKind, number: int
                  ) -> AttemptPlan | None:
        """The next untried group of the chain, as a plan (None when there is none)."""
        chains = self._fallbacks
        if not chains or len(self._tried) > chains.max_fallbacks:
            return None
        for target in chains.chain(self._group, kind):
            if target not in self._tried:
                self._tried.append(target)
                self._retries = 0  # a new group gets its own retries
                return replace(base, number=number, delay=0.0, step="fallback", model=target)
        return None

    def _blocked(self, base: AttemptPlan, step: Step) -> str | None:
        """Why ``step`` cannot follow ``base`` (None when it can)."""
        policy = self.policy
        if step in self._exhausted:
            return "changed nothing"
        if step == "strict":
            if not policy.strict_on_structural:
                return "disabled by policy"
            return "already tried" if base.structure == "strict" else None
        if step == "media=degraded":
            if not policy.media_on_refusal:
                return "disabled by policy"
            return None if base.media == "original" else "already tried"
        if step == "media=strip":
            if not (policy.media_on_refusal and policy.strip_media_last):
                return "disabled by policy"
            return "already tried" if base.media == "strip" else None
        if step == "compact":
            if not policy.compact_on_overflow:
                return "disabled by policy"
            if base.compactions >= policy.max_overflow_compactions:
                return f"limit of {policy.max_overflow_compactions} reached"
            return None
        return "not applicable"

    def _apply(self, base: AttemptPlan, step: Step, number: int) -> AttemptPlan:
        plan = replace(base, number=number, delay=0.0, step=step)
        if step == "strict":
            return replace(plan, structure="strict")
        if step == "media=degraded":
            return replace(plan, media="degraded")
        if step == "media=strip":
            return replace(plan, media="strip")
        return replace(plan, compactions=base.compactions + 1)

    def _retry(
        self, base: AttemptPlan, failure: UpstreamFailure, elapsed: float, number: int
    ) -> AttemptPlan | GiveUp:
        policy = self.policy
        if failure.should_retry is False:
            return GiveUp("transient: the provider said not to retry", failure)
        limit = dict(policy.retries_by_kind).get(transient_kind(failure),
                                                 policy.max_transient_retries)
        if self._retries >= limit:
            return GiveUp(f"transient: {limit} retries used", failure)
        delay = backoff_delay(self._retries, base=policy.backoff_base, cap=policy.backoff_cap,
                              retry_after=failure.retry_after,
                              max_retry_after=policy.max_retry_after, rng=self._rng.random)
        if delay is None:
            return GiveUp(
                f"transient: Retry-After {failure.retry_after:g}s exceeds "
                f"{policy.max_retry_after:g}s",
                failure,
            )
        delay = max(delay, policy.min_retry_delay)
        if elapsed + delay > policy.deadline:
            return GiveUp(
                f"deadline: waiting {delay:.2f}s after {elapsed:.1f}s would pass "
                f"{policy.deadline:g}s",
                failure,
            )
        self._retries += 1
        return replace(base, number=number, delay=delay, step="retry")
