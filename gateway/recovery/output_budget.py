"""An overflow the client's output budget alone causes: the budget to ask for instead (pure).

vLLM and OpenAI-style servers count the window as prompt plus ``max_tokens`` and say so:
"This model's maximum context length is 6048 tokens. However, you requested 6616 tokens
(568 in the messages, 6048 in the completion)". Clients that set ``max_tokens`` to the
model's whole window (a common default for local models) get this on every request, and no
compaction can help: nothing fits beside a budget that fills the window. The overflow rung
then lowers the budget to what the window leaves, instead of summarizing and failing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUMBER = r"([\d,]{1,12})"
# (and OpenAI's older "(1090 in your prompt; 3072 for the completion)")
_SPLIT = re.compile(r"context length is\W{0,3}" + _NUMBER + r".{0,120}?\b" + _NUMBER
                    + r" in (?:the messages|your prompt)\W{0,3}" + _NUMBER
                    + r" (?:in|for) the completion", re.I | re.S)
# OpenRouter, the input counted by kind: "This endpoint's maximum context length is 131072
# tokens. However, you requested about 138956 tokens (7884 of text input, 131072 in the
# output)"; "(81684 of text input, 3748 of tool input, 120000 in the output)".
_BY_KIND = re.compile(r"context length is\W{0,3}" + _NUMBER + r".{0,120}?\(((?:[\d,]{1,12} of "
                      r"\w+ input,\s*){1,6})" + _NUMBER + r" in the output", re.I | re.S)
_KIND_COUNT = re.compile(r"([\d,]{1,12}) of \w+ input")
# TGI (Together, Hugging Face endpoints): "`inputs` tokens + `max_new_tokens` must be <=
# 32769. Given: 200 `inputs` tokens and 32768 `max_new_tokens`" (window, prompt, budget).
_GIVEN = re.compile(r"max_new_tokens\W{0,3} must be <=\s*" + _NUMBER + r"\W{0,3}\s*Given:\s*"
                    + _NUMBER + r"\W{0,3}inputs\W{0,3} tokens and " + _NUMBER
                    + r"\W{0,3}max_new_tokens", re.I)
# Cloudflare Workers AI: "Requested token count exceeds the model's maximum context length
# of 6000 tokens. You requested a total of 8286 tokens: 286 tokens from the input messages
# and 8000 tokens for the completion."
_PARTS = re.compile(r"context length of\W{0,3}" + _NUMBER + r".{0,120}?\b" + _NUMBER
                    + r" tokens from the input messages and " + _NUMBER
                    + r" tokens for the completion", re.I | re.S)
# vLLM 0.20: "This model's maximum context length is 32768 tokens. However, you requested
# 32768 output tokens and your prompt contains at least 2210 input tokens" (window, budget,
# prompt).
_OUTPUT_FIRST = re.compile(r"context length is\W{0,3}" + _NUMBER + r".{0,80}?\brequested "
                           + _NUMBER + r" output tokens?.{0,40}?contains (?:at least )?"
                           + _NUMBER + r" input tokens?", re.I | re.S)
# Anthropic (and Bedrock's Claude): "input length and `max_tokens` exceed context limit:
# 1500 + 32000 > 8000" (prompt, budget, window).
_SUM = re.compile(r"context limit:?\s*" + _NUMBER + r"\s*\+\s*" + _NUMBER + r"\s*>\s*"
                  + _NUMBER, re.I)
# Lowered only when at most this many tokens of the window are left for the messages
# beside the budget: with more, compacting the history is the rung (the client's budget
# stays as asked).
COMPACTION_FLOOR = 1024
# Tokens kept free of the new budget (a server may count a few tokens of its own).
MARGIN = 16
# The least output budget worth asking for; below it, the refusal stands.
MIN_OUTPUT = 256


@dataclass(frozen=True, slots=True)
class OutputFit:
    """The window, the prompt's tokens and the budget a refusal names, and the budget that
    fits beside the prompt."""

    window: int
    prompt: int
    budget: int
    lowered: int


def fit_output_budget(texts: list[str]) -> OutputFit | None:
    """The lowered output budget when a refusal's words (:func:`failure_texts`) show the
    budget leaves no room for any history (at most :data:`COMPACTION_FLOOR` tokens) while
    the prompt itself fits; else None."""
    for text in texts:
        stated = _stated(text)
        if stated is None:
            continue
        window, prompt, budget = stated
        lowered = window - prompt - MARGIN
        if budget > window - COMPACTION_FLOOR and MIN_OUTPUT <= lowered < budget:
            return OutputFit(window, prompt, budget, lowered)
        return None
    return None


def _stated(text: str) -> tuple[int, int, int] | None:
    """(window, prompt, budget) as one of the known wordings states them, else None."""
    found = _SPLIT.search(text) or _PARTS.search(text) or _GIVEN.search(text)
    if found is not None:
        window, prompt, budget = (_int(n) for n in found.groups())
        return window, prompt, budget
    if (first := _OUTPUT_FIRST.search(text)) is not None:
        window, budget, prompt = (_int(n) for n in first.groups())
        return window, prompt, budget
    if (kinds := _BY_KIND.search(text)) is not None:
        prompt = sum(_int(n) for n in _KIND_COUNT.findall(kinds.group(2)))
        return _int(kinds.group(1)), prompt, _int(kinds.group(3))
    if (summed := _SUM.search(text)) is not None:
        prompt, budget, window = (_int(n) for n in summed.groups())
        return window, prompt, budget
    return None


def _int(text: str) -> int:
    return int(text.replace(",", "") or 0)
