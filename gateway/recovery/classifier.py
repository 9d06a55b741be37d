"""Classify an upstream failure into the ladder's verdicts, by meaning first and status last.

Every string of the error is read (``evidence.failure_texts``: message, type, code and
every string of the body, nested or around a JSON object), not one field. The order of the
checks is the design:

1. 401/402/403/404/405/407/410/451 are fatal whatever the text says.
2. An exhausted quota or a billing problem is fatal, even on a 429 (waiting seconds will
   not refill a daily quota or a balance), unless every quota it names is a per-minute one
   with a limit above 0 (Gemini's free tier words its per-minute quota that way). A 404
   on a request with images that says the model takes no images is media (OpenRouter's
   "No endpoints found that support image input").
3. A single request larger than a *per-minute* token budget ("Limit 6000, Requested
   10338") is ``request_too_large``: retrying the same request can never pass, but a
   smaller one can (media degrade, strip, compaction), and it is not a context overflow.
4. On a client error (4xx other than 408/425/429), specific evidence comes first:
   policy / auth / model-generation / output-budget wording is fatal (so is an output
   budget at or over the context window), then media (an image
   code too: "Timeout while downloading <url>" is ``invalid_image_url``), overflow, payload
   size and structure (rows of ``SPECIFIC``) decide, whatever generic code
   (``*_server_error``, ``api_error``) or retry wording comes with them.
5. Otherwise rate-limit / overloaded / unavailable / timeout wording is transient. It vetoes
   an overflow reading ("please reduce the prompt length or try again later" is a 429).
   A 5xx that says no more than "server error" but names a context overflow, or (on a
   request with images) image input the server does not take, is that, not a retry
   (llama.cpp answers both with a 500).
6. Model-generation failures, content-policy refusals, auth wording and a server that
   cannot hold the model ("requires more system memory than is available") are fatal.
7. The ``SPECIFIC`` rows, by wording or by code: image / media wording is media; context
   or token overflow is overflow (an overflow wording that names no tokens, "Input is too
   long for requested model", on a request with images is media first: Bedrock words an
   oversized image payload that way); payload size is request_too_large; tool pairing,
   tool ids, duplicates, role order and empty content are structural; so are the agent
   wires' own history rules (reasoning items, item ids, encrypted items, thinking blocks,
   cache breakpoints, prefill), and a 404 that names an input item it cannot find.
8. Otherwise the status decides: 413 request_too_large; 408/424/425/429/5xx/529
   transient; everything else fatal.

Finally ``should_retry`` (``x-should-retry``) overrides: False turns transient into fatal,
True turns fatal into transient.
"""

from __future__ import annotations

import enum
import re

from gateway.projection.asks import StrictAsks
from gateway.providers.failure import UpstreamFailure
from gateway.recovery import patterns as p
from gateway.recovery.evidence import failure_texts

__all__ = ["Verdict", "classify", "developer_role_refused", "explain", "images_unsupported",
           "strict_asks"]


class Verdict(enum.StrEnum):
    """What a failure means for the recovery ladder."""

    STRUCTURAL = "structural"
    MEDIA = "media"
    OVERFLOW = "overflow"
    REQUEST_TOO_LARGE = "request_too_large"
    TRANSIENT = "transient"
    FATAL = "fatal"


_FATAL_STATUSES = frozenset({401, 402, 403, 404, 405, 407, 410, 451})
_TRANSIENT_STATUSES = frozenset({408, 425, 429, 529})
# A dependency of the provider failed (Bedrock's model errors, Azure AI's model): when the
# text says nothing more specific, the same request may pass on a retry.
_FAILED_DEPENDENCY = 424
_BODY_CODE = re.compile(
    r"""["'](?:code|type|status|reason|__type|errorType|error_code|Code)["']\s*:\s*["']([A-Za-z_][\w.:-]{2,80})["']"""
)
_WHITESPACE = re.compile(r"\s+")


def call_id_form(refusal: str) -> str | None:
    """The tool call id form (``projection.call_ids.CALL_ID_FORMS``) a strict retry writes
    after a refusal in these words: ``nine_alnum`` when it asks Mistral's nine letters and
    digits, ``portable`` when it refuses an id's form, None when it says nothing of ids."""
    if p.NINE_CHARACTER_IDS.search(refusal):
        return "nine_alnum"
    if any(rule.pattern.search(refusal) for rule in p.TOOL_ID_FORM):
        return "portable"
    return None


def thinking_parts_refused(refusal: str) -> bool:
    """True when the refusal names Anthropic ``thinking`` parts in a chat assistant turn as
    an invalid content part type (OpenAI: "Invalid value: 'thinking'. Supported values are:
    'text' and 'refusal'."): the strict retry drops them."""
    return any(rule.name == "thinking_part" and rule.search(refusal) for rule in p.STRUCTURAL)


def images_unsupported(failure: UpstreamFailure) -> bool:
    """True when the refusal says the model takes no images at all ("image input is not
    supported", "Model does not support images", "No endpoints found that support image
    input"): a smaller image fails the same way, only leaving them out passes."""
    text = _WHITESPACE.sub(" ", " | ".join(failure_texts(failure)))
    return p.first_rule(p.MEDIA_UNSUPPORTED, text) is not None


def developer_role_refused(refusal: str) -> bool:
    """True when the refusal names the ``developer`` role as one the upstream does not take:
    the strict retry sends developer messages as system ones
    (``project_strict(developer_role=True)``)."""
    return any(rule.name == "developer_role" and rule.search(refusal) for rule in p.STRUCTURAL)


def call_parts_counted(refusal: str) -> bool:
    """True when the refusal counts a turn's function responses against its function calls
    (Gemini): the strict retry merges identical calls of one turn, which litellm's
    translation would send as one call answered twice."""
    return p.CALL_PART_COUNT.search(refusal) is not None


def strict_asks(refusal: str) -> StrictAsks:
    """What the refusal in these words asks of a chat history's strict resend."""
    return StrictAsks(call_id_form(refusal), thinking_parts_refused(refusal),
                      call_parts_counted(refusal), developer_role_refused(refusal),
                      p.ASSISTANT_AFTER_TOOLS.search(refusal) is not None,
                      any(rule.name == "tool_arguments" and rule.search(refusal)
                          for rule in p.STRUCTURAL))




def classify(failure: UpstreamFailure, *, has_images: bool = False) -> Verdict:
    """The verdict for ``failure``.

    ``has_images`` says whether the refused request carried images; it turns ambiguous
    size or content-shape refusals into ``media`` so images are degraded first.
    """
    return explain(failure, has_images=has_images)[0]


def explain(failure: UpstreamFailure, *, has_images: bool = False) -> tuple[Verdict, str]:
    """The verdict for ``failure`` and the name of the rule that decided it."""
    verdict, rule = _by_meaning(failure, has_images)
    if verdict is Verdict.TRANSIENT and failure.should_retry is False:
        return Verdict.FATAL, f"{rule}+should_retry=false"
    if verdict is Verdict.FATAL and failure.should_retry is True and not _billing(rule):
        return Verdict.TRANSIENT, f"{rule}+should_retry=true"
    return verdict, rule


def _billing(rule: str) -> bool:
    """A verdict of a bill or an exhausted quota (a retry hint cannot refill it)."""
    return rule == "code:quota" or any(rule == r.name for r in p.QUOTA)


def _by_meaning(failure: UpstreamFailure, has_images: bool) -> tuple[Verdict, str]:
    status = failure.status
    text = _WHITESPACE.sub(" ", " | ".join(failure_texts(failure)))
    if status == 404 and p.MISSING_ITEM.search(text):
        return Verdict.STRUCTURAL, "missing_item+404"
    if status == 404 and has_images and p.first_rule(p.MEDIA_UNSUPPORTED, text):
        # OpenRouter's "No endpoints found that support image input": the model is there,
        # not for images; without them (the media rung) the request passes.
        return Verdict.MEDIA, "media_unsupported+404"
    if status in _FATAL_STATUSES:
        return Verdict.FATAL, f"status:{status}"
    codes = _codes(failure)

    rule = p.first_rule(p.QUOTA, text)
    if rule == "quota_exhausted" and _minute_quota(text):
        rule = None
    if rule or codes & p.QUOTA_CODES:
        return Verdict.FATAL, rule or "code:quota"
    if _too_large_for_rate(text):
        return Verdict.REQUEST_TOO_LARGE, "per_minute_budget"
    if 400 <= status < 500 and status not in _TRANSIENT_STATUSES:
        # A client error that says what is wrong (an image, the size, the tool pairing,
        # the role order, the context length) is about that, whatever generic code or
        # "server_error" / "temporarily" wording comes with it: retrying it unchanged
        # can never pass, a ladder step can.
        rule = p.first_rule(p.FATAL_MEANING, text)
        if rule or _output_over_window(text):
            return Verdict.FATAL, rule or "output_over_window"
        found = _specific(failure, text, codes & p.MEDIA_CODES, has_images)
        if found is not None:
            return found
    rule = p.first_rule(p.TRANSIENT, text)
    if 500 <= status <= 599 and rule in (None, "server_error"):
        # A server error that says no more than "server error" but names a lasting reason
        # (llama.cpp: a 500 "Context size has been exceeded", "image input is not
        # supported"): the same request fails again, a ladder step can pass.
        found = _lasting_server_error(text, has_images)
        if found is not None:
            return found
    if rule:
        return Verdict.TRANSIENT, rule
    rule = p.first_rule(p.FATAL_MEANING, text)
    if rule or codes & p.FATAL_CODES:
        return Verdict.FATAL, rule or "code:fatal"
    if codes & p.TRANSIENT_CODES:
        return Verdict.TRANSIENT, "code:transient"
    return _specific(failure, text, codes, has_images) or _by_status(status)


def _specific(
    failure: UpstreamFailure, text: str, codes: frozenset[str], has_images: bool
) -> tuple[Verdict, str] | None:
    """The verdict of the first specific evidence in ``SPECIFIC`` order, else None."""
    for verdict, rules, names in SPECIFIC:
        if verdict is Verdict.MEDIA and _stated_overflow(text):
            continue  # (its numbers are tokens: an image named beside them is no cause)
        rule = p.first_rule(rules, text)
        if not rule and not codes & names:
            if verdict is Verdict.MEDIA and has_images:
                shape = p.first_rule(p.MEDIA_IF_IMAGES, text + " | " + (failure.param or ""))
                if shape:
                    return Verdict.MEDIA, f"{shape}+images"
            continue
        if verdict is Verdict.OVERFLOW and has_images and rule and not p.TOKEN_WORDS.search(text):
            # "Input is too long" naming no tokens, on a request with images: Bedrock words
            # an oversized image payload that way.
            return Verdict.MEDIA, f"{rule}+images"
        if verdict is Verdict.OVERFLOW and has_images and failure.status == 413:
            # A 413 worded as a context overflow on a request with images (a pasted
            # screenshot): smaller media first, then compaction (request_too_large's rungs).
            return Verdict.REQUEST_TOO_LARGE, f"{rule or 'code:overflow'}+413+images"
        return verdict, rule or f"code:{verdict.value}"
    return None


# Specific evidence, in the order it is weighed (data: add a meaning by adding a row).
SPECIFIC: tuple[tuple[Verdict, tuple[p.Rule, ...], frozenset[str]], ...] = (
    (Verdict.STRUCTURAL, p.MEDIA_PLACEMENT, frozenset()),
    (Verdict.STRUCTURAL, p.TOOL_ID_FORM, frozenset()),
    (Verdict.MEDIA, p.MEDIA, p.MEDIA_CODES),
    (Verdict.OVERFLOW, p.OVERFLOW, p.OVERFLOW_CODES),
    (Verdict.REQUEST_TOO_LARGE, p.REQUEST_TOO_LARGE, p.REQUEST_TOO_LARGE_CODES),
    (Verdict.STRUCTURAL, p.STRUCTURAL, p.STRUCTURAL_CODES),
    (Verdict.STRUCTURAL, p.WIRE_HISTORY, frozenset()),
)


def _stated_overflow(text: str) -> bool:
    """A context overflow stated in tokens with its figures (vLLM on a multimodal model:
    "The decoder prompt (length N) is longer than the maximum model length of M. Make sure
    that `max_model_len` is no smaller than the number of text tokens plus multimodal
    tokens. For image inputs, ..."; Vertex's, which links its multimodal prompts page):
    compaction, whatever media words follow."""
    return (_TOKENS.search(text) is not None and _FIGURE.search(text) is not None
            and p.first_rule(p.OVERFLOW, text) is not None)


_TOKENS = re.compile(r"\btokens?\b", re.I)
_FIGURE = re.compile(r"\d{3,}")


def _lasting_server_error(text: str, has_images: bool) -> tuple[Verdict, str] | None:
    rule = p.first_rule(p.OVERFLOW, text)
    if rule:
        return Verdict.OVERFLOW, f"{rule}+5xx"
    rule = p.first_rule(p.MEDIA_UNSUPPORTED, text) if has_images else None
    return (Verdict.MEDIA, f"{rule}+5xx") if rule else None


def _output_over_window(text: str) -> bool:
    """The client's ``max_tokens`` refused as a parameter, at or over the context window
    ("'max_tokens' or 'max_completion_tokens' is too large: 64000. This model's maximum
    context length is 32768 tokens"): no input fits beside it, so compaction cannot help.
    The overflow wording ("maximum context length is 8192 tokens. However, you requested
    8256 tokens (64 in the messages, 8192 in the completion)") stays an overflow, whatever
    its split: the provider names the context as the problem, and compacting is its rung."""
    match = p.BUDGET_THEN_WINDOW.search(text)
    if match is None:
        return False
    budget, window = match.groups()
    return int(budget.replace(",", "")) >= int(window.replace(",", ""))


def _by_status(status: int) -> tuple[Verdict, str]:
    if status == 413:
        return Verdict.REQUEST_TOO_LARGE, "status:413"
    if status in _TRANSIENT_STATUSES or status == _FAILED_DEPENDENCY or 500 <= status <= 599:
        return Verdict.TRANSIENT, f"status:{status}"
    return Verdict.FATAL, f"status:{status}"


def _codes(failure: UpstreamFailure) -> frozenset[str]:
    """Code names from the failure's fields, its ``x-amzn-errortype`` and its body's keys.

    Only values of code-like keys are read from the body (never free text), so a request
    echoed back inside an error cannot steer the verdict.
    """
    found = {part for part in (failure.type, failure.code) if part}
    found.update(value for name, value in failure.headers if name == "x-amzn-errortype")
    try:
        body = failure.body[:100_000].decode("utf-8", errors="replace")
    except Exception:  # a body of the wrong type: ignore it
        body = ""
    found.update(_BODY_CODE.findall(body))
    return frozenset(code.split(":", 1)[0].lower() for code in found)


def _minute_quota(text: str) -> bool:
    """A quota refusal whose quotas are all per-minute ones with a limit above 0 (Gemini's
    free tier): waiting refills it, so it is a rate limit, not a billing problem."""
    return p.MINUTE_QUOTA.search(text) is not None and p.LASTING_QUOTA.search(text) is None


def _too_large_for_rate(text: str) -> bool:
    """A single request over a per-minute budget (requested > limit), not a busy minute."""
    if not p.PER_MINUTE.search(text):
        return False
    if p.TOO_LARGE_FOR_RATE.search(text):
        return True
    match = p.LIMIT_REQUESTED.search(text)
    if match is None:
        return False
    try:
        limit, requested = (int(group.replace(",", "")) for group in match.groups())
    except ValueError:
        return False
    return requested > limit
