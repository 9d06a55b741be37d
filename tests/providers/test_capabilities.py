"""Capability resolution: operator model_info, then litellm's bundled map, then defaults."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.providers.capabilities import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_OUTPUT_TOKENS,
    ModelCapabilities,
    load_model_map,
    lookup_model,
    resolve_capabilities,
)


def test_bundled_map_for_an_anthropic_model_keyed_without_prefix() -> None:
    caps = resolve_capabilities("anthropic/claude-sonnet-4-5-20250929", None)
    entry = load_model_map()["claude-sonnet-4-5-20250929"]
    assert caps == ModelCapabilities(
        context_window=entry["max_input_tokens"],
        max_output_tokens=entry["max_output_tokens"],
        supports_images=entry["supports_vision"],
        supports_tools=entry["supports_function_calling"],
        source="litellm",
    )
    assert caps.context_window == 200_000 and caps.max_output_tokens == 64_000


def test_bundled_map_for_a_gemini_model_keyed_with_prefix() -> None:
    caps = resolve_capabilities("gemini/gemini-2.5-flash", {})
    assert caps.source == "litellm"
    assert caps.context_window == 1_048_576 and caps.supports_images is True


def test_stripped_name_must_belong_to_the_same_provider() -> None:
    # "claude-sonnet-4-5" is an anthropic entry: a different provider prefix must not borrow it.
    assert lookup_model("anthropic/claude-sonnet-4-5") is not None
    assert lookup_model("cohere/claude-sonnet-4-5") is None


def test_model_info_wins_field_by_field() -> None:
    caps = resolve_capabilities(
        "anthropic/claude-sonnet-4-5",
        {"max_input_tokens": 50_000, "supports_vision": False, "unrelated": "x"},
    )
    assert caps.context_window == 50_000
    assert caps.supports_images is False
    assert caps.max_output_tokens == 64_000  # still from the bundled map
    assert caps.source == "model_info"


def test_legacy_max_tokens_is_the_output_budget_unless_max_output_tokens_is_set() -> None:
    legacy = resolve_capabilities("openai/my-private-model", {"max_tokens": 2048})
    both = resolve_capabilities(
        "openai/my-private-model", {"max_tokens": 2048, "max_output_tokens": 1024}
    )
    assert (legacy.max_output_tokens, legacy.context_window) == (2048, DEFAULT_CONTEXT_WINDOW)
    assert both.max_output_tokens == 1024


def test_unknown_model_gets_documented_defaults() -> None:
    caps = resolve_capabilities("openai/definitely-not-a-real-model-xyz", None)
    assert caps == ModelCapabilities(
        context_window=128_000,
        max_output_tokens=4_096,
        supports_images=True,
        supports_tools=True,
        source="default",
    )
    assert (DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT_TOKENS) == (128_000, 4_096)


@pytest.mark.parametrize(
    "info",
    [
        {"max_input_tokens": 0},
        {"max_input_tokens": -5},
        {"max_input_tokens": "lots"},
        {"max_input_tokens": True},
        {"supports_vision": "yes"},
    ],
)
def test_malformed_model_info_values_are_ignored(info: dict[str, object]) -> None:
    caps = resolve_capabilities("openai/definitely-not-a-real-model-xyz", info)
    assert caps.context_window == DEFAULT_CONTEXT_WINDOW and caps.supports_images is True
    assert caps.source == "default"


def test_capabilities_are_frozen_and_the_map_is_cached() -> None:
    caps = resolve_capabilities("gemini/gemini-2.5-flash", None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.context_window = 1  # type: ignore[misc]
    assert load_model_map() is load_model_map()
    assert "sample_spec" not in load_model_map()
