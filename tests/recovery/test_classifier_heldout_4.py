"""A fourth held-out round on the classifier, by an outsider: refusals the earlier rounds did
not hold, in each provider's wire layout (Gemini's bodies wrapped in a list, Bedrock's bare
``message`` with its ``x-amzn-errortype``, OpenRouter's ``metadata.raw``, llama.cpp's
``n_prompt_tokens`` / ``n_ctx`` fields, LiteLLM's relabelled 500s, plain text and HTML pages
from the proxies in front of them, and errors inside a 200 stream).

Each case is the status, the headers that matter and the body as the provider sends it, read
through ``failure_from_http`` and ``explain`` as the gateway reads them. Where the wording
was seen in the field, the comment says where. The verdict is the rung: structural -> strict
projection, media -> degraded media, request_too_large -> degraded media then compaction,
overflow -> compaction, transient -> backoff, fatal -> give up and relay the provider's error.
The traps are refusals whose words look like another rung's ("context", "tokens", "try
again", "mime type", a 429 that is a bill, a 500 that is a lasting limit of the machine).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.compaction.window import OverflowNumbers, overflow_numbers
from gateway.providers.errors import failure_from_http
from gateway.providers.openai_compat import _failure_in_event
from gateway.recovery.classifier import Verdict, explain
from gateway.recovery.evidence import failure_texts
from gateway.recovery.ladder import GiveUp, Ladder, RecoveryPolicy
from gateway.recovery.output_budget import fit_output_budget

S, M, OV, R, T, F = (Verdict.STRUCTURAL, Verdict.MEDIA, Verdict.OVERFLOW,
                     Verdict.REQUEST_TOO_LARGE, Verdict.TRANSIENT, Verdict.FATAL)


def j(value: Any) -> str:
    """Compact JSON, as most providers send it."""
    return json.dumps(value, separators=(",", ":"))


def openai(message: str, kind: str | None = "invalid_request_error", *,
           param: str | None = None, code: str | None = None) -> str:
    return j({"error": {"message": message, "type": kind, "param": param, "code": code}})


def anthropic(message: str, kind: str = "invalid_request_error") -> str:
    return j({"type": "error", "error": {"type": kind, "message": message},
              "request_id": "req_011CVa7q2mXb9kR4"})


def gemini_list(code: int, message: str, status: str, *details: Any) -> str:
    """Gemini's REST body as its streaming endpoint sends it: the error inside a list."""
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = list(details)
    return json.dumps([{"error": error}], indent=2)


def openrouter(status: int, raw: str, provider: str) -> str:
    return j({"error": {"message": "Provider returned error", "code": status,
                        "metadata": {"raw": raw, "provider_name": provider}},
              "user_id": "user_4Tq8Zr"})


def llamacpp(code: int, message: str, kind: str, **extra: Any) -> str:
    return j({"error": {"code": code, "message": message, "type": kind, **extra}})


def litellm(message: str, code: str) -> str:
    return j({"error": {"message": message, "type": None, "param": None, "code": code}})


def aws(kind: str) -> dict[str, str]:
    return {"x-amzn-errortype": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/",
            "x-amzn-requestid": "3e7c9a52-81f0-4d6b-a2c4-0b5d7e19f3a8"}


HTML = {"content-type": "text/html; charset=UTF-8"}
TEXT = {"content-type": "text/plain"}

GFE_502 = (
    "<!DOCTYPE html>\n<html lang=en>\n  <meta charset=utf-8>\n  <meta name=viewport content="
    "\"initial-scale=1, minimum-scale=1, width=device-width\">\n  <title>Error 502 (Server "
    "Error)!!1</title>\n  <a href=//www.google.com/><span id=logo aria-label=Google></span></a>"
    "\n  <p><b>502.</b> <ins>That’s an error.</ins>\n  <p>The server encountered a temporary "
    "error and could not complete your request.<p>Please try again in 30 seconds.  <ins>That’s "
    "all we know.</ins>\n")
NGINX_429 = ("<html>\r\n<head><title>429 Too Many Requests</title></head>\r\n<body>\r\n<center>"
             "<h1>429 Too Many Requests</h1></center>\r\n<hr><center>nginx/1.25.3</center>\r\n"
             "</body>\r\n</html>\r\n")
ALB_503 = ("<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n<body>"
           "\r\n<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n</body>\r\n"
           "</html>\r\n")

# (name, status, headers, body, request had images, verdict)
Case = tuple[str, int, dict[str, str], str, bool, Verdict]

CASES: list[Case] = [
    # --- structural: strict projection -----------------------------------------------------
    ("gemini-list-function-call-turn-order", 400, {},
     # The turn-order rule of Gemini, in the list its streaming endpoint wraps errors in.
     gemini_list(400, "Please ensure that function call turn comes immediately after a user "
                 "turn or after a function response turn.", "INVALID_ARGUMENT"), False, S),
    ("bedrock-converse-blank-text-field", 400, aws("ValidationException"),
     # continuedev/continue#9767 (ConverseStream on a history with an empty text block).
     j({"message": "The text field in the ContentBlock object at messages.11.content.0 is "
                   "blank. Add text to the text field, and try again."}), False, S),
    ("bedrock-converse-non-whitespace-text", 400, aws("ValidationException"),
     # NousResearch/hermes-agent#63983: Bedrock's newer rule, a single space is refused too.
     j({"message": "The model returned the following errors: messages: text content blocks "
                   "must contain non-whitespace text"}), False, S),
    ("openrouter-bedrock-conversation-starts-assistant", 400, {},
     openrouter(400, j({"message": "A conversation must start with a user message. Try again "
                                   "with a conversation that starts with a user message."}),
                "Amazon Bedrock"), False, S),
    ("mistral-expected-last-role", 400, {},
     j({"object": "error", "message": "Expected last role User or Tool (or Assistant with "
        "prefix True) for serving but got assistant", "type": "invalid_request_message_order",
        "param": None, "code": "3230"}), False, S),
    ("anthropic-tool-result-not-first", 400, {},
     anthropic("messages.2: `tool_result` block(s) provided when previous message does not "
               "contain any `tool_use` blocks"), False, S),
    ("groq-tool-message-without-call-id", 400, {},
     openai("'messages.3' : for 'role:tool' the following must be satisfied[('messages.3."
            "tool_call_id' : property 'tool_call_id' is missing)]"), False, S),

    ("xai-message-without-content-element", 400, {},
     j({"code": "Client specified an invalid argument", "error": "Each message must have at "
        "least one content element."}), False, S),
    ("bedrock-expected-tool-result-ids", 400, aws("ValidationException"),
     j({"message": "Expected toolResult blocks at messages.4.content for the following Ids: "
                   "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"}), False, S),
    ("cohere-tool-message-id-not-found", 400, {},
     j({"id": "5d1e", "message": "invalid request: tool call id 'call_9' in tool message not "
        "found in previous assistant message tool calls"}), False, S),

    # --- media: degraded (then strip) ------------------------------------------------------
    ("gemini-list-unsupported-mime-type", 400, {},
     # A MIME type of an *input* (an iPhone photo): still media after the response-MIME trap.
     gemini_list(400, "Unsupported MIME type: image/heic", "INVALID_ARGUMENT"), True, M),
    ("anthropic-image-media-type-mismatch", 400, {},
     anthropic("messages.0.content.1.image.source.base64.data: The image was specified using "
               "the image/jpeg media type, but the image appears to be a image/png image"),
     True, M),
    ("ollama-image-unknown-format", 400, {}, j({"error": "image: unknown format"}), True, M),
    ("openai-unsupported-image-format", 400, {},
     openai("You uploaded an unsupported image. Please make sure your image has of one the "
            "following formats: ['png', 'jpeg', 'gif', 'webp'].", param=None,
            code="invalid_image_format"), True, M),
    ("anthropic-image-dimensions-many-images", 400, {},
     anthropic("messages.0.content.21.image.source.base64.data: At least one of the image "
               "dimensions exceed max allowed size for many-image requests: 2000 pixels"),
     True, M),
    ("gemini-list-invalid-inline-data", 400, {},
     gemini_list(400, "Provided image is not valid.", "INVALID_ARGUMENT"), True, M),
    ("openrouter-vertex-anthropic-image", 400, {},
     openrouter(400, anthropic("messages.0.content.1.image.source.base64: image exceeds 5 MB "
                               "maximum: 6291456 bytes > 5242880 bytes"), "Google Vertex"),
     True, M),

    # --- request too large: degraded media, then compaction --------------------------------
    ("gemini-list-payload-size", 400, {},
     gemini_list(400, "Request payload size exceeds the limit: 20971520 bytes.",
                 "INVALID_ARGUMENT"), True, R),
    ("groq-413-request-too-large-tpm", 413, {},
     # A single request above the minute's token budget: it can never pass as it is.
     openai("Request too large for model `qwen/qwen3-32b` in organization `org_01hq3` service "
            "tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested 9142, please "
            "reduce your message size and try again. Need more tokens? Upgrade to Dev Tier "
            "today at https://console.groq.com/settings/billing", "tokens",
            code="rate_limit_exceeded"), False, R),

    # --- context overflow: compaction ------------------------------------------------------
    ("llamacpp-request-tokens-over-context-size", 400, {},
     # arbs-io/github-copilot-llm-gateway#73 (llama-server since ggml-org/llama.cpp#15780).
     llamacpp(400, "request (8708 tokens) exceeds the available context size (8192 tokens), "
              "try increasing it", "exceed_context_size_error", n_prompt_tokens=8708,
              n_ctx=8192), False, OV),
    ("vllm-output-and-input-tokens-total", 400, {},
     # vllm-project/vllm#42474 (vLLM 0.20's renderer check).
     j({"error": {"message": "This model's maximum context length is 128000 tokens. However, "
                             "you requested 32000 output tokens and your prompt contains at "
                             "least 98466 input tokens, for a total of at least 130466 "
                             "tokens. Please reduce the length of the input prompt or the "
                             "number of requested output tokens. (parameter=input_tokens, "
                             "value=98466)", "type": "BadRequestError",
                  "param": "input_tokens", "code": 400}}), False, OV),
    ("openrouter-endpoint-text-input", 400, {},
     # OpenRouter's own words, counting text and tool input apart.
     j({"error": {"message": "This endpoint's maximum context length is 163840 tokens. However, "
        "you requested about 171204 tokens (158112 of text input, 4900 of tool input, 8192 in "
        "the output). Please reduce the length of either one, or use the \"middle-out\" "
        "transform to compress your prompt automatically.", "code": 400, "metadata": {
            "provider_name": None}}, "user_id": "user_4Tq8Zr"}), False, OV),
    ("gemini-list-input-token-count", 400, {},
     gemini_list(400, "The input token count (1196265) exceeds the maximum number of tokens "
                 "allowed (1048575).", "INVALID_ARGUMENT"), False, OV),
    ("anthropic-bedrock-prompt-too-long", 400, aws("ValidationException"),
     j({"message": "The model returned the following errors: prompt is too long: 204811 "
                   "tokens > 200000 maximum"}), False, OV),
    ("tgi-422-inputs-plus-new-tokens", 422, {},
     # TGI answers its input validation with a 422.
     j({"error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8192. "
                 "Given: 7900 `inputs` tokens and 1024 `max_new_tokens`",
        "error_type": "validation"}), False, OV),
    ("litellm-500-relabelled-overflow", 500, {},
     # LiteLLM's proxy relabels a backend's overflow as its InternalServerError.
     litellm("litellm.InternalServerError: InternalServerError: Hosted_vllmException - Error "
             "code: 500 - {'object': 'error', 'message': \"This model's maximum context length "
             "is 32768 tokens. However, you requested 40960 tokens (36864 in the messages, "
             "4096 in the completion). Please reduce the length of the messages or "
             "completion.\", 'type': 'BadRequestError', 'param': None, 'code': 400}. Received "
             "Model Group=qwen-32b\nAvailable Model Group Fallbacks=None", "500"), False, OV),
    ("groq-overflow-code-only", 400, {},
     openai("Please reduce the length of the messages or completion.", param="messages",
            code="context_length_exceeded"), False, OV),

    # --- transient: backoff ----------------------------------------------------------------
    ("anthropic-429-input-tokens-per-minute", 429, {"retry-after": "13"},
     # Says "reduce the prompt length", but it is the minute's budget: wait.
     anthropic("This request would exceed the rate limit for your organization (f3c1e0a2) of "
               "400,000 input tokens per minute. For details, refer to: https://docs.claude.com"
               "/en/api/rate-limits. You can see the response headers for current usage. Please "
               "reduce the prompt length or the maximum tokens requested, or try again later. "
               "You may also contact sales at https://www.anthropic.com/contact-sales to "
               "discuss your options for a rate limit increase.", "rate_limit_error"),
     False, T),
    ("anthropic-529-overloaded", 529, {},
     anthropic("Overloaded", "overloaded_error"), False, T),
    ("groq-429-minutes-and-seconds", 429, {},
     openai("Rate limit reached for model `llama-3.3-70b-versatile` in organization "
            "`org_01hq3` service tier `on_demand` on tokens per minute (TPM): Limit 12000, "
            "Used 11873, Requested 1402. Please try again in 6.375s. Need more tokens? Upgrade "
            "to Dev Tier today at https://console.groq.com/settings/billing", "tokens",
            code="rate_limit_exceeded"), False, T),
    ("gemini-list-503-overloaded", 503, {},
     gemini_list(503, "The model is overloaded. Please try again later.", "UNAVAILABLE"),
     False, T),
    ("bedrock-service-unavailable", 503, aws("ServiceUnavailableException"),
     j({"message": "Bedrock is unable to process your request."}), False, T),
    ("cohere-trial-key-per-minute", 429, {},
     j({"id": "0c2f7b9e-6a1d-4f3e-9b8c-2d5e7a1f0c43", "message": "You are using a Trial key, "
        "which is limited to 20 API calls / minute. You can continue to use the Trial key for "
        "free or upgrade to a Production key with higher rate limits at 'https://dashboard."
        "cohere.com/api-keys'. Contact us on 'https://discord.gg/XW44jPfYJu' or email us at "
        "support@cohere.com with any questions"}), False, T),
    ("hf-503-model-loading", 503, {},
     j({"error": "Model mistralai/Mistral-7B-Instruct-v0.3 is currently loading",
        "estimated_time": 20.0}), False, T),
    ("envoy-503-no-healthy-upstream", 503, TEXT, "no healthy upstream", False, T),
    ("envoy-504-upstream-request-timeout", 504, TEXT, "upstream request timeout", False, T),
    ("google-front-end-502", 502, HTML, GFE_502, False, T),
    ("nginx-429-limit-req", 429, HTML, NGINX_429, False, T),
    ("cloudflare-429-plain-1015", 429, TEXT, "error code: 1015", False, T),
    ("alb-503-html", 503, HTML, ALB_503, False, T),
    ("groq-498-flex-capacity", 498, {},
     # Groq's flex tier answers its own 498 when it has no room: a client error status, but
     # capacity, so waiting is the rung.
     openai("Flex tier capacity exceeded. This is a known limitation of the flex tier. Please "
            "try again later.", "flex_tier_capacity_exceeded", code="capacity_exceeded"),
     False, T),
    ("llamacpp-503-loading-model", 503, {},
     llamacpp(503, "Loading model", "unavailable_error"), False, T),
    ("openai-429-requests-per-min", 429, {},
     openai("Rate limit reached for gpt-4o in organization org-7Qk2 on requests per min (RPM): "
            "Limit 500, Used 500, Requested 1. Please try again in 120ms. Visit https://"
            "platform.openai.com/account/rate-limits to learn more.", "requests",
            code="rate_limit_exceeded"), False, T),
    ("azure-429-day-long-retry", 429, {"retry-after": "86400"},
     # A wait longer than the request can afford: classified transient, the ladder gives up.
     j({"error": {"code": "429", "message": "Requests to the ChatCompletions_Create Operation "
        "under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your "
        "current AIServices S0 pricing tier. Please retry after 86400 seconds. Please contact "
        "Azure support service if you would like to further increase the default rate "
        "limit."}}), False, T),

    # --- nothing to repair: give up and relay ----------------------------------------------
    ("anthropic-context-management-extra-input", 400, {},
     # "context" in a parameter's name, not a long context: no compaction fixes it.
     anthropic("context_management: Extra inputs are not permitted"), False, F),
    ("openai-unrecognized-fireworks-argument", 400, {},
     # Fireworks' own parameter sent to another server: its name holds "context_length", the
     # refusal is the argument, and compacting the history cannot help.
     openai("Unrecognized request argument supplied: context_length_exceeded_behavior"),
     False, F),
    ("anthropic-long-context-beta-unavailable", 400, {},
     anthropic("The long context beta is not yet available for this subscription."), False, F),
    ("openrouter-raw-object-extra-input", 400, {},
     # ``metadata.raw`` as a JSON object (OpenRouter types it ``unknown``), not text.
     j({"error": {"message": "Provider returned error", "code": 400, "metadata": {
         "raw": {"type": "error", "error": {"type": "invalid_request_error", "message":
                                            "context_management: Extra inputs are not "
                                            "permitted"}},
         "provider_name": "Anthropic"}}, "user_id": "user_4Tq8Zr"}), False, F),
    ("openrouter-raw-object-overflow", 400, {},
     j({"error": {"message": "Provider returned error", "code": 400, "metadata": {
         "raw": {"type": "error", "error": {"type": "invalid_request_error", "message":
                                            "prompt is too long: 208114 tokens > 200000 "
                                            "maximum"}},
         "provider_name": "Amazon Bedrock"}}, "user_id": "user_4Tq8Zr"}), False, OV),
    ("gemini-list-response-mime-type", 400, {},
     # A generation setting the model refuses beside tools: "mime type" of the *response*,
     # not of an input image.
     gemini_list(400, "Function calling with a response mime type: 'application/json' is "
                 "unsupported", "INVALID_ARGUMENT"), False, F),
    ("bedrock-on-demand-throughput", 400, aws("ValidationException"),
     # "Retry your request with ..." is advice to change the model id, not to wait.
     j({"message": "Invocation of model ID anthropic.claude-sonnet-4-20250514-v1:0 with "
                   "on-demand throughput isn’t supported. Retry your request with the ID or "
                   "ARN of an inference profile that contains this model."}), False, F),
    ("azure-operation-not-for-model", 400, {"apim-request-id": "b1e4"},
     j({"error": {"code": "OperationNotSupported", "message": "The chatCompletion operation "
                  "does not work with the specified model, gpt-5-codex. Please choose "
                  "different model and try again. You can learn more about which models can "
                  "be used with each operation here: https://go.microsoft.com/fwlink/?linkid="
                  "2197993."}}), False, F),
    ("azure-responses-api-version", 400, {},
     openai("Azure OpenAI Responses API is enabled only for api-version 2025-03-01-preview and "
            "later", param=None), False, F),
    ("ollama-500-system-memory", 500, {},
     # continuedev/continue#9528 and kin: the machine cannot load the model; a retry a few
     # seconds later fails the same way.
     j({"error": "model requires more system memory (7.5 GiB) than is available (5.2 GiB)"}),
     False, F),
    ("ollama-openai-500-system-memory", 500, {},
     j({"error": {"message": "model requires more system memory (19.3 GiB) than is available "
                             "(14.8 GiB)", "type": "api_error", "param": None, "code": None}}),
     False, F),
    ("lmstudio-insufficient-resources", 400, {},
     j({"error": "Failed to load model \"qwen3-30b-a3b\". Error: Model loading was stopped due "
                 "to insufficient system resources. Continuing to load the model could overload "
                 "your system and cause it to freeze."}), False, F),
    ("tgi-422-new-tokens-strictly-positive", 422, {},
     j({"error": "Input validation error: `max_new_tokens` must be strictly positive",
        "error_type": "validation"}), False, F),
    ("xai-argument-not-supported", 400, {},
     j({"code": "Client specified an invalid argument", "error": "Argument not supported on "
        "this model: reasoningEffort"}), False, F),
    ("vertex-publisher-model-not-allowed", 400, {},
     gemini_list(400, "Project `proj-7731` is not allowed to use Publisher Model `projects/"
                 "proj-7731/locations/us-east5/publishers/anthropic/models/claude-sonnet-4`",
                 "FAILED_PRECONDITION"), False, F),
    ("openai-429-insufficient-quota-retry-words", 429, {"retry-after": "1"},
     # A bill in rate-limit clothes: never retried, whatever Retry-After says.
     openai("You exceeded your current quota, please check your plan and billing details. For "
            "more information on this error, read the docs: https://platform.openai.com/docs/"
            "guides/error-codes/api-errors.", "insufficient_quota", code="insufficient_quota"),
     False, F),
    ("zhipu-429-1113-chinese", 429, {},
     # continuedev/continue#11823: "balance insufficient or no resource package, please top
     # up", on a 429 (claude-code#9201: clients stuck retrying it).
     j({"error": {"code": "1113", "message": "余额不足或无可用资源包,请充值。"}}), False, F),
    ("zhipu-429-1113-anthropic-endpoint", 429, {},
     j({"type": "error", "error": {"type": "1113", "message": "Insufficient balance or no "
        "resource package. Please recharge."}, "request_id": "20251009174412b8"}), False, F),
    ("openai-429-tokens-per-day", 429, {},
     openai("Rate limit reached for gpt-4o-mini in organization org-7Qk2 on tokens per day "
            "(TPD): Limit 2000000, Used 1999500, Requested 1200. Please try again in 30s. "
            "Visit https://platform.openai.com/account/rate-limits to learn more.", "tokens",
            code="rate_limit_exceeded"), False, F),
    ("cloudflare-workers-ai-4006-daily-neurons", 429, {},
     # get-engram/engram#34: the day's free allocation is spent; it resets at 00:00 UTC.
     j({"errors": [{"message": "AiError: AiError: 4006: you have used up your daily free "
                               "allocation of 10,000 neurons, please upgrade to Cloudflare's "
                               "Workers Paid plan if you would like to continue usage.",
                    "code": 4006}], "success": False, "result": {}, "messages": []}),
     False, F),
    ("openai-max-tokens-over-model-cap", 400, {},
     # "tokens" and "too large", but the output cap of the model: no compaction helps.
     openai("max_tokens is too large: 100000. This model supports at most 16384 completion "
            "tokens, whereas you provided 100000.", param="max_tokens", code="invalid_value"),
     False, F),
    ("deepseek-max-tokens-range", 400, {},
     openai("Invalid max_tokens value, the valid range of max_tokens is [1, 8192]"), False, F),
    ("gemini-list-thinking-budget-zero", 400, {},
     # "Budget" is the thinking budget, not a spend budget.
     gemini_list(400, "Budget 0 is invalid. This model only works in thinking mode.",
                 "INVALID_ARGUMENT"), False, F),
    ("anthropic-max-tokens-under-thinking-budget", 400, {},
     # The documentation link names the context window; the refusal is about parameters.
     anthropic("`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
               "documentation at https://docs.claude.com/en/docs/build-with-claude/extended-"
               "thinking#max-tokens-and-context-window-size"), False, F),
    ("openai-tool-name-pattern", 400, {},
     # A tool table's name, not a message's: the strict rung rewrites no tool table.
     openai("Invalid 'tools[0].function.name': string does not match pattern. Expected a "
            "string that matches the pattern '^[a-zA-Z0-9_-]+$'.",
            param="tools[0].function.name", code="invalid_value"), False, F),
    ("ollama-model-without-thinking", 400, {},
     j({"error": "\"gemma3:4b\" does not support thinking"}), False, F),
    ("bedrock-tool-use-streaming", 400, aws("ValidationException"),
     j({"message": "This model doesn't support tool use in streaming mode."}), False, F),
    ("together-402-credit-limit", 402, {},
     j({"id": "o7Qm", "error": {"message": "Credit limit exceeded. Please navigate to https://"
        "api.together.xyz/settings/billing to add credit or upgrade your plan.",
        "type": "credit_limit", "param": None, "code": "credit_limit"}}), False, F),
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
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)
    assert {v: kinds.count(v) >= 2 for v in Verdict} == dict.fromkeys(Verdict, True)


def _case(name: str) -> tuple[int, dict[str, str], str]:
    return next((c[1], c[2], c[3]) for c in CASES if c[0] == name)


# --- errors inside a 200 stream: the first event is the refusal ------------------------------
SSE_CASES: list[tuple[str, bytes, bool, Verdict]] = [
    ("llamacpp-stream-context-size", b'data: {"error":{"code":400,"message":"request (14429 '
     b'tokens) exceeds the available context size (8192 tokens), try increasing it","type":'
     b'"exceed_context_size_error","n_prompt_tokens":14429,"n_ctx":8192}}\n\n', False, OV),
    ("gemini-stream-overloaded", b'data: {"error": {"code": 503, "message": "The model is '
     b'overloaded. Please try again later.", "status": "UNAVAILABLE"}}\r\n\r\n', False, T),
    ("responses-stream-insufficient-quota", b'event: error\ndata: {"type":"error","code":'
     b'"insufficient_quota","message":"You exceeded your current quota, please check your plan '
     b'and billing details.","param":null,"sequence_number":1}\n\n', False, F),
    ("anthropic-stream-rate-limit", b'event: error\ndata: {"type":"error","error":{"type":'
     b'"rate_limit_error","message":"Number of concurrent connections has exceeded your rate '
     b'limit. Please try again later or contact sales at https://www.anthropic.com/contact-'
     b'sales to discuss your options for a rate limit increase."}}\n\n', False, T),
    ("openrouter-chunk-raw-overflow", b'data: {"id":"gen-88","object":"chat.completion.chunk",'
     b'"created":1764633600,"model":"deepseek/deepseek-chat","provider":"Novita","error":{'
     b'"code":400,"message":"Provider returned error","metadata":{"raw":"{\\"error\\":{\\"'
     b'message\\":\\"This model\'s maximum context length is 65536 tokens. However, you '
     b'requested 70211 tokens (66115 in the messages, 4096 in the completion).\\"}}",'
     b'"provider_name":"Novita"}},"choices":[{"index":0,"delta":{"content":""},"finish_reason":'
     b'"error"}]}\n\n', False, OV),
]


@pytest.mark.parametrize(("name", "event", "images", "expected"), SSE_CASES,
                         ids=[c[0] for c in SSE_CASES])
def test_a_first_sse_event_refusal_takes_its_rung(name: str, event: bytes, images: bool,
                                                  expected: Verdict) -> None:
    found = _failure_in_event(event)
    assert found is not None, name
    status, body = found
    failure = failure_from_http(status, {}, json.dumps(body).encode(), name.split("-")[0])
    verdict, rule = explain(failure, has_images=images)
    assert verdict is expected, f"{name}: {verdict} by {rule} (status {status})"


# --- the backoff honours what the provider said about waiting ------------------------------

@pytest.mark.parametrize(("name", "wait"), [
    ("anthropic-429-input-tokens-per-minute", 13.0),  # Retry-After
    ("groq-429-minutes-and-seconds", 6.375),  # "Please try again in 6.375s"
    ("openai-429-requests-per-min", 0.12),  # "Please try again in 120ms"
    ("azure-429-day-long-retry", None),  # a day: no wait inside a request, give up
])
def test_the_wait_is_the_one_the_provider_named(name: str, wait: float | None) -> None:
    status, headers, body = _case(name)
    failure = failure_from_http(status, headers, body.encode(), "p")
    verdict, _ = explain(failure)
    assert verdict is T
    ladder = Ladder(RecoveryPolicy(max_retry_after=30.0))
    plan = ladder.after_failure(ladder.first(), failure, verdict, elapsed=0.0)
    if wait is None:
        assert isinstance(plan, GiveUp) and "exceeds" in plan.reason
    else:
        assert not isinstance(plan, GiveUp) and plan.step == "retry"
        assert plan.delay == pytest.approx(wait)


@pytest.mark.parametrize(("name", "message", "kind"), [
    ("openrouter-raw-object-extra-input", "context_management: Extra inputs are not permitted",
     "invalid_request_error"),
    ("openrouter-raw-object-overflow", "prompt is too long: 208114 tokens > 200000 maximum",
     "invalid_request_error"),
    ("gemini-list-response-mime-type", "Function calling with a response mime type: "
     "'application/json' is unsupported", None),
    ("google-front-end-502", "Error 502 (Server Error)!!1", None),
    # Cloudflare's four-digit code is the message, not a status prefix to strip ("5").
    ("cloudflare-429-plain-1015", "error code: 1015", None),
])
def test_the_providers_own_words_are_read_out_of_the_wrapping(name: str, message: str,
                                                              kind: str | None) -> None:
    # What a client is shown when the refusal is relayed: the words of the provider behind
    # the wrapper (a list, an OpenRouter object, an HTML page), not the wrapper's.
    status, headers, body = _case(name)
    failure = failure_from_http(status, headers, body.encode(), "p")
    assert failure.message == message
    assert failure.type == kind


@pytest.mark.parametrize("name", ["openrouter-raw-object-overflow"])
def test_the_window_of_an_object_raw_is_read(name: str) -> None:
    assert overflow_numbers(_case(name)[2]) == OverflowNumbers(200000, 208114)


def test_a_bill_on_a_429_is_never_retried() -> None:
    status, headers, body = _case("openai-429-insufficient-quota-retry-words")
    failure = failure_from_http(status, headers, body.encode(), "openai")
    verdict, _ = explain(failure)
    ladder = Ladder()
    plan = ladder.after_failure(ladder.first(), failure, verdict, elapsed=0.0)
    assert isinstance(plan, GiveUp)


# --- the window and the prompt an overflow states are read ---------------------------------

@pytest.mark.parametrize(("name", "window", "prompt"), [
    ("llamacpp-request-tokens-over-context-size", 8192, 8708),
    ("vllm-output-and-input-tokens-total", 128000, 98466),
    ("openrouter-endpoint-text-input", 163840, 158112 + 4900),  # the inputs, not the output
    ("gemini-list-input-token-count", 1048575, 1196265),
    ("anthropic-bedrock-prompt-too-long", 200000, 204811),
    ("tgi-422-inputs-plus-new-tokens", 8192, 7900),
    ("litellm-500-relabelled-overflow", 32768, 36864),
])
def test_the_overflow_names_its_window_and_prompt(name: str, window: int,
                                                  prompt: int | None) -> None:
    numbers = overflow_numbers(_case(name)[2])
    assert numbers.window == window
    if prompt is not None:
        assert numbers.prompt == prompt


OPENROUTER_WHOLE_WINDOW_OUTPUT = j({"error": {
    # OpenHands/OpenHands#9937, Aider-AI/aider#3721: a client that asks the whole window as
    # output; compacting the history can never make room ("an infinite condensation loop").
    "message": "This endpoint's maximum context length is 131072 tokens. However, you "
               "requested about 138956 tokens (6884 of text input, 1000 of tool input, 131072 "
               "in the output). Please reduce the length of either one, or use the "
               "\"middle-out\" transform to compress your prompt automatically.",
    "code": 400, "metadata": {"provider_name": "Chutes"}}, "user_id": "user_4Tq8Zr"})
TOGETHER_WHOLE_WINDOW_OUTPUT = j({"id": "o8Rk", "error": {
    "message": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 32769. "
               "Given: 1200 `inputs` tokens and 32768 `max_new_tokens`",
    "type": "invalid_request_error", "param": None, "code": None}})
LEGACY_OPENAI_WHOLE_WINDOW_OUTPUT = openai(
    # OpenAI's older wording, still sent by OpenAI-compatible servers that copied it.
    "This model's maximum context length is 4097 tokens, however you requested 4297 tokens "
    "(201 in your prompt; 4096 for the completion). Please reduce your prompt; or completion "
    "length.")


@pytest.mark.parametrize(("body", "window", "prompt", "budget"), [
    (OPENROUTER_WHOLE_WINDOW_OUTPUT, 131072, 7884, 131072),
    (TOGETHER_WHOLE_WINDOW_OUTPUT, 32769, 1200, 32768),
    (LEGACY_OPENAI_WHOLE_WINDOW_OUTPUT, 4097, 201, 4096),
])
def test_a_budget_that_fills_the_window_is_read_in_every_wording(
        body: str, window: int, prompt: int, budget: int) -> None:
    failure = failure_from_http(400, {}, body.encode(), "p")
    assert explain(failure)[0] is OV
    assert overflow_numbers(body) == OverflowNumbers(window, prompt)
    fit = fit_output_budget(failure_texts(failure))
    assert fit is not None
    assert (fit.window, fit.prompt, fit.budget, fit.lowered) == (
        window, prompt, budget, window - prompt - 16)


def test_a_budget_that_fills_vllms_window_is_lowered_not_compacted() -> None:
    # vLLM 0.20's wording, with the client's max_tokens the whole window (a local model's
    # common default): no history fits beside it, the budget is lowered to what is left.
    body = j({"error": {"message": "This model's maximum context length is 32768 tokens. "
                                   "However, you requested 32768 output tokens and your prompt "
                                   "contains at least 2210 input tokens, for a total of at "
                                   "least 34978 tokens. Please reduce the length of the input "
                                   "prompt or the number of requested output tokens.",
                        "type": "BadRequestError", "param": None, "code": 400}})
    failure = failure_from_http(400, {}, body.encode(), "vllm")
    assert explain(failure)[0] is OV
    fit = fit_output_budget(failure_texts(failure))
    assert fit is not None
    assert (fit.window, fit.prompt, fit.budget) == (32768, 2210, 32768)
    assert fit.lowered == 32768 - 2210 - 16
    # With room for a history beside the budget, compaction stays the rung.
    failure = failure_from_http(400, {}, _case("vllm-output-and-input-tokens-total")[2].encode(),
                                "vllm")
    assert fit_output_budget(failure_texts(failure)) is None
