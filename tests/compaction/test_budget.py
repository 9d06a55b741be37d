"""When to compact: settings, usage ratio, budget levels, decisions (SPEC §4.1, §5)."""

from __future__ import annotations

import pytest

from gateway.compaction import (
    CompactionSettings,
    budget_level,
    decide,
    effective_reserve,
    usage_ratio,
)


def test_defaults_match_spec() -> None:
    settings = CompactionSettings()
    assert settings.trigger_ratio == 0.85
    assert settings.effective_block_ratio == 0.85
    assert settings.reserved_context == 50_000
    assert settings.max_attempts == 5
    assert settings.summarizer_model is None


@pytest.mark.parametrize(("trigger", "block"), [(0.6, 0.85), (0.85, 0.85), (0.9, 0.9)])
def test_block_ratio_defaults_to_max_of_trigger_and_085(trigger: float, block: float) -> None:
    assert CompactionSettings(trigger_ratio=trigger).effective_block_ratio == block


@pytest.mark.parametrize(
    "kwargs",
    [
        {"trigger_ratio": 0.49},
        {"trigger_ratio": 0.995},
        {"trigger_ratio": 0.8, "block_ratio": 0.7},
        {"block_ratio": 1.2},
        {"reserved_context": -1},
        {"max_attempts": 0},
    ],
)
def test_invalid_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        CompactionSettings(**kwargs)  # type: ignore[arg-type]


def test_usage_counts_the_reserve() -> None:
    assert usage_ratio(78_000, 128_000) == pytest.approx((78_000 + 50_000) / 128_000)
    assert usage_ratio(10, 0) == float("inf")


def test_small_windows_scale_the_reserve_with_the_window() -> None:
    assert effective_reserve(200_000) == 50_000
    assert effective_reserve(128_000) == 50_000
    assert effective_reserve(100_000) == 39_062
    assert effective_reserve(8_000) == 3_125
    assert effective_reserve(2_048) == 800
    # A configured reserve below its share is kept as configured.
    assert effective_reserve(8_000, CompactionSettings(reserved_context=1_000)) == 1_000
    # A 8k test model is usable: 3k of input is far from blocked.
    assert decide(3_000, 8_000) == "none"
    assert decide(4_000, 8_000) == "block"


def test_reserve_clamp_is_monotonic_in_the_window() -> None:
    settings = CompactionSettings()
    allowed = [
        settings.trigger_ratio * w - effective_reserve(w, settings)
        for w in range(4_000, 300_000, 1_000)
    ]
    assert allowed == sorted(allowed)


@pytest.mark.parametrize(
    ("ratio", "level"),
    [
        (0.10, "comfortable"),
        (0.59, "comfortable"),
        (0.60, "warning"),
        (0.74, "warning"),
        (0.75, "pressure"),
        (0.849, "pressure"),
        (0.85, "critical"),
        (0.99, "critical"),
        (1.0, "blocked"),
        (1.7, "blocked"),
    ],
)
def test_budget_levels_with_default_trigger(ratio: float, level: str) -> None:
    assert budget_level(ratio) == level


def test_budget_levels_follow_a_low_trigger() -> None:
    settings = CompactionSettings(trigger_ratio=0.55)
    assert budget_level(0.5, settings) == "comfortable"
    assert budget_level(0.56, settings) == "critical"


def test_decide_background_between_trigger_and_block() -> None:
    settings = CompactionSettings(trigger_ratio=0.6, reserved_context=0)
    assert decide(50, 100, settings) == "none"
    assert decide(60, 100, settings) == "background"
    assert decide(84, 100, settings) == "background"
    assert decide(85, 100, settings) == "block"


def test_decide_with_trigger_equal_to_block_never_backgrounds() -> None:
    settings = CompactionSettings(reserved_context=0)
    assert decide(84, 100, settings) == "none"
    assert decide(85, 100, settings) == "block"
    assert decide(10, 0, settings) == "none"  # unknown window: the overflow error decides
