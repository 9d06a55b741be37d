"""A held-out round on the classifier: provider refusals as the providers send them.

Each case is a status, the headers that matter and the body byte for byte as the provider
(or the proxy in front of it) sends it, through ``failure_from_http`` and ``explain`` as the
gateway reads them. None of the wordings is in tests/data/provider-errors.jsonl or the other
classifier tests; where a wording is a real one, the comment names where it was seen.
The verdict is the rung the ladder takes: structural -> strict projection, media -> degraded
media, request_too_large -> degraded media then compaction, overflow -> compaction,
transient -> backoff (honouring the retry headers), fatal -> give up with the provider's error.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.providers.errors import failure_from_http, ratelimit_reset
from gateway.recovery.classifier import Verdict, explain
from gateway.recovery.ladder import GiveUp, Ladder, RecoveryPolicy

S, M, OV, R, T, F = (Verdict.STRUCTURAL, Verdict.MEDIA, Verdict.OVERFLOW,
                     Verdict.REQUEST_TOO_LARGE, Verdict.TRANSIENT, Verdict.FATAL)


def j(value: Any) -> str:
    """Compact JSON, as most providers send it."""
    return json.dumps(value, separators=(",", ":"))


def anthropic(message: str, kind: str = "invalid_request_error") -> str:
    return j({"type": "error", "error": {"type": kind, "message": message},
              "request_id": "req_011CZq4mWq9bT3"})


def openai(message: str, kind: str | None = "invalid_request_error", *,
           param: str | None = None, code: str | None = None) -> str:
    return j({"error": {"message": message, "type": kind, "param": param, "code": code}})


def google(code: int, message: str, status: str, *details: Any) -> str:
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = list(details)
    return json.dumps({"error": error}, indent=2)


def openrouter(status: int, raw: str, provider: str) -> str:
    return j({"error": {"message": "Provider returned error", "code": status,
                        "metadata": {"raw": raw, "provider_name": provider}},
              "user_id": "user_2x9Qk"})


def mistral(message: str, kind: str, code: str) -> str:
    return j({"object": "error", "message": message, "type": kind, "param": None, "code": code})


def vllm(message: str, kind: str = "BadRequestError", code: int = 400) -> str:
    return j({"object": "error", "message": message, "type": kind, "param": None, "code": code})


def litellm(message: str, code: str) -> str:
    return j({"error": {"message": message, "type": None, "param": None, "code": code}})


AWS = {"x-amzn-errortype": "ValidationException:http://internal.amazon.com/coral/com.amazon"
       ".bedrock/", "x-amzn-requestid": "4c1e8a52-0f7e-4f0e-9d3a-2b6f0a1c7d55"}


def aws(kind: str) -> dict[str, str]:
    return {**AWS, "x-amzn-errortype": f"{kind}:http://internal.amazon.com/coral/"}


NGINX_413 = ("<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n"
             "<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>nginx/1.24.0"
             "</center>\r\n</body>\r\n</html>\r\n")

# (name, status, headers, body, request had images, verdict)
Case = tuple[str, int, dict[str, str], str, bool, Verdict]

CASES: list[Case] = [
    # --- structural history 400s: strict projection ----------------------------------------
    ("anthropic-tool-use-id-pattern", 400, {},
     # Anthropic's pydantic-style path error on an id minted by another provider
     # ("messages.1.content.1.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'",
     # seen in claude-code / litellm issues).
     anthropic("messages.5.content.1.tool_use.id: String should match pattern "
               "'^[a-zA-Z0-9_-]+$'"), False, S),
    ("bedrock-tool-use-id-constraint", 400, AWS,
     # AWS's constraint wording, on a Converse toolUseId.
     j({"message": "1 validation error detected: Value 'call_9f/2' at 'messages.3.member"
                   ".content.2.member.toolUse.toolUseId' failed to satisfy constraint: Member "
                   "must satisfy regular expression pattern: [a-zA-Z0-9_-]+"}), False, S),
    ("azure-tool-call-id-too-long", 400, {"apim-request-id": "0b1c"},
     # OpenAI/Azure cap tool call ids at 40 characters ("string too long" on an id is not
     # a context overflow).
     openai("Invalid 'messages[3].tool_calls[0].id': string too long. Expected a string "
            "with maximum length 40, but got a string with length 58 instead.",
            param="messages[3].tool_calls[0].id", code="string_above_max_length"), False, S),
    ("gemini-multiturn-alternate", 400, {},
     google(400, "Please ensure that multiturn requests alternate between user and model.",
            "INVALID_ARGUMENT"), False, S),
    ("mistral-assistant-without-content-or-calls", 400, {},
     mistral("Assistant message must have either content or tool_calls, but not none.",
             "invalid_request_message_order", "3230"), False, S),
    ("cohere-empty-message", 400, {},
     # Cohere v1 chat, kwaroran/Risuai#504.
     j({"message": "invalid request: message must be at least 1 token long or tool results "
                   "must be specified."}), False, S),
    ("cohere-v2-calls-without-results", 400, {},
     j({"id": "5f0c7a2e-9a43-4a65-bd0e-8b7f3f2b1d10", "message": "invalid request: all tool "
        "calls must have a corresponding tool result, got 1 tool calls and 0 tool results"}),
     False, S),
    ("openrouter-xiaomi-empty-assistant", 400, {},
     # OpenRouter wrapping Xiaomi MiMo, farion1231/cc-switch#464.
     openrouter(400, j({"error": {"code": "400", "message": "Param Incorrect", "param":
                       "messages[2] assistant content must contain at least one part",
                       "type": ""}}), "Xiaomi"), False, S),
    ("litellm-anthropic-tool-use-without-result", 400, {},
     litellm("litellm.BadRequestError: AnthropicException - " + anthropic(
         "messages.14: `tool_use` ids were found without `tool_result` blocks immediately "
         "after: toolu_01QkT. Each `tool_use` block must have a corresponding `tool_result` "
         "block in the next message.") + "\nReceived Model Group=claude-sonnet\nAvailable "
         "Model Group Fallbacks=None", "400"), False, S),
    ("tgi-template-roles", 422, {},
     j({"error": "Template error: Conversation roles must alternate user/assistant/user/"
                 "assistant/... (in <string>:1)", "error_type": "template_error"}), False, S),
    ("together-duplicate-call-id", 400, {},
     j({"id": "o3Fq2", "error": {"message": "messages[6]: tool_call_id 'call_0' appears more "
        "than once; each tool result must answer a distinct tool call", "type":
        "invalid_request_error", "param": None, "code": None}}), False, S),
    ("xai-tool-message-without-call", 400, {},
     j({"code": "Client specified an invalid argument", "error": "Tool message at index 4 does "
        "not reference a tool call made by the preceding assistant message"}), False, S),

    # --- media: degraded (then strip) -----------------------------------------------------
    ("openrouter-one-image-per-prompt", 400, {},
     # OpenRouter wrapping Crucible, diegosouzapw/OmniRoute#3044.
     openrouter(400, j({"error": {"type": "invalid_request_error", "code":
                       "invalid_request_error", "message": "Model 'moonshotai/kimi-k2.6' "
                       "supports at most 1 image per prompt.", "request_id": "req_x"}}),
                "Crucible"), True, M),
    ("xai-unsupported-image-content-type", 400, {},
     j({"code": "Client specified an invalid argument", "error": "Unsupported content-type "
        "encountered when downloading image. Supported content types are image/jpeg, "
        "image/jpg, image/png."}), True, M),
    ("vllm-pil-decode", 400, {},
     vllm("Failed to load the multimodal data: cannot identify image file <_io.BytesIO object "
          "at 0x7f3a2c1d5e40>"), True, M),
    ("ollama-native-bad-base64", 400, {},
     j({"error": "illegal base64 data at input byte 12"}), True, M),
    ("llamacpp-no-mmproj", 500, {},
     # llama.cpp server without a projector answers an image with a 500 (server_error).
     j({"error": {"code": 500, "message": "image input is not supported - hint: if this is "
        "unexpected, you may need to provide the mmproj", "type": "server_error"}}), True, M),
    ("lmstudio-text-only-model", 400, {},
     j({"error": "Model does not support images. Please use a model that does."}), True, M),
    ("gemini-invalid-image", 400, {},
     google(400, "Provided image is not valid.", "INVALID_ARGUMENT"), True, M),
    ("bedrock-too-many-images", 400, AWS,
     j({"message": "The model returned the following errors: too many images: 25 > 20"}),
     True, M),
    ("nginx-413-html-with-images", 413, {"content-type": "text/html"}, NGINX_413, True, R),
    ("anthropic-request-too-large-no-images", 413, {},
     anthropic("Request exceeds the maximum allowed number of bytes.", "request_too_large"),
     False, R),

    # --- context overflow: compaction -----------------------------------------------------
    ("anthropic-input-and-max-tokens", 400, {},
     anthropic("input length and `max_tokens` exceed context limit: 188193 + 20000 > 200000, "
               "decrease input length or `max_tokens` and try again"), False, OV),
    ("llamacpp-500-context-size", 500, {},
     # llama.cpp answers some overflows with a 500 server_error (ggml-org/llama.cpp#19774).
     j({"error": {"code": 500, "message": "Context size has been exceeded.",
                  "type": "server_error"}}), False, OV),
    ("llamacpp-exceeds-available-context", 400, {},
     # ggml-org/llama.cpp#17284 / oobabooga/textgen#7257.
     j({"error": {"code": 400, "message": "the request exceeds the available context size. "
        "try increasing the context size or enable context shift", "type":
        "exceed_context_size_error", "n_prompt_tokens": 14429, "n_ctx": 8192}}), False, OV),
    ("cohere-size-limit-exceeded", 400, {},
     j({"id": "c0a8e1", "message": "too many tokens: size limit exceeded by 11241 tokens. Try "
        "using shorter or fewer inputs, or setting prompt_truncation='AUTO'."}), False, OV),
    ("mistral-too-large-for-model", 400, {},
     mistral("Prompt contains 40125 tokens and 0 draft tokens, too large for model with "
             "32768 maximum context length", "invalid_request_error", "3051"), False, OV),
    ("bedrock-nova-input-tokens", 400, AWS,
     j({"message": "The model returned the following errors: Input Tokens Exceeded: Number of "
                   "input tokens exceeds maximum length. Please reduce your input."}),
     False, OV),
    ("litellm-context-window-exceeded", 400, {},
     litellm("litellm.ContextWindowExceededError: litellm.BadRequestError: "
             "ContextWindowExceededError: DeepseekException - This model's maximum context "
             "length is 65536 tokens. However, you requested 71022 tokens (62830 in the "
             "messages, 8192 in the completion). Please reduce the length of the messages or "
             "completion.\nmodel=deepseek-chat", "400"), False, OV),
    ("azure-ai-characters", 400, {},
     openai("Invalid request: the total length of the messages is 2104332 characters, which "
            "exceeds the limit of 2000000 characters.", param="messages"), False, OV),
    ("vllm-max-tokens-with-room", 400, {},
     # vLLM 0.9+: the completion budget fits the window, the input does not (compaction helps).
     vllm("'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum "
          "context length is 32768 tokens and your request has 30550 input tokens (4096 > "
          "32768 - 30550). None"), False, OV),
    ("openai-messages-over-the-window", 400, {},
     openai("This model's maximum context length is 128000 tokens. However, you requested "
            "131096 tokens (126000 in the messages, 5096 in the completion). Please reduce the "
            "length of the messages or completion.", param="messages",
            code="context_length_exceeded"), False, OV),
    ("gemini-openai-compat-list", 400, {},
     j([{"error": {"code": 400, "message": "The input token count (1097431) exceeds the "
        "maximum number of tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}}]),
     False, OV),

    # --- transient: backoff ---------------------------------------------------------------
    ("anthropic-529-retry-after", 529, {"retry-after": "3", "x-should-retry": "true"},
     anthropic("Overloaded", "overloaded_error"), False, T),
    ("anthropic-429-per-minute-reduce-prompt", 429, {"retry-after": "12"},
     # Anthropic's per-minute token limit names tokens and "reduce the prompt": still a wait.
     anthropic("This request would exceed the rate limit for your organization of 80,000 "
               "input tokens per minute. For details, refer to the rate limits docs. You can "
               "see the response headers for current usage. Please reduce the prompt length or "
               "the maximum tokens requested, or try again later.", "rate_limit_error"),
     False, T),
    ("azure-429-retry-after", 429, {"retry-after": "6", "x-ratelimit-remaining-tokens": "0"},
     j({"error": {"code": "429", "message": "Requests to the ChatCompletions_Create Operation "
        "under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your "
        "current OpenAI S0 pricing tier. Please retry after 6 seconds. Please go here: "
        "https://aka.ms/oai/quotaincrease if you would like to further increase the default "
        "rate limit."}}), False, T),
    ("bedrock-throttling", 429, aws("ThrottlingException"),
     j({"message": "Too many tokens, please wait before trying again."}), False, T),
    ("bedrock-model-stream-error", 424, aws("ModelStreamErrorException"),
     j({"message": "The model stopped generating unexpectedly. Please retry your request.",
        "originalStatusCode": 500}), False, T),
    ("bedrock-stream-error-event-without-header", 424, {},
     # The same exception relayed as a stream event's JSON, without x-amzn-errortype.
     j({"message": "The model stopped generating unexpectedly. Please retry your request.",
        "originalStatusCode": 424}), False, T),
    ("bedrock-service-unavailable", 503, aws("ServiceUnavailableException"),
     j({"message": "Service is not available. Please retry your request."}), False, T),
    ("vertex-deadline", 504, {},
     google(504, "Deadline expired before operation could complete.", "DEADLINE_EXCEEDED"),
     False, T),
    ("vertex-claude-per-minute-quota", 429, {},
     # Vertex's per-minute prediction quota (refills in the minute), not a billing problem.
     google(429, "Quota exceeded for aiplatform.googleapis.com/online_prediction_requests_per"
            "_base_model with base model: anthropic-claude-sonnet-4. Please submit a quota "
            "increase request. https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-"
            "genai.", "RESOURCE_EXHAUSTED"), False, T),
    ("mistral-service-tier-capacity", 429, {},
     mistral("Service tier capacity exceeded for this model.", "service_tier_capacity_exceeded",
             "3505"), False, T),
    ("groq-498-flex-capacity", 498, {},
     openai("Flex tier capacity exceeded. This means that the service is currently overloaded; "
            "please try again later.", code="capacity_exceeded"), False, T),
    ("openrouter-upstream-rate-limited", 429, {},
     # open-webui/computer#293: the reason is only in metadata.raw (plain text).
     openrouter(429, "z-ai/glm-4.6 is temporarily rate-limited upstream. Please retry "
                "shortly, or add your own key to accumulate your rate limits: https://"
                "openrouter.ai/settings/integrations", "Z.AI"), False, T),
    ("cloudflare-524-html", 524, {"content-type": "text/html; charset=UTF-8"},
     "<!DOCTYPE html>\n<html lang=\"en-US\"><head><title>api.example.ai | 524: A timeout "
     "occurred</title></head><body><h1>A timeout occurred</h1><p>The origin web server timed "
     "out responding to this request.</p></body></html>", False, T),
    ("cohere-trial-per-minute", 429, {},
     j({"id": "b7f1", "message": "You are using a Trial key, which is limited to 10 API calls "
        "/ minute. You can continue to use the Trial key for free or upgrade to a Production "
        "key with higher rate limits at 'https://dashboard.cohere.com/api-keys'."}),
     False, T),

    # --- nothing to repair: give up at once -------------------------------------------------
    ("openai-max-tokens-too-large", 400, {},
     # NextChat#3195: a parameter over the model's output cap, not an overflow.
     openai("max_tokens is too large: 100000. This model supports at most 16384 completion "
            "tokens, whereas you provided 100000.", param="max_tokens"), False, F),
    ("groq-max-tokens-over-limit", 400, {},
     openai("`max_tokens` must be less than or equal to `32768`, the maximum value for "
            "`max_tokens` is less than the `context_window` for this model",
            param="max_tokens"), False, F),
    ("vertex-max-output-tokens-range", 400, {},
     google(400, "Unable to submit request because it has a maxOutputTokens value of 100000 "
            "but the supported range is from 1 (inclusive) to 65537 (exclusive). Update the "
            "value and try again.", "INVALID_ARGUMENT"), False, F),
    ("vllm-max-tokens-over-window", 400, {},
     # No input fits beside a completion budget as large as the window.
     vllm("'max_tokens' or 'max_completion_tokens' is too large: 64000. This model's maximum "
          "context length is 32768 tokens and your request has 1200 input tokens (64000 > "
          "32768 - 1200). None"), False, F),
    ("openai-completion-fills-the-window", 400, {},
     # NextChat#3195: 64 tokens of messages, the completion takes the whole window. Worded
     # (and coded) as an overflow: its rung, compaction, is taken (and then gives up).
     openai("This model's maximum context length is 8192 tokens. However, you requested 8256 "
            "tokens (64 in the messages, 8192 in the completion). Please reduce the length of "
            "the messages or completion.", param="messages", code="context_length_exceeded"),
     False, OV),
    ("tgi-max-new-tokens", 422, {},
     j({"error": "Input validation error: `max_new_tokens` must be <= 4096. Given: 8000",
        "error_type": "validation"}), False, F),
    ("openai-unsupported-parameter", 400, {},
     openai("Unsupported parameter: 'max_tokens' is not supported with this model. Use "
            "'max_completion_tokens' instead.", param="max_tokens",
            code="unsupported_parameter"), False, F),
    ("anthropic-temperature-and-top-p", 400, {},
     anthropic("`temperature` and `top_p` cannot both be specified for this model. Please "
               "use only one."), False, F),
    ("azure-content-filter", 400, {},
     # compl-ai/compl-ai#20 (Azure's innererror shape).
     j({"error": {"message": "The response was filtered due to the prompt triggering Azure "
        "OpenAI's content management policy. Please modify your prompt and retry. To learn "
        "more about our content filtering policies please read our documentation: "
        "https://go.microsoft.com/fwlink/?linkid=2198766", "type": None, "param": "prompt",
        "code": "content_filter", "status": 400, "innererror": {
            "code": "ResponsibleAIPolicyViolation", "content_filter_result": {
                "hate": {"filtered": False, "severity": "safe"},
                "violence": {"filtered": True, "severity": "medium"}}}}}), False, F),
    ("litellm-azure-content-policy", 400, {},
     # BerriAI/litellm#16231.
     litellm("litellm.BadRequestError: litellm.ContentPolicyViolationError: litellm."
             "ContentPolicyViolationError: AzureException - The response was filtered due to "
             "the prompt triggering Azure OpenAI's content management policy. Please modify "
             "your prompt and retry.\nmodel=azure/gpt-4o. content_policy_fallback=None. "
             "fallbacks=None.", "400"), False, F),
    ("openai-429-insufficient-quota-with-retry-after", 429, {"retry-after": "1"},
     openai("You exceeded your current quota, please check your plan and billing details. "
            "For more information on this error, read the docs: https://platform.openai.com/"
            "docs/guides/error-codes/api-errors.", "insufficient_quota",
            code="insufficient_quota"), False, F),
    ("xai-429-spending-limit", 429, {},
     j({"code": "Some resource has been exhausted", "error": "Your team 3f1e has either used "
        "all available credits or reached its monthly spending limit. To continue making API "
        "requests, please purchase more credits or raise your spending limit."}), False, F),
    ("cohere-trial-per-month", 429, {},
     j({"id": "b7f2", "message": "You are using a Trial key, which is limited to 1000 API "
        "calls / month. You can continue to use the Trial key for free or upgrade to a "
        "Production key with higher rate limits at 'https://dashboard.cohere.com/api-keys'."}),
     False, F),
    ("deepseek-402-balance", 402, {},
     openai("Insufficient Balance", "unknown_error"), False, F),
    ("openrouter-402-credits", 402, {},
     j({"error": {"message": "This request requires more credits, or fewer max_tokens. You "
        "requested up to 4096 tokens, but can only afford 1523. To increase, visit https://"
        "openrouter.ai/settings/credits and upgrade to a paid account", "code": 402},
        "user_id": "user_2x9Qk"}), False, F),
    ("litellm-budget-exceeded", 400, {},
     j({"error": {"message": "Budget has been exceeded! Current cost: 10.21, Max budget: 10.0",
                  "type": "budget_exceeded", "param": None, "code": "400"}}), False, F),
    ("gemini-api-key-invalid-400", 400, {},
     google(400, "API key not valid. Please pass a valid API key.", "INVALID_ARGUMENT",
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID",
             "domain": "googleapis.com"}), False, F),
    ("gemini-location-precondition", 400, {},
     # PublicAffairs/openai-gemini#4.
     google(400, "User location is not supported for the API use.", "FAILED_PRECONDITION"),
     False, F),
    ("mistral-invalid-model", 400, {},
     mistral("Invalid model: mistral-huge-latest", "invalid_model", "1500"), False, F),
    ("azure-404-deployment-try-again", 404, {},
     j({"error": {"code": "DeploymentNotFound", "message": "The API deployment for this "
        "resource does not exist. If you created the deployment within the last 5 minutes, "
        "please wait a moment and try again."}}), False, F),
    ("ollama-404-pull", 404, {}, j({"error": "model \"llama3.3\" not found, try pulling it "
                                             "first"}), False, F),
    ("bedrock-access-denied", 403, aws("AccessDeniedException"),
     j({"Message": "You don't have access to the model with the specified model ID."}),
     False, F),
    ("nginx-400-html-header-too-large", 400, {"content-type": "text/html"},
     "<html>\r\n<head><title>400 Request Header Or Cookie Too Large</title></head>\r\n<body>"
     "\r\n<center><h1>400 Bad Request</h1></center>\r\n<center>Request Header Or Cookie Too "
     "Large</center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n", False, F),
    ("groq-json-failed-generation", 400, {},
     openai("Failed to generate JSON. Please adjust your prompt. See 'failed_generation' for "
            "more details.", code="json_validate_failed"), False, F),
]


@pytest.mark.parametrize(("name", "status", "headers", "body", "images", "expected"), CASES,
                         ids=[c[0] for c in CASES])
def test_the_refusal_takes_its_rung(name: str, status: int, headers: dict[str, str],
                                    body: str, images: bool, expected: Verdict) -> None:
    failure = failure_from_http(status, headers, body.encode(), name.split("-")[0])
    verdict, rule = explain(failure, has_images=images)
    assert verdict is expected, f"{name}: {verdict} by {rule}"


def test_there_are_enough_cases_of_every_kind() -> None:
    kinds = [c[5] for c in CASES]
    assert len(CASES) >= 45
    assert {v: kinds.count(v) >= 2 for v in Verdict} == dict.fromkeys(Verdict, True)


# --- the backoff honours what the provider said about waiting ------------------------------

def _ladder_after(status: int, headers: dict[str, str], body: str) -> tuple[Verdict, Any]:
    failure = failure_from_http(status, headers, body.encode(), "p")
    verdict, _ = explain(failure)
    ladder = Ladder(RecoveryPolicy(max_retry_after=30.0))
    return verdict, ladder.after_failure(ladder.first(), failure, verdict, elapsed=0.0)


@pytest.mark.parametrize(("headers", "wait"), [
    ({"retry-after": "3"}, 3.0),
    ({"retry-after-ms": "250", "retry-after": "1"}, 0.25),
    ({"retry-after": "Tue, 01 Dec 2020 00:00:07 GMT"}, 0.0),  # an HTTP date gone by
])
def test_the_retry_waits_what_the_headers_say(headers: dict[str, str], wait: float) -> None:
    verdict, plan = _ladder_after(529, headers, anthropic("Overloaded", "overloaded_error"))
    assert verdict is T and not isinstance(plan, GiveUp)
    assert plan.step == "retry"
    assert plan.delay == pytest.approx(wait)


@pytest.mark.parametrize(("headers", "wait"), [
    # OpenAI's own headers on a 429 without Retry-After: the reset of the limit used up.
    ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1.5s",
      "x-ratelimit-remaining-tokens": "88000", "x-ratelimit-reset-tokens": "6m0s"}, 1.5),
    ({"x-ratelimit-remaining-requests": "12", "x-ratelimit-reset-requests": "120ms",
      "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "2s"}, 2.0),
    # Groq's Retry-After wins over its reset headers.
    ({"retry-after": "4", "x-ratelimit-remaining-tokens": "0",
      "x-ratelimit-reset-tokens": "7.66s"}, 4.0),
])
def test_the_rate_limit_reset_headers_set_the_wait(headers: dict[str, str],
                                                   wait: float) -> None:
    body = openai("Rate limit reached for gpt-4.1 in organization org-x on requests per min "
                  "(RPM): Limit 500, Used 500, Requested 1.", "requests",
                  code="rate_limit_exceeded")
    verdict, plan = _ladder_after(429, headers, body)
    assert verdict is T and not isinstance(plan, GiveUp)
    assert plan.delay == pytest.approx(wait)


def test_a_retry_after_of_a_day_gives_up_instead_of_waiting() -> None:
    # TinyLLM#17: Azure's "Please retry after 86400 seconds" is a 429 no backoff can wait for.
    verdict, plan = _ladder_after(429, {"retry-after": "86400"}, j({"error": {
        "code": "429", "message": "Requests to the ChatCompletions_Create Operation under "
        "Azure OpenAI API version 2023-05-15 have exceeded token rate limit of your current "
        "AIServices S0 pricing tier. Please retry after 86400 seconds."}}))
    assert verdict is T
    assert isinstance(plan, GiveUp) and "exceeds" in plan.reason


@pytest.mark.parametrize(("headers", "wait"), [
    ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1h2m3.5s"}, 3723.5),
    ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "250ms"}, 0.25),
    ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "soon"}, None),
    ({"x-ratelimit-remaining-tokens": "5", "x-ratelimit-reset-tokens": "2s"}, None),
    ({"x-ratelimit-reset-tokens": "2s"}, None),  # no remaining count: which limit is unknown
    ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "-3"}, None),
])
def test_reading_the_reset_headers(headers: dict[str, str], wait: float | None) -> None:
    assert ratelimit_reset(headers) == (None if wait is None else pytest.approx(wait))
