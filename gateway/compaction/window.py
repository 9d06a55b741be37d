"""Context windows learned from overflow refusals, and the budgets scaled to a window.

``overflow_numbers`` is the one parser of the numbers providers put in their overflow
bodies: the window (``n_ctx``, "maximum context length is N", "N tokens > M maximum",
"limit of N tokens", ...) and, where stated, the prompt size. ``WindowBook`` remembers a
learned window per route. ``scaled_budgets`` sizes every compaction budget for a window:
the SPEC §4 constants are written for windows of 128k tokens and more and act as caps;
below that everything shrinks in proportion, so the compacted request and the summary
request each fit the window they are sent to. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from gateway.compaction.kept import HEAD_TOKENS, LIMIT_TOKENS, TAIL_TOKENS

MIN_WINDOW = 256  # anything smaller is not a context window, whatever the text says
# A refusal naming no window bounds it by the refused request's size only from this size up.
MIN_REFUSED_BOUND = 1_024
MAX_WINDOW = 100_000_000
REFERENCE_WINDOW = 128_000  # the SPEC constants are written for windows this large
DEFAULT_RESERVE = 50_000
SUMMARY_MAX_TOKENS = 8_192  # the summary call's output, at large windows
MIN_SUMMARY_TOKENS = 128

_N = r"(\d[\d,]*)"
_TOK = r"\s*(?:tokens?)?"
# (pattern, which group is the window, which is the prompt; 0 = not stated)
_WORDINGS: tuple[tuple[re.Pattern[str], int, int], ...] = tuple(
    (re.compile(rx, re.I | re.S), window, prompt) for rx, window, prompt in (
        # llama.cpp server: "n_prompt_tokens": 4311, "n_ctx": 2048 (JSON fields)
        (r'"?n_ctx"?\s*[:=]\s*' + _N, 1, 0),
        # llama.cpp message: request (4311 tokens) exceeds the available context size (2048
        # tokens)
        (r"\(" + _N + r" tokens?\) exceeds the available context size \(" + _N, 2, 1),
        # vLLM 0.20: maximum context length is N tokens. However, you requested B output
        # tokens and your prompt contains at least P input tokens (B is not the prompt)
        (r"maximum context length is " + _N + r".{0,80}?requested " + _N + r" output tokens?"
         r".{0,40}?contains (?:at least )?" + _N + r" input tokens?", 1, 3),
        # OpenAI, vLLM, DeepSeek, OpenRouter, Azure: maximum context length is N tokens.
        # However, your messages resulted in M tokens / you requested (about) M tokens
        (r"maximum context length is " + _N + r".{0,80}?(?:resulted in|requested(?: about)?) "
         + _N, 1, 2),
        (r"maximum context length is " + _N, 1, 0),
        # Anthropic: prompt is too long: 219898 tokens > 200000 maximum
        (_N + r"\s*tokens?\s*>\s*" + _N + r"\s*(?:tokens? )?maximum", 2, 1),
        # Anthropic, input and max_tokens together: input length and `max_tokens` exceed
        # context limit: 198000 + 8192 > 200000
        (r"context limit:?\s*" + _N + r"\s*\+\s*" + _N + r"\s*>\s*" + _N, 3, 1),
        # Mistral: Prompt contains 40000 tokens ... too large for model with 32768 maximum
        # context length
        (r"contains " + _N + r" tokens.{0,80}?model with " + _N + r" maximum context", 2, 1),
        # Fireworks: The prompt is too long: 40000, model maximum context length: 32768
        (r"too long:\s*" + _N + r".{0,40}?maximum context length:?\s*" + _N, 2, 1),
        # Gemini: The input token count (1200000) exceeds the maximum number of tokens
        # allowed (1048576)
        (r"token count\s*\(?" + _N + r"\)?.{0,60}?maximum number of tokens allowed\s*\(?"
         + _N, 2, 1),
        # Vertex AI: the input token count is 1195935 but model only supports up to 1048576
        (r"token count is " + _N + r".{0,20}?only supports? up to " + _N, 2, 1),
        # vLLM V1: The decoder prompt (length 40000) is longer than the maximum model length
        # of 32768
        (r"\(length " + _N + r"\) is longer than the maximum model length (?:of|is) " + _N,
         2, 1),
        (r"maximum model length (?:of|is) " + _N, 1, 0),
        # xAI: This model's maximum prompt length is 131072 but the request contains 150000
        # tokens
        (r"maximum prompt length is " + _N + r".{0,40}?contains " + _N, 1, 2),
        # Cerebras: Current length is 9000 while limit is 8192
        (r"current length is " + _N + r" while (?:the )?limit is " + _N, 2, 1),
        # Bedrock (Titan): Max input tokens: 8192, request input token count: 9000
        (r"max input tokens:?\s*" + _N + r".{0,40}?input token count:?\s*" + _N, 1, 2),
        # Moonshot / Kimi: exceeded model token limit: 262144 (requested: 269030)
        (r"token limit:?\s*" + _N + r"\s*\(requested:?\s*" + _N, 1, 2),
        # SambaNova: The provided prompt is 12026 tokens long, so ... the maximum supported
        # sequence length is just 8192
        (r"prompt is " + _N + r" tokens long.{0,160}?maximum supported sequence length is "
         r"(?:just )?" + _N, 2, 1),
        (r"maximum supported sequence length is (?:just )?" + _N, 1, 0),
        # DashScope (Qwen): Range of input length should be [1, 30720]
        (r"range of input length should be \[\s*\d+\s*,\s*" + _N, 1, 0),
        # Cohere: cannot exceed 4081 - received 5205
        (r"cannot exceed " + _N + r"\s*-?\s*received " + _N, 1, 2),
        # TGI: `inputs` tokens + `max_new_tokens` must be <= 8193. Given: 9000 `inputs`
        # tokens; `inputs` must have less than 4096 tokens. Given: 5000
        (r"must be <= " + _N + r".{0,20}?Given:\s*" + _N, 1, 2),
        (r"must have less than " + _N + r"\s*tokens.{0,20}?Given:\s*" + _N, 1, 2),
        # LM Studio: the model is loaded with context length of only 4096 tokens
        (r"context length of (?:only )?" + _N + _TOK, 1, 0),
        # llama.cpp behind LM Studio: Cannot truncate prompt with n_keep (15028) >= n_ctx
        # (7424); SGLang: Input length (160062 tokens) exceeds the maximum allowed length
        # (59862 tokens)
        (r"n_keep\W{0,4}" + _N + r"\W{0,4}>=?\s*n_ctx\W{0,4}" + _N, 2, 1),
        (r"length \(" + _N + r" tokens?\) exceeds the maximum allowed length \(" + _N, 2, 1),
        # Volcano Engine Ark: Input length 203743 exceeds the maximum length 202752;
        # DeepInfra: Requested input length 39818 exceeds maximum input length 32767;
        # TensorRT-LLM: Prompt length (40000) exceeds maximum input length (32767)
        (r"length \(?" + _N + r"\)? exceeds (?:the )?maximum (?:input )?length \(?" + _N,
         2, 1),
        # A server's length setting beside the prompt: "max_model_len is 8192, but the
        # prompt has 12001 tokens"; ExLlama / TabbyAPI: "Prompt length 12001 is greater than
        # max_seq_len 8192", "Prompt exceeds max_seq_len (12001 > 8192)"
        (r"(?:max_model_len|max_seq_len|max_sequence_length)\W{0,4}(?:is\s*)?" + _N
         + r".{0,40}?prompt (?:has|contains|is) " + _N, 1, 2),
        (r"length \(?" + _N + r"\)? is (?:greater|larger|longer) than (?:the )?"
         r"(?:max_model_len|max_seq_len|max_sequence_length)\W{0,4}" + _N, 2, 1),
        (r"(?:max_model_len|max_seq_len|max_sequence_length)\W{0,4}\(\s*" + _N
         + r"\s*>\s*" + _N, 2, 1),
        # Cohere-style: prompt must be at most 8192 tokens, received 12001 tokens
        (r"must be at most " + _N + r"\s*tokens?,?\s*(?:but )?received " + _N, 1, 2),
        # GitHub Models (Azure AI inference, a 413 tokens_limit_reached): Request body too
        # large for gpt-4o model. Max size: 8000 tokens.
        (r"too large for .{0,80}?max size:?\s*" + _N + r"\s*tokens", 1, 0),
        # Generic: exceeds the limit of N tokens / context window of N tokens / N-token
        # context window
        (r"(?<!rate )limit of " + _N + r"\s*(?:input |prompt |context )?tokens(?! per\b)",
         1, 0),
        (r"context (?:window|size|length)(?: is| of)?:?\s*\(?" + _N + _TOK, 1, 0),
        (_N + r"[- ]tokens? context(?: window| size| length)?", 1, 0),
    )
)
_PROMPT_FIELD = re.compile(r'"?n_prompt_tokens"?\s*[:=]\s*(\d+)', re.I)
_IN_MESSAGES = re.compile(r"\(" + _N + r" in (?:the messages|your prompt)", re.I)
# OpenRouter counts the input by kind: "(81684 of text input, 3748 of tool input, 120000 in
# the output)": the prompt is their sum.
_BY_KIND = re.compile(r"\(((?:\d[\d,]* of \w+ input,\s*){1,6})\d[\d,]* in the output", re.I)
_KIND_COUNT = re.compile(r"(\d[\d,]*) of \w+ input", re.I)


@dataclass(frozen=True, slots=True)
class OverflowNumbers:
    """What an overflow refusal says: the window and the prompt size (None if not stated)."""

    window: int | None = None
    prompt: int | None = None


def _int(text: str) -> int | None:
    try:
        value = int(text.replace(",", ""))
    except ValueError:
        return None
    return value if 0 < value <= MAX_WINDOW else None


def overflow_numbers(text: str) -> OverflowNumbers:
    """The window and prompt size stated by an overflow body (``text``: the whole body).

    The first wording that names a plausible window wins; the prompt size comes from the
    same wording, else from ``n_prompt_tokens`` or vLLM's "(N in the messages". A "window"
    smaller than ``MIN_WINDOW`` is ignored.
    """
    window: int | None = None
    prompt: int | None = None
    for pattern, w_group, p_group in _WORDINGS:
        match = pattern.search(text)
        if match is None:
            continue
        found = _int(match.group(w_group))
        if found is None or found < MIN_WINDOW:
            continue
        window = found
        if p_group:
            prompt = _int(match.group(p_group))
        break
    in_messages = _IN_MESSAGES.search(text)
    by_kind = _BY_KIND.search(text)
    if in_messages is not None:
        prompt = _int(in_messages.group(1)) or prompt
    elif by_kind is not None:
        prompt = sum(_int(n) or 0 for n in _KIND_COUNT.findall(by_kind.group(1))) or prompt
    elif prompt is None and (field := _PROMPT_FIELD.search(text)) is not None:
        prompt = _int(field.group(1))
    return OverflowNumbers(window, prompt)


_OUTPUT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def asked_output_tokens(body: object) -> int:
    """The output a request body asks room for (``max_tokens`` and its aliases), else 0."""
    if not isinstance(body, dict):
        return 0
    for name in _OUTPUT_FIELDS:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_WINDOW:
            return value
    return 0


class WindowBook:
    """Context windows learned per route (in memory; the service shares them via the
    session store when one is shared)."""

    def __init__(self) -> None:
        self._learned: dict[str, int] = {}

    def learned(self, route: str) -> int | None:
        """The window learned for ``route``, or None."""
        return self._learned.get(route)

    def learn(self, route: str, window: int) -> bool:
        """Remember ``window`` for ``route``; True when that changed what was known."""
        if window < MIN_WINDOW or self._learned.get(route) == window:
            return False
        self._learned[route] = window
        return True

    def effective(self, route: str, configured: int, *, stated: bool) -> int:
        """The window to plan with: the learned one when smaller than the configured one
        (``stated``) or the default guess; the provider's own statement wins."""
        learned = self._learned.get(route)
        if learned is None:
            return configured
        return min(learned, configured)


class EffectiveWindows(Mapping[str, int]):
    """Configured windows by name, each lowered to what ``learned`` (a live lookup, such as
    :meth:`WindowBook.learned`) says for that name: a window learned from a refusal counts
    at once wherever windows are compared (context-window fallbacks)."""

    def __init__(self, configured: Mapping[str, int],
                 learned: Callable[[str], int | None]) -> None:
        self._configured = configured
        self._learned = learned

    def __getitem__(self, name: str) -> int:
        configured = self._configured[name]
        found = self._learned(name)
        return configured if found is None else min(configured, found)

    def __iter__(self) -> Iterator[str]:
        return iter(self._configured)

    def __len__(self) -> int:
        return len(self._configured)


@dataclass(frozen=True, slots=True)
class Budgets:
    """Every compaction budget for one window (tokens)."""

    window: int
    reserve: int
    kept_limit: int
    kept_head: int
    kept_tail: int
    summary_max_tokens: int
    summary_input: int
    trim_target: int
    fit_limit: int  # the most a compacted history may hold and still fit the window


def scale(window: int) -> float:
    """The share of the SPEC constants a window gets: 1.0 from ``REFERENCE_WINDOW`` up."""
    return min(1.0, max(window, 1) / REFERENCE_WINDOW)


def scaled_reserve(window: int, reserved_context: int = DEFAULT_RESERVE) -> int:
    """The reserve for the output: the configured one, capped by its share of the window."""
    return max(0, min(reserved_context, int(DEFAULT_RESERVE * scale(window)),
                      window // 2))


def scaled_budgets(
    window: int, *, reserved_context: int = DEFAULT_RESERVE, block_ratio: float = 0.85,
    instructions_tokens: int = 400, fixed_tokens: int = 0,
) -> Budgets:
    """The budgets for ``window``; SPEC constants at 128k and above, in proportion below.

    ``instructions_tokens`` is the size of the summary request's fixed part (instructions
    and the final ask); ``fixed_tokens`` what every request carries besides its messages
    (the tools table). The summary request (instructions + transcript + ``max_tokens``)
    fits the window; the trim target leaves the reserve free below the block ratio.
    """
    share = scale(window)
    reserve = scaled_reserve(window, reserved_context)
    limit = int(LIMIT_TOKENS * share)
    head = int(HEAD_TOKENS * share)
    tail = int(TAIL_TOKENS * share)
    summary_out = max(MIN_SUMMARY_TOKENS, min(SUMMARY_MAX_TOKENS, window // 8))
    # Token counts differ between tokenizers (the upstream's is not tiktoken): a tenth of
    # the window is left free for that.
    margin = max(64, window // 10)
    summary_input = max(MIN_WINDOW // 2,
                        window - instructions_tokens - summary_out - margin)
    trim_target = max(window // 4,
                      int(window * block_ratio) - reserve - fixed_tokens - margin)
    fit_limit = max(window // 4, window - fixed_tokens - margin)
    return Budgets(window, reserve, limit, head, tail, summary_out, summary_input,
                   trim_target, fit_limit)
