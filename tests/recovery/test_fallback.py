"""Fallback rungs of the pure ladder: which chain, in what order, after what (no I/O)."""

from __future__ import annotations

from gateway.providers.failure import UpstreamFailure
from gateway.recovery.classifier import Verdict
from gateway.recovery.fallback import FallbackChains, failure_kind
from gateway.recovery.ladder import AttemptPlan, GiveUp, Ladder
from gateway.recovery.policy import RecoveryPolicy
from gateway.router.names import PrefixedChains

POLICY = RecoveryPolicy(max_transient_retries=1, backoff_base=0.0, backoff_cap=0.0)
CHAINS = FallbackChains.build(
    (("gpt-4o", ("claude", "llama")), ("*", ("catch-all",))),
    (("small", ("tiny", "large")),),
    (("gpt-4o", ("moderated",)),),
    windows={"small": 8000, "tiny": 4000, "large": 128000},
)


def fail(status: int, code: str | None = None, message: str = "refused") -> UpstreamFailure:
    return UpstreamFailure(status=status, provider="p", message=message, code=code)


def test_transient_falls_back_only_once_retries_are_spent() -> None:
    ladder = Ladder(POLICY, fallbacks=CHAINS, group="gpt-4o")
    plan = ladder.first()
    down = fail(503)
    retry = ladder.after_failure(plan, down, Verdict.TRANSIENT, 0.0)
    assert isinstance(retry, AttemptPlan) and retry.step == "retry" and retry.model is None
    moved = ladder.after_failure(retry, down, Verdict.TRANSIENT, 0.0)
    assert isinstance(moved, AttemptPlan)
    assert (moved.step, moved.model, moved.delay) == ("fallback", "claude", 0.0)
    # The new group gets its own retries, then the next fallback.
    again = ladder.after_failure(moved, down, Verdict.TRANSIENT, 0.0)
    assert isinstance(again, AttemptPlan) and again.step == "retry"
    assert again.model == "claude"
    last = ladder.after_failure(again, down, Verdict.TRANSIENT, 0.0)
    assert isinstance(last, AttemptPlan) and last.model == "llama"
    assert ladder.steps_taken == ("retry", "fallback", "retry", "fallback")


def test_a_repaired_request_keeps_its_repairs_on_the_fallback() -> None:
    ladder = Ladder(RecoveryPolicy(max_transient_retries=0), fallbacks=CHAINS, group="gpt-4o")
    strict = ladder.after_failure(ladder.first(), fail(400), Verdict.STRUCTURAL, 0.0)
    assert isinstance(strict, AttemptPlan) and strict.structure == "strict"
    moved = ladder.after_failure(strict, fail(429), Verdict.TRANSIENT, 0.0)
    assert isinstance(moved, AttemptPlan) and moved.model == "claude"
    assert moved.structure == "strict"


def test_overflow_tries_a_larger_window_before_compacting() -> None:
    ladder = Ladder(POLICY, fallbacks=CHAINS, group="small")
    overflow = fail(400, "context_length_exceeded")
    moved = ladder.after_failure(ladder.first(), overflow, Verdict.OVERFLOW, 0.0)
    assert isinstance(moved, AttemptPlan)
    assert (moved.step, moved.model) == ("fallback", "large")  # "tiny" is smaller: skipped
    compact = ladder.after_failure(moved, overflow, Verdict.OVERFLOW, 0.0)
    assert isinstance(compact, AttemptPlan) and compact.step == "compact"


def test_bad_requests_and_deadlines_never_fall_back() -> None:
    ladder = Ladder(POLICY, fallbacks=CHAINS, group="gpt-4o")
    result = ladder.after_failure(ladder.first(), fail(400), Verdict.FATAL, 0.0)
    assert isinstance(result, GiveUp) and result.reason.startswith("fatal")
    late = Ladder(RecoveryPolicy(deadline=1.0), fallbacks=CHAINS, group="gpt-4o")
    result = late.after_failure(late.first(), fail(503), Verdict.TRANSIENT, 5.0)
    assert isinstance(result, GiveUp) and result.reason.startswith("deadline")


def test_auth_and_content_policy_refusals_take_their_chains() -> None:
    ladder = Ladder(POLICY, fallbacks=CHAINS, group="gpt-4o")
    policy = fail(400, "content_policy_violation", "Your request was rejected by our safety system")
    moved = ladder.after_failure(ladder.first(), policy, Verdict.FATAL, 0.0)
    assert isinstance(moved, AttemptPlan) and moved.model == "moderated"
    other = Ladder(POLICY, fallbacks=CHAINS, group="anything")
    moved = other.after_failure(other.first(), fail(401), Verdict.FATAL, 0.0)
    assert isinstance(moved, AttemptPlan) and moved.model == "catch-all"  # the "*" chain


def test_a_request_chain_replaces_the_group_chain_and_empty_disables() -> None:
    own = CHAINS.with_request("gpt-4o", ("llama",))
    ladder = Ladder(RecoveryPolicy(max_transient_retries=0), fallbacks=own, group="gpt-4o")
    moved = ladder.after_failure(ladder.first(), fail(500), Verdict.TRANSIENT, 0.0)
    assert isinstance(moved, AttemptPlan) and moved.model == "llama"
    none = CHAINS.with_request("gpt-4o", ())
    ladder = Ladder(RecoveryPolicy(max_transient_retries=0), fallbacks=none, group="gpt-4o")
    result = ladder.after_failure(ladder.first(), fail(500), Verdict.TRANSIENT, 0.0)
    assert isinstance(result, GiveUp)


def test_failure_kinds() -> None:
    assert failure_kind(fail(400), Verdict.OVERFLOW) == "context_window"
    assert failure_kind(fail(400, "content_filter"), Verdict.FATAL) == "content_policy"
    assert failure_kind(fail(429), Verdict.TRANSIENT) == "general"
    assert failure_kind(fail(404), Verdict.FATAL) == "general"
    assert failure_kind(fail(422), Verdict.FATAL) is None
    assert failure_kind(fail(400), Verdict.STRUCTURAL) is None


def test_a_fallback_group_goes_on_to_its_own_fallbacks_before_the_next_one() -> None:
    """As LiteLLM (a fallback call runs with fallbacks): gpt-4o: [claude, llama] with
    claude: [bedrock] tries claude, bedrock, then llama; each group once, max_fallbacks
    deep, and a context-window walk keeps to larger windows at every step."""
    chains = FallbackChains.build(
        (("gpt-4o", ("claude", "llama")), ("claude", ("bedrock", "gpt-4o")),
         ("bedrock", ("claude", "haiku")), ("*", ("catch-all",))),
        (("small", ("mid",)), ("mid", ("large", "tiny"))),
        windows={"small": 8000, "mid": 32000, "large": 128000, "tiny": 4000})
    assert chains.chain("gpt-4o", "general") == ("claude", "bedrock", "haiku", "llama")
    assert chains.chain("small", "context_window") == ("mid", "large")
    shallow = FallbackChains.build(tuple(chains.general.items()), max_fallbacks=1)
    assert shallow.chain("gpt-4o", "general") == ("claude", "llama")
    ladder = Ladder(RecoveryPolicy(max_transient_retries=0), fallbacks=chains, group="gpt-4o")
    plan = ladder.first()
    tried = []
    for _ in range(4):
        plan = ladder.after_failure(plan, fail(503), Verdict.TRANSIENT, 0.0)
        assert isinstance(plan, AttemptPlan)
        tried.append(plan.model)
    assert tried == ["claude", "bedrock", "haiku", "llama"]


def test_a_requests_own_fallbacks_keep_the_chains_found_by_bare_name() -> None:
    # The config's chain is written for the bare name (``gpt-4o: [backup]``) and serves the
    # ``openai/gpt-4o`` a wildcard entry answers; a request naming that model in its own
    # ``fallbacks`` still gets the nested step, as LiteLLM walks it.
    chains = FallbackChains(general=PrefixedChains({"gpt-4o": ("backup",)}))
    own = chains.with_request("claude", ("openai/gpt-4o",))
    assert own.chain("claude", "general") == ("openai/gpt-4o", "backup")
    assert chains.chain("claude", "general") == ()  # (the config alone has none for it)
