"""classify(): every real record of provider-errors.jsonl, traps, and invented wordings."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.providers.errors import failure_from_http
from gateway.providers.failure import UpstreamFailure
from gateway.recovery.classifier import Verdict, classify, explain

DATA = Path(__file__).resolve().parents[1] / "data" / "provider-errors.jsonl"

S, M, OV, R, T, F = (
    Verdict.STRUCTURAL,
    Verdict.MEDIA,
    Verdict.OVERFLOW,
    Verdict.REQUEST_TOO_LARGE,
    Verdict.TRANSIENT,
    Verdict.FATAL,
)

# What each situation of the file means for the ladder.
BY_SITUATION: dict[str, frozenset[Verdict]] = {
    **{situation: frozenset({S}) for situation in "abcdefg"},
    "h": frozenset({M}),
    "i": frozenset({OV, R}),
    "j": frozenset({T}),
}

# Records whose verdict is not their situation's, each checked against its provider so a
# changed copy of the file fails loudly instead of silently shifting the table.
EXCEPTIONS: dict[int, tuple[str, Verdict, str]] = {
    # 429s that waiting will not fix (situation j "known traps").
    107: ("gemini", F, "exceeded your current quota / check your plan and billing"),
    111: ("openai", F, "insufficient_quota"),
    120: ("moonshot", F, "exceeded_current_quota_error: insufficient balance"),
    # (125, Gemini's "exceeded your current quota" naming only a per-minute quotaId, is a
    # wait: its situation's transient verdict.)
    126: ("openai", F, "insufficient_quota"),
    127: ("groq", F, "tokens per day (TPD): a daily quota, 'try again in 9m38s'"),
    128: ("deepseek", F, "docs table naming '402 - Insufficient Balance' next to the 429 row"),
    # Situation "shape" records: body-shape samples, each read on its own.
    133: ("openai", F, "tool_calls array above max length: no ladder step shortens it"),
    134: ("deepseek", F, "missing reasoning_content: the gateway cannot invent reasoning"),
    135: ("groq", F, "tool_use_failed: a model-generation failure, not request structure"),
    136: ("vllm", OV, "maximum context length"),
    137: ("mistral", S, "tool call id format"),
    138: ("ollama-openai", F, "Go source of the error shape; no meaning"),
    139: ("moonshot", F, "reasoning_content missing in thinking mode"),
    140: ("azure-ai-inference", S, "424, missing tool_calls[0].type: the strict rung types it"),
    141: ("groq", F, "tool call validation failed: model output did not match the schema"),
    142: ("deepseek", F, "reasoning_content must be passed back"),
    143: ("groq", S, "tool message without tool_call_id"),
    144: ("vllm", F, "legacy function_call field of the wrong type"),
    145: ("anthropic", S, "unexpected role 'system'"),
    146: ("vllm", F, "pydantic source of the error shape; no meaning"),
    147: ("gemini", S, "invalid role"),
}

AWS_STATUS = {
    "validationexception": 400,
    "throttlingexception": 429,
    "servicequotaexceededexception": 429,
    "serviceunavailableexception": 503,
    "modelerrorexception": 500,
    "internalserverexception": 500,
    "modeltimeoutexception": 408,
    "accessdeniedexception": 403,
    "resourcenotfoundexception": 404,
}


def status_of(raw: Any) -> int:
    """The int status of a record: the number itself, a leading number, or an AWS name.

    Records without either (an Anthropic batch result "errored") are client errors: 400.
    """
    if isinstance(raw, int):
        return raw
    text = str(raw).strip()
    match = re.match(r"(\d{3})\b", text)
    if match:
        return int(match.group(1))
    name = re.match(r"[A-Za-z]+", text)
    if name and name.group(0).lower() in AWS_STATUS:
        return AWS_STATUS[name.group(0).lower()]
    return 400


def _load() -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, line in enumerate(DATA.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            rows.append((number, json.loads(line)))
    return rows


RECORDS = _load()


def _failure(record: dict[str, Any]) -> UpstreamFailure:
    return failure_from_http(
        status_of(record["status"]), {}, record["body"].encode(), record["provider"]
    )


def _expected(number: int, record: dict[str, Any]) -> frozenset[Verdict]:
    if number in EXCEPTIONS:
        provider, verdict, _why = EXCEPTIONS[number]
        assert record["provider"] == provider, f"line {number} changed: update EXCEPTIONS"
        return frozenset({verdict})
    assert record["situation"] in BY_SITUATION, f"no expectation for line {number}"
    return BY_SITUATION[record["situation"]]


@pytest.mark.parametrize(
    ("number", "record"),
    RECORDS,
    ids=[f"{r['provider']}-{r['situation']}-L{n}" for n, r in RECORDS],
)
def test_every_record(number: int, record: dict[str, Any]) -> None:
    failure = _failure(record)
    # Situation h requests carried images; the others did not.
    verdict, rule = explain(failure, has_images=record["situation"] == "h")
    assert verdict in _expected(number, record), (
        f"line {number}: got {verdict} by {rule} for {failure.message[:200]!r}"
    )


def test_the_table_covers_the_whole_file() -> None:
    assert len(RECORDS) >= 147
    assert {r["situation"] for _, r in RECORDS} <= set(BY_SITUATION) | {"shape"}


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (400, 400),
        ("ValidationException", 400),
        ("ValidationException (HTTP status not shown in source)", 400),
        ("400 (status not shown)", 400),
        ("429/529/500 (docs)", 429),
        ("ThrottlingException", 429),
        ("ServiceUnavailableException", 503),
        ("ModelErrorException", 500),
        ("errored (batch result)", 400),
    ],
)
def test_status_helper(raw: Any, status: int) -> None:
    assert status_of(raw) == status


def test_media_records_are_media_even_without_the_image_flag() -> None:
    without = {
        number
        for number, record in RECORDS
        if record["situation"] == "h" and classify(_failure(record)) is not M
    }
    # Only DeepSeek's "did not match any variant of ... ChatCompletionRequestContent" needs
    # to know the request had images: alone it is just an undecodable content field.
    assert without == {79}
    assert classify(_failure(RECORDS[78][1])) is F


@pytest.mark.parametrize("number", [89, 101])
def test_bedrock_input_too_long_is_media_first_when_the_request_has_images(number: int) -> None:
    failure = _failure(RECORDS[number - 1][1])
    assert classify(failure) is OV
    assert classify(failure, has_images=True) is M


def test_an_overflow_that_names_tokens_stays_overflow_with_images() -> None:
    failure = _failure(RECORDS[86][1])  # "prompt is too long: 219898 tokens > 200000 maximum"
    assert classify(failure, has_images=True) is OV


def test_a_413_worded_as_an_overflow_is_media_first_when_the_request_has_images() -> None:
    # "Request size exceeds model context window" (413), a pasted screenshot: degrading
    # the image can rescue it, then compaction (request_too_large's rungs).
    failure = _failure(RECORDS[96][1])
    assert failure.status == 413
    assert classify(failure) is OV
    assert classify(failure, has_images=True) is R


@pytest.mark.parametrize("message", [
    "Unable to download the file. Please verify the URL and try again.",
    "Timeout while downloading https://example.com/a.png.",
])
def test_a_url_the_provider_could_not_download_is_media_only_with_images(message: str) -> None:
    body = json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                  "message": message}})
    failure = failure_from_http(400, {}, body.encode(), "anthropic")
    assert classify(failure, has_images=True) is M
    assert classify(failure) is not M  # no image: nothing for the media rung to do


# --- traps -------------------------------------------------------------------------------


def _f(status: int, message: str, **kw: Any) -> UpstreamFailure:
    return UpstreamFailure(status=status, provider="test", message=message, **kw)


def test_rate_limit_wording_vetoes_overflow() -> None:
    failure = _f(429, "This request would exceed the rate limit of 20,000 input tokens per "
                 "minute. Please reduce the prompt length or try again later.")
    assert classify(failure) is T


def test_a_request_over_the_per_minute_budget_is_request_too_large_not_transient() -> None:
    # Retrying the same request can never fit a 6000 TPM budget; a smaller one can.
    over = _f(429, "Rate limit reached on tokens per min (TPM): Limit 6000, Requested 10338.")
    under = _f(429, "Rate limit reached on tokens per min (TPM): Limit 30000, Used 28039, "
               "Requested 3906. Please try again in 3.89s.")
    assert classify(over) is R
    assert classify(under) is T


def test_context_limit_with_limit_and_requested_numbers_is_overflow() -> None:
    failure = _f(400, "Your request exceeded model token limit: 262144 (requested: 269030)")
    assert classify(failure) is OV


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (413, R),
        (408, T),
        (429, T),
        (500, T),
        (502, T),
        (503, T),
        (504, T),
        (529, T),
        (599, T),
        (400, F),
        (422, F),
        (401, F),
        (403, F),
        (404, F),
        (409, F),
    ],
)
def test_status_decides_when_the_text_is_silent(status: int, verdict: Verdict) -> None:
    assert classify(_f(status, "Something went wrong.")) is verdict


def test_auth_and_not_found_statuses_are_fatal_whatever_the_text() -> None:
    assert classify(_f(401, "rate limit exceeded, try again later")) is F
    assert classify(_f(404, "The model `gpt-image-1` does not exist")) is F


def test_should_retry_overrides() -> None:
    assert classify(_f(529, "Overloaded", should_retry=False)) is F
    assert classify(_f(503, "", should_retry=False)) is F
    assert classify(_f(400, "Something went wrong.", should_retry=True)) is T
    # It only flips transient/fatal: a structural refusal stays structural.
    assert classify(_f(400, "roles must alternate", should_retry=False)) is S
    assert explain(_f(529, "Overloaded", should_retry=False))[1] == "overloaded+should_retry=false"


def test_aws_error_type_header_is_a_code() -> None:
    failure = failure_from_http(400, {"x-amzn-ErrorType": "ThrottlingException:http://x"},
                                b"{}", "bedrock")
    assert failure.code == "ThrottlingException"
    assert classify(failure) is T


def test_codes_in_the_body_count_but_echoed_request_text_does_not() -> None:
    coded = json.dumps({"error": {"message": "...", "type": "BadRequestError", "code": 400},
                        "detail": {"code": "context_length_exceeded"}}).encode()
    echoed = json.dumps({"error": {"message": "Invalid value for 'input'",
                                   "input": '{"code": "context_length_exceeded"}'}}).encode()
    assert classify(failure_from_http(400, {}, coded, "vllm")) is OV
    assert classify(failure_from_http(400, {}, echoed, "x")) is F


# --- generalization: invented wordings from providers not in the file --------------------

INVENTED = [
    ("openai-empty-array", 400, "Invalid 'messages[1].tool_calls': empty array. Expected an "
     "array with minimum length 1, but got an empty array instead.", S),
    ("anthropic-native", 400, 'messages: first message must use the "user" role', S),
    ("generic", 400, "The final turn must be from the user, got assistant", S),
    ("generic", 400, "Conversation must begin with a human turn", S),
    ("cohere", 400, "invalid request: tool result for call 'get_weather_1' has no matching "
     "tool call in the previous message", S),
    ("xai", 400, "Each tool_call_id in a tool message must match a tool call in the preceding "
     "assistant message.", S),
    ("vertex-claude", 400, "messages.5: `tool_result` block(s) provided when previous message "
     "does not send `tool_use` block(s)", S),
    ("perplexity", 400, "After the (optional) system message(s), user and assistant roles "
     "should be alternating.", S),
    ("fireworks", 400, "Messages must alternate between 'user' and 'assistant' roles", S),
    ("azure-ai", 400, "The message at index 3 has an empty content field.", S),
    ("together", 400, "Duplicate tool call id 'call_1' found in messages[4]", S),
    ("cohere", 400, "invalid request: image size exceeds maximum of 5MB", M),
    ("replicate", 400, "Unsupported image format: image/heic. Supported formats: jpeg, png", M),
    ("fireworks", 400, "Failed to decode the provided base64 payload for content[1]", M),
    ("cohere", 400, "too many tokens: total number of tokens in the prompt cannot exceed 4081 - "
     "received 5205. Try using a shorter prompt", OV),
    ("together", 400, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= "
     "8193. Given: 9000 `inputs` tokens and 512 `max_new_tokens`", OV),
    ("fireworks", 400, "The prompt is too long: 40000, model maximum context length: 32768", OV),
    ("cloudflare", 413, "Payload Too Large", R),
    ("together", 429, "You have reached the rate limit specific to this model. The maximum rate "
     "limit for this model is 60.0 queries and 180000 tokens per minute.", T),
    ("fireworks", 503, "Server is currently experiencing high load, please try again later", T),
    ("openrouter", 502, "upstream connect error or disconnect/reset before headers. reset "
     "reason: connection failure", T),
    ("openrouter", 429, "Insufficient credits. Add more using https://openrouter.ai/credits", F),
    ("anthropic-like", 400, "Your credit balance is too low to access the API.", F),
    ("anthropic", 429, "You have reached your specified API usage limits. You will regain "
     "access on 2027-01-01 at 00:00 UTC.", F),
    ("bedrock", 400, "The maximum tokens you requested exceeds the model limit of 64000. "
     "Try again with a maximum tokens value that is lower than 64000.", F),
    ("anthropic", 400, "max_tokens: 64000 > 32000, which is the maximum allowed number of "
     "output tokens for claude-opus-4-1", F),
    ("azure-like", 400, "The response was filtered due to the prompt triggering Azure OpenAI's "
     "content management policy.", F),
    ("generic", 400, "Request contains an invalid argument.", F),
    ("openai-like", 429, "Rate limit reached for gpt-image-1 in organization org-x on images "
     "per minute. Please try again in 1s.", T),
]


@pytest.mark.parametrize(
    ("provider", "status", "message", "verdict"),
    INVENTED,
    ids=[f"{p}-{s}-{v.value}-{i}" for i, (p, s, _m, v) in enumerate(INVENTED)],
)
def test_invented_wordings(provider: str, status: int, message: str, verdict: Verdict) -> None:
    failure = UpstreamFailure(status=status, provider=provider, message=message)
    assert classify(failure) is verdict, explain(failure)


def test_a_spend_limit_named_only_in_the_details_is_fatal_on_a_429() -> None:
    body = (b'{"type":"error","error":{"type":"rate_limit_error","message":"Rate limited.",'
            b'"details":{"error_code":"enforced_spend_limit_reached"}}}')
    assert classify(failure_from_http(429, {}, body, "anthropic")) is F


def test_a_plan_usage_limit_code_is_fatal_on_a_429() -> None:
    body = (b'{"error":{"message":"The usage limit has been reached","type":'
            b'"usage_limit_reached","code":"usage_limit_reached","param":null}}')
    assert classify(failure_from_http(429, {}, body, "openai")) is F


def test_an_image_code_on_a_client_error_outweighs_timeout_wording() -> None:
    body = (b'{"error":{"message":"Timeout while downloading https://x.invalid/a.png.",'
            b'"type":"invalid_request_error","param":"url","code":"invalid_image_url"}}')
    assert classify(failure_from_http(400, {}, body, "openai"), has_images=True) is M


def test_verdict_is_a_string_enum() -> None:
    assert Verdict("request_too_large") is R
    assert f"{Verdict.MEDIA}" == "media"
    assert isinstance(Verdict.FATAL, str)


@settings(max_examples=150, deadline=None)
@given(
    status=st.integers(min_value=0, max_value=999),
    message=st.text(max_size=300),
    code=st.none() | st.text(max_size=30),
    body=st.binary(max_size=300),
    should_retry=st.none() | st.booleans(),
    has_images=st.booleans(),
)
def test_classify_always_answers(
    status: int, message: str, code: str | None, body: bytes, should_retry: bool | None,
    has_images: bool,
) -> None:
    failure = UpstreamFailure(status=status, provider="fuzz", message=message, code=code,
                              body=body, should_retry=should_retry)
    verdict = classify(failure, has_images=has_images)
    assert verdict in set(Verdict)
    if should_retry is False:
        assert verdict is not T


@pytest.mark.parametrize("message", [
    "messages.0.content.0.pdf: A maximum of 100 PDF pages may be provided.",
    "messages.2.content.1.document.source.base64.data: The PDF specified was not valid.",
    "Could not process PDF: the file is password protected",
])
def test_a_pdf_the_provider_cannot_read_is_media(message: str) -> None:
    """A refusal naming the PDF sent takes the media rung (which leaves out the documents
    of earlier turns), with or without images in the request."""
    body = json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                  "message": message}})
    failure = failure_from_http(400, {}, body.encode(), "anthropic")
    assert classify(failure) is M
    assert explain(failure, has_images=True)[0] is M
