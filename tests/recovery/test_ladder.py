"""The recovery ladder as a pure state machine: each verdict path, bounds, skips, determinism."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.providers.failure import UpstreamFailure
from gateway.recovery.classifier import Verdict
from gateway.recovery.ladder import AttemptPlan, GiveUp, Ladder
from gateway.recovery.policy import RecoveryPolicy

S, M, OV, R, T, F = (
    Verdict.STRUCTURAL,
    Verdict.MEDIA,
    Verdict.OVERFLOW,
    Verdict.REQUEST_TOO_LARGE,
    Verdict.TRANSIENT,
    Verdict.FATAL,
)


def fail(status: int = 400, **kw: object) -> UpstreamFailure:
    return UpstreamFailure(status=status, provider="p", message="refused", **kw)  # type: ignore[arg-type]


def plan_of(result: AttemptPlan | GiveUp) -> AttemptPlan:
    assert isinstance(result, AttemptPlan), result
    return result


def give_up(result: AttemptPlan | GiveUp) -> GiveUp:
    assert isinstance(result, GiveUp), result
    return result


def climb(ladder: Ladder, verdicts: list[Verdict], failure: UpstreamFailure | None = None
          ) -> list[AttemptPlan | GiveUp]:
    """Feed one refusal per verdict, starting from first(); stop at GiveUp."""
    failure = failure or fail()
    plan = ladder.first()
    results: list[AttemptPlan | GiveUp] = []
    for verdict in verdicts:
        result = ladder.after_failure(plan, failure, verdict, 0.0)
        results.append(result)
        if isinstance(result, GiveUp):
            break
        plan = result
    return results


def test_first_plan() -> None:
    ladder = Ladder(RecoveryPolicy())
    assert ladder.first() == AttemptPlan(
        number=1, structure="default", media="original", compactions=0, delay=0.0, step=None
    )
    assert ladder.steps_taken == ()
    assert ladder.steps_taken == ()
    with pytest.raises(RuntimeError):
        ladder.first()


# --- each verdict path -----------------------------------------------------------------


def test_structural_goes_strict_once() -> None:
    ladder = Ladder(RecoveryPolicy())
    first, second = climb(ladder, [S, S])
    assert plan_of(first) == AttemptPlan(number=2, structure="strict", step="strict")
    assert give_up(second).reason.startswith("structural: strict already tried")
    assert ladder.steps_taken == ("strict",)


def test_structural_without_strict_policy_gives_up() -> None:
    failure = fail()
    [result] = climb(Ladder(RecoveryPolicy(strict_on_structural=False)), [S], failure)
    assert give_up(result).failure is failure
    assert "disabled by policy" in give_up(result).reason


def test_media_degrades_then_strips_then_gives_up() -> None:
    results = climb(Ladder(RecoveryPolicy()), [M, M, M])
    assert [plan_of(r).media for r in results[:2]] == ["degraded", "strip"]
    assert [plan_of(r).step for r in results[:2]] == ["media=degraded", "media=strip"]
    assert give_up(results[2]).reason.startswith("media:")


def test_media_policy_switches() -> None:
    [off] = climb(Ladder(RecoveryPolicy(media_on_refusal=False)), [M])
    assert give_up(off).reason.startswith("media:")
    no_strip = climb(Ladder(RecoveryPolicy(strip_media_last=False)), [M, M])
    assert plan_of(no_strip[0]).media == "degraded"
    assert "media=strip disabled by policy" in give_up(no_strip[1]).reason


def test_request_too_large_degrades_strips_then_compacts() -> None:
    results = climb(Ladder(RecoveryPolicy()), [R, R, R, R, R, R])
    steps = [plan_of(r).step for r in results[:5]]
    assert steps == ["media=degraded", "media=strip", "compact", "compact", "compact"]
    assert [plan_of(r).compactions for r in results[2:5]] == [1, 2, 3]
    assert give_up(results[5]).reason.startswith("request_too_large:")


def test_overflow_compacts_up_to_the_limit() -> None:
    results = climb(Ladder(RecoveryPolicy()), [OV, OV, OV, OV])
    assert [plan_of(r).compactions for r in results[:3]] == [1, 2, 3]
    assert all(plan_of(r).step == "compact" for r in results[:3])
    assert give_up(results[3]).reason == "overflow: compact limit of 3 reached"
    one = climb(Ladder(RecoveryPolicy(max_overflow_compactions=1)), [OV, OV])
    assert isinstance(one[0], AttemptPlan) and isinstance(one[1], GiveUp)
    [off] = climb(Ladder(RecoveryPolicy(compact_on_overflow=False)), [OV])
    assert "compact disabled by policy" in give_up(off).reason


def test_state_carries_over_between_steps() -> None:
    results = climb(Ladder(RecoveryPolicy()), [S, OV, M, T])
    strict, compact, degraded, retry = (plan_of(r) for r in results)
    assert (compact.structure, compact.compactions) == ("strict", 1)
    assert (degraded.structure, degraded.media, degraded.compactions) == ("strict", "degraded", 1)
    assert (retry.structure, retry.media, retry.compactions, retry.step) == (
        "strict", "degraded", 1, "retry"
    )
    assert [p.number for p in (strict, compact, degraded, retry)] == [2, 3, 4, 5]


def test_fatal_gives_up_with_the_last_failure() -> None:
    failure = fail(401)
    [result] = climb(Ladder(RecoveryPolicy()), [F], failure)
    assert give_up(result) == GiveUp("fatal: HTTP 401 is not recoverable", failure)


# --- transient ---------------------------------------------------------------------------


def test_transient_honours_retry_after() -> None:
    ladder = Ladder(RecoveryPolicy())
    [retry] = climb(ladder, [T], fail(429, retry_after=2.5))
    assert plan_of(retry) == AttemptPlan(number=2, delay=2.5, step="retry")
    [zero] = climb(Ladder(RecoveryPolicy()), [T], fail(429, retry_after=0.0))
    assert plan_of(zero).delay == 0.0


def test_transient_retries_are_bounded() -> None:
    ladder = Ladder(RecoveryPolicy(max_transient_retries=3))
    results = climb(ladder, [T, T, T, T], fail(503, retry_after=1.0))
    assert [plan_of(r).step for r in results[:3]] == ["retry"] * 3
    assert give_up(results[3]).reason == "transient: 3 retries used"
    assert ladder.retries == 3
    [none] = climb(Ladder(RecoveryPolicy(max_transient_retries=0)), [T])
    assert give_up(none).reason.startswith("transient:")


def test_a_long_retry_after_gives_up_instead_of_waiting() -> None:
    [result] = climb(Ladder(RecoveryPolicy(max_retry_after=30.0)), [T],
                     fail(429, retry_after=86400.0))
    assert give_up(result).reason == "transient: Retry-After 86400s exceeds 30s"


def test_retry_after_beyond_the_deadline_gives_up() -> None:
    ladder = Ladder(RecoveryPolicy(deadline=60.0))
    plan = ladder.first()
    result = ladder.after_failure(plan, fail(429, retry_after=20.0), T, elapsed=45.0)
    assert give_up(result).reason.startswith("deadline:")
    ok = Ladder(RecoveryPolicy(deadline=60.0))
    assert plan_of(ok.after_failure(ok.first(), fail(429, retry_after=20.0), T, 39.0)).delay == 20


def test_deadline_stops_every_step() -> None:
    for verdict in (S, M, OV, R, T):
        ladder = Ladder(RecoveryPolicy(deadline=10.0))
        result = ladder.after_failure(ladder.first(), fail(), verdict, elapsed=10.0)
        assert give_up(result).reason.startswith("deadline:"), verdict


def test_should_retry_false_never_retries() -> None:
    [result] = climb(Ladder(RecoveryPolicy()), [T], fail(529, should_retry=False))
    assert give_up(result).reason == "transient: the provider said not to retry"


def test_full_jitter_is_bounded_and_deterministic_with_a_seed() -> None:
    policy = RecoveryPolicy(max_transient_retries=6, backoff_base=0.5, backoff_cap=3.0,
                            deadline=1000.0)
    delays = [plan_of(r).delay for r in climb(Ladder(policy, rng=random.Random(7)), [T] * 6)]
    again = [plan_of(r).delay for r in climb(Ladder(policy, rng=random.Random(7)), [T] * 6)]
    other = [plan_of(r).delay for r in climb(Ladder(policy, rng=random.Random(8)), [T] * 6)]
    assert delays == again
    assert delays != other
    reference = random.Random(7)
    expected = [reference.uniform(0.0, min(3.0, 0.5 * 2**n)) for n in range(6)]
    assert delays == expected
    ceilings = [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert all(0.0 <= d <= c for d, c in zip(delays, ceilings, strict=True))


# --- unchanged requests ------------------------------------------------------------------


def test_unchanged_strict_gives_up_and_is_not_reported_as_taken() -> None:
    ladder = Ladder(RecoveryPolicy())
    failure = fail()
    strict = plan_of(ladder.after_failure(ladder.first(), failure, S, 0.0))
    result = ladder.after_unchanged(strict, failure, S, 0.0)
    assert give_up(result).reason == "structural: strict changed nothing"
    assert ladder.steps_taken == ()


def test_unchanged_media_skips_to_the_next_step_with_the_same_number() -> None:
    ladder = Ladder(RecoveryPolicy())
    failure = fail(413)
    degraded = plan_of(ladder.after_failure(ladder.first(), failure, R, 0.0))
    strip = plan_of(ladder.after_unchanged(degraded, failure, R, 0.0))
    assert (strip.number, strip.step, strip.media) == (2, "media=strip", "strip")
    compact = plan_of(ladder.after_unchanged(strip, failure, R, 0.0))
    assert (compact.number, compact.step, compact.compactions) == (2, "compact", 1)
    assert ladder.steps_taken == ("compact",)


def test_unchanged_compaction_is_not_counted_and_not_repeated() -> None:
    ladder = Ladder(RecoveryPolicy())
    failure = fail()
    compact = plan_of(ladder.after_failure(ladder.first(), failure, OV, 0.0))
    result = ladder.after_unchanged(compact, failure, OV, 0.0)
    assert give_up(result).reason == "overflow: compact changed nothing"


def test_unchanged_needs_a_recovery_step() -> None:
    ladder = Ladder(RecoveryPolicy())
    first = ladder.first()
    with pytest.raises(ValueError):
        ladder.after_unchanged(first, fail(), S, 0.0)
    retry = plan_of(ladder.after_failure(first, fail(503), T, 0.0))
    with pytest.raises(ValueError):
        ladder.after_unchanged(retry, fail(503), T, 0.0)


# --- steps taken ------------------------------------------------------------------


def test_steps_taken_in_order() -> None:
    ladder = Ladder(RecoveryPolicy(), rng=random.Random(1))
    climb(ladder, [S, M, T])
    assert ladder.steps_taken == ("strict", "media=degraded", "retry")


def test_plans_are_frozen_values() -> None:
    plan = Ladder(RecoveryPolicy()).first()
    with pytest.raises(AttributeError):
        plan.number = 5  # type: ignore[misc]
    assert replace(plan, number=2) != plan


@pytest.mark.parametrize(
    "bad",
    [
        {"max_transient_retries": -1},
        {"max_overflow_compactions": 1.5},
        {"deadline": float("nan")},
        {"backoff_cap": -1.0},
        {"max_retry_after": float("inf")},
    ],
)
def test_policy_rejects_nonsense(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        RecoveryPolicy(**bad)  # type: ignore[arg-type]


# --- properties --------------------------------------------------------------------------

verdicts = st.sampled_from(list(Verdict))


@settings(max_examples=150, deadline=None)
@given(
    sequence=st.lists(verdicts, min_size=1, max_size=30),
    hints=st.lists(st.none() | st.floats(min_value=0, max_value=40), min_size=30, max_size=30),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_the_ladder_always_ends_within_its_bounds(
    sequence: list[Verdict], hints: list[float | None], seed: int
) -> None:
    policy = RecoveryPolicy()
    ladder = Ladder(policy, rng=random.Random(seed))
    plan = ladder.first()
    elapsed = 0.0
    for verdict, hint in zip(sequence, hints, strict=False):
        result = ladder.after_failure(plan, fail(503, retry_after=hint), verdict, elapsed)
        if isinstance(result, GiveUp):
            break
        assert result.number == plan.number + 1
        assert result.delay >= 0.0
        elapsed += result.delay
        assert elapsed <= policy.deadline
        plan = result
    steps = ladder.steps_taken
    for once in ("strict", "media=degraded", "media=strip"):
        assert steps.count(once) <= 1
    assert steps.count("compact") <= policy.max_overflow_compactions
    assert steps.count("retry") <= policy.max_transient_retries
    bound = 1 + 3 + policy.max_overflow_compactions + policy.max_transient_retries
    assert plan.number <= bound


def test_unreadable_retry_after_values() -> None:
    [inf] = climb(Ladder(RecoveryPolicy()), [T], fail(429, retry_after=float("inf")))
    assert give_up(inf).reason.startswith("transient: Retry-After inf")
    [nan] = climb(Ladder(RecoveryPolicy(), rng=random.Random(3)), [T],
                  fail(429, retry_after=float("nan")))
    assert 0.0 <= plan_of(nan).delay <= 0.5  # backs off as if no hint was given


def test_retries_by_kind_replace_the_transient_count_for_that_kind() -> None:
    """LiteLLM's retry_policy: RateLimitErrorRetries, TimeoutErrorRetries and
    InternalServerErrorRetries each replace the retry count for their kind of failure."""
    policy = RecoveryPolicy(max_transient_retries=1, backoff_base=0.0, backoff_cap=0.0,
                            retries_by_kind=(("rate_limit", 3), ("timeout", 0)))
    limited = climb(Ladder(policy), [T] * 5, fail(429))
    assert [r.step for r in limited[:3]] == ["retry"] * 3  # type: ignore[union-attr]
    assert give_up(limited[3]).reason == "transient: 3 retries used"
    timed_out = climb(Ladder(policy), [T] * 5, fail(504))
    assert give_up(timed_out[0]).reason == "transient: 0 retries used"
    server = climb(Ladder(policy), [T] * 5, fail(503))
    assert plan_of(server[0]).step == "retry"
    assert give_up(server[1]).reason == "transient: 1 retries used"  # the general count
    with pytest.raises(ValueError, match="retries for timeout"):
        RecoveryPolicy(retries_by_kind=(("timeout", -1),))


def test_a_minimum_retry_delay_is_waited_even_without_retry_after() -> None:
    """LiteLLM's router_settings.retry_after: the shortest wait before a retry."""
    policy = RecoveryPolicy(max_transient_retries=2, backoff_base=0.0, backoff_cap=0.0,
                            min_retry_delay=2.5)
    retry = plan_of(Ladder(policy).after_failure(AttemptPlan(), fail(503), T, 0.0))
    assert retry.step == "retry" and retry.delay == 2.5
    late = Ladder(replace(policy, deadline=2.0)).after_failure(AttemptPlan(), fail(503), T, 0.0)
    assert give_up(late).reason.startswith("deadline")  # never waited past the deadline
