"""The window and prompt size read from overflow bodies, one wording per provider, and the
budgets scaled to a window."""

from __future__ import annotations

import json

import pytest

from gateway.compaction.kept import HEAD_TOKENS, LIMIT_TOKENS, TAIL_TOKENS
from gateway.compaction.window import (
    OverflowNumbers,
    WindowBook,
    overflow_numbers,
    scaled_budgets,
)

WORDINGS = [
    ("llama.cpp fields", json.dumps({"error": {
        "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 4311,
        "n_ctx": 2048, "message": "the request exceeds the available context size, try "
                                  "increasing it"}}), 2048, 4311),
    ("llama.cpp message", "request (5120 tokens) exceeds the available context size (4096 "
     "tokens), try increasing it", 4096, 5120),
    ("openai", "This model's maximum context length is 8192 tokens. However, your messages "
     "resulted in 9012 tokens. Please reduce the length of the messages.", 8192, 9012),
    ("vllm", "This model's maximum context length is 2048 tokens. However, you requested "
     "2723 tokens (1699 in the messages, 1024 in the completion).", 2048, 1699),
    ("openrouter", "This endpoint's maximum context length is 32768 tokens. However, you "
     "requested about 42832 tokens (42832 of text input).", 32768, 42832),
    ("anthropic", "prompt is too long: 219898 tokens > 200000 maximum", 200000, 219898),
    ("anthropic max_tokens", "input length and `max_tokens` exceed context limit: 198000 + "
     "8192 > 200000, decrease input length or `max_tokens` and try again", 200000, 198000),
    ("mistral", "Prompt contains 40000 tokens and 0 draft tokens, too large for model with "
     "32768 maximum context length", 32768, 40000),
    ("fireworks", "The prompt is too long: 40000, model maximum context length: 32768",
     32768, 40000),
    ("gemini", "The input token count (1200000) exceeds the maximum number of tokens "
     "allowed (1048576).", 1048576, 1200000),
    ("moonshot", "Your request exceeded model token limit: 262144 (requested: 269030)",
     262144, 269030),
    ("cohere", "too many tokens: total number of tokens in the prompt cannot exceed 4081 - "
     "received 5205. Try using a shorter prompt", 4081, 5205),
    ("tgi", "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8193. "
     "Given: 9000 `inputs` tokens and 512 `max_new_tokens`", 8193, 9000),
    ("tgi-inputs", "Input validation error: `inputs` must have less than 4096 tokens. "
     "Given: 5000", 4096, 5000),
    ("lm-studio", "Trying to keep the first 5000 tokens when context the overflows. However, "
     "the model is loaded with context length of only 4096 tokens", 4096, None),
    ("generic limit", "The input exceeds the limit of 16,384 tokens for this deployment.",
     16384, None),
    ("generic window", "Request does not fit the 8k model: context window of 8192 tokens.",
     8192, None),
]


@pytest.mark.parametrize(("name", "text", "window", "prompt"), WORDINGS,
                         ids=[w[0] for w in WORDINGS])
def test_each_provider_wording(name: str, text: str, window: int, prompt: int | None) -> None:
    assert overflow_numbers(text) == OverflowNumbers(window, prompt)


@pytest.mark.parametrize("text", [
    "Input is too long for requested model.",  # Bedrock: no numbers
    "the prompt is longer than the context length currently available to the model",
    "rate limit of 30,000 input tokens per minute",
    "max_tokens must be at most 4 (limit of 4 tokens)",  # too small to be a window
    "",
])
def test_no_window_when_the_body_names_none(text: str) -> None:
    assert overflow_numbers(text).window is None


def test_the_providers_window_wins_and_never_grows_the_plan() -> None:
    book = WindowBook()
    assert book.effective("m", 128_000, stated=False) == 128_000
    assert book.learn("m", 2048) and not book.learn("m", 2048)
    assert book.effective("m", 128_000, stated=False) == 2048
    # A configured window the provider contradicts gives way to the provider's statement...
    assert book.effective("m", 100_000, stated=True) == 2048
    # ... and a learned window never makes a smaller configured one larger.
    assert book.effective("m", 1_024, stated=True) == 1_024
    assert not book.learn("m", 12)


def test_budgets_are_the_spec_constants_at_large_windows() -> None:
    big = scaled_budgets(200_000)
    assert (big.kept_head, big.kept_tail, big.kept_limit) == (HEAD_TOKENS, TAIL_TOKENS,
                                                              LIMIT_TOKENS)
    assert big.reserve == 50_000
    assert big.summary_max_tokens == 8_192


@pytest.mark.parametrize("window", [2048, 4096, 8192, 32_768, 128_000])
def test_every_budget_fits_the_window(window: int) -> None:
    b = scaled_budgets(window, instructions_tokens=400)
    # The summary request fits: instructions + transcript + the summary's own output.
    assert 400 + b.summary_input + b.summary_max_tokens <= window
    # The compacted history leaves the reserve free below the block ratio.
    assert b.trim_target + b.reserve <= 0.85 * window
    assert b.kept_head + b.kept_tail == b.kept_limit <= b.trim_target
    assert b.summary_max_tokens <= window // 8 or b.summary_max_tokens == 128


def test_small_windows_scale_in_proportion() -> None:
    small = scaled_budgets(2048)
    assert small.reserve == 800
    assert small.kept_limit == 320 and small.kept_head == 32 and small.kept_tail == 288
    assert small.summary_max_tokens == 256
