"""choose() and DeploymentTable: LiteLLM's strategies, cooldowns and rpm/tpm limits (pure)."""

from __future__ import annotations

import random
from collections import Counter

from gateway.router.selection import Deployment, DeploymentTable, Unavailable, Usage, choose

A = Deployment("a", "g")
B = Deployment("b", "g")


def draws(deployments: list[Deployment], n: int = 4000, strategy: str = "simple-shuffle",
          table: DeploymentTable | None = None) -> Counter[str]:
    rng = random.Random(7)
    table = table or DeploymentTable()
    counts: Counter[str] = Counter()
    for _ in range(n):
        picked = choose(strategy, deployments, table, {}, 0.0, rng)
        assert isinstance(picked, Deployment)
        counts[picked.id] += 1
    return counts


def test_simple_shuffle_follows_weight_then_rpm_then_tpm() -> None:
    by_weight = draws([Deployment("a", "g", weight=3), Deployment("b", "g", weight=1)])
    assert 0.72 < by_weight["a"] / 4000 < 0.78
    by_rpm = draws([Deployment("a", "g", rpm=100), Deployment("b", "g", rpm=900)])
    assert 0.07 < by_rpm["a"] / 4000 < 0.13
    by_tpm = draws([Deployment("a", "g", tpm=1), Deployment("b", "g", tpm=1)])
    assert 0.45 < by_tpm["a"] / 4000 < 0.55
    unweighted = draws([A, B])
    assert 0.45 < unweighted["a"] / 4000 < 0.55


def test_least_busy_picks_the_fewest_in_flight() -> None:
    table = DeploymentTable()
    table.started("a", 0, 0.0)
    table.started("a", 0, 0.0)
    table.started("b", 0, 0.0)
    assert draws([A, B], 50, "least-busy", table) == Counter({"b": 50})
    table.finished("a")
    table.finished("a")
    assert draws([A, B], 50, "least-busy", table) == Counter({"a": 50})


def test_latency_routing_tries_untried_then_the_fastest() -> None:
    table = DeploymentTable()
    table.succeeded("a", 0.2)
    assert draws([A, B], 20, "latency-based-routing", table) == Counter({"b": 20})
    table.succeeded("b", 0.9)
    assert draws([A, B], 20, "latency-based-routing", table) == Counter({"a": 20})


def test_usage_routing_picks_the_fewest_tokens_this_minute() -> None:
    rng = random.Random(1)
    usage = {"a": Usage(3, 5000), "b": Usage(9, 100)}
    picked = choose("usage-based-routing", [A, B], DeploymentTable(), usage, 0.0, rng)
    assert picked == B


def test_rpm_and_tpm_limits_skip_a_deployment_and_report_when_all_are_full() -> None:
    rng = random.Random(1)
    limited = [Deployment("a", "g", rpm=2), Deployment("b", "g", tpm=1000)]
    usage = {"a": Usage(2, 10), "b": Usage(1, 900)}
    assert choose("simple-shuffle", limited, DeploymentTable(), usage, 30.0, rng,
                  tokens=50) == limited[1]
    full = choose("simple-shuffle", limited, DeploymentTable(), usage, 30.0, rng, tokens=200)
    assert isinstance(full, Unavailable)
    assert full.retry_after == 30.0  # the next minute


def test_cooldown_after_allowed_fails_and_at_once_on_429() -> None:
    table = DeploymentTable(allowed_fails=1, cooldown_time=10.0)
    assert table.failed("a", 500, 0.0, alone=False) == 0.0
    assert table.failed("a", 500, 1.0, alone=False) == 10.0  # second failure in a minute
    assert table.cooled_for("a", 5.0) == 6.0
    rng = random.Random(3)
    assert choose("simple-shuffle", [A, B], table, {}, 5.0, rng) == B
    assert choose("simple-shuffle", [A, B], table, {}, 11.5, rng) in (A, B)
    assert table.failed("b", 429, 20.0, alone=False) == 10.0  # rate limited: at once
    # Failures more than a minute apart never add up.
    assert table.failed("a", 500, 100.0, alone=False) == 0.0
    assert table.failed("a", 500, 200.0, alone=False) == 0.0


def test_a_requests_own_4xx_never_counts_toward_a_cooldown() -> None:
    """400, 413, 422...: the request's fault, not the deployment's (as LiteLLM); 402 and
    408 count as failures of the deployment."""
    table = DeploymentTable(allowed_fails=0, cooldown_time=10.0)
    for status in (400, 409, 413, 422):
        assert table.failed("a", status, 0.0, alone=False) == 0.0
    assert table.cooled_for("a", 0.0) == 0.0
    assert table.failed("a", 408, 1.0, alone=False) == 10.0
    assert table.failed("b", 402, 1.0, alone=False) == 10.0


def test_allowed_fails_by_kind_replace_the_general_allowance_for_that_kind() -> None:
    """LiteLLM's allowed_fails_policy: 429s tolerated five times a minute (instead of at
    once), timeouts once; kinds without a policy keep allowed_fails, counted apart."""
    table = DeploymentTable(allowed_fails=1, cooldown_time=10.0,
                            allowed_fails_by_kind={"rate_limit": 5, "timeout": 0})
    for second in range(5):
        assert table.failed("a", 429, float(second), alone=False) == 0.0
    assert table.failed("a", 500, 5.0, alone=False) == 0.0  # its own count: 1 of 1
    assert table.failed("a", 429, 6.0, alone=False) == 10.0  # the sixth in a minute
    assert table.failed("b", 504, 0.0, alone=False) == 10.0  # timeouts: none allowed
    assert table.failed("c", 500, 0.0, alone=False) == 0.0
    assert table.failed("c", 500, 1.0, alone=False) == 10.0
    assert table.failed("d", 401, 0.0, alone=False) == 10.0  # no policy: at once


def test_cost_routing_picks_the_cheapest_and_an_unknown_price_last() -> None:
    cheap, dear = Deployment("cheap", "g", cost=1e-6), Deployment("dear", "g", cost=1e-5)
    unknown = Deployment("unknown", "g")
    table = DeploymentTable()
    rng = random.Random(1)
    assert choose("cost-based-routing", [dear, unknown, cheap], table, {}, 0.0, rng) == cheap
    assert choose("cost-based-routing", [unknown, dear], table, {}, 0.0, rng) == dear


def test_a_lone_deployment_is_never_cooled_down() -> None:
    table = DeploymentTable(allowed_fails=0)
    assert table.failed("a", 429, 0.0, alone=True) == 0.0
    assert table.cooled_for("a", 0.0) == 0.0


def test_all_cooled_down_is_unavailable_with_the_shortest_wait() -> None:
    table = DeploymentTable(allowed_fails=0, cooldown_time=8.0)
    table.failed("a", 500, 0.0, alone=False)
    table.failed("b", 500, 2.0, alone=False)
    result = choose("simple-shuffle", [A, B], table, {}, 4.0, random.Random(1))
    assert isinstance(result, Unavailable) and result.retry_after == 4.0


def test_exclude_moves_a_retry_off_the_deployment_that_failed() -> None:
    rng = random.Random(5)
    for _ in range(20):
        assert choose("simple-shuffle", [A, B], DeploymentTable(), {}, 0.0, rng,
                      exclude=frozenset({"a"})) == B
    # Nothing else left: the excluded one is used rather than nothing.
    assert choose("simple-shuffle", [A], DeploymentTable(), {}, 0.0, rng,
                  exclude=frozenset({"a"})) == A


def test_order_prefers_the_lowest_available() -> None:
    first, second = Deployment("a", "g", order=1), Deployment("b", "g", order=2)
    assert draws([first, second], 50) == Counter({"a": 50})
    table = DeploymentTable(allowed_fails=0)
    table.failed("a", 500, 0.0, alone=False)
    assert choose("simple-shuffle", [first, second], table, {}, 1.0,
                  random.Random(1)) == second
