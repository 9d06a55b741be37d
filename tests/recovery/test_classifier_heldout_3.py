"""A third held-out round on the classifier: refusals of providers and gateways the earlier
rounds covered thinly (Azure OpenAI, Vertex AI / Gemini, Bedrock, Groq, Together, Fireworks,
DeepSeek, Cerebras, xAI, OpenRouter, Mistral, Cohere, Ollama, LM Studio, llama.cpp, TGI,
SGLang, vLLM, LiteLLM's proxy, Cloudflare / nginx / Envoy in front of them), in their layouts:
``inner_error`` objects, field paths, ``metadata.raw`` wrappers, a ``message`` that is an
object, plain text, HTML pages, SSE ``data:`` lines.

Each case is the status, the headers that matter and the body as the provider (or the proxy
in front of it) sends it, read through ``failure_from_http`` and ``explain`` as the gateway
reads them. None is copied from tests/data/provider-errors.jsonl or the earlier rounds; where
a wording was seen in the field, the comment says where. The verdict is the rung: structural
-> strict projection, media -> degraded media, request_too_large -> degraded media then
compaction, overflow -> compaction, transient -> backoff, fatal -> give up at once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.compaction.window import overflow_numbers
from gateway.providers.errors import failure_from_http
from gateway.providers.openai_compat import _failure_in_event
from gateway.recovery.classifier import Verdict, developer_role_refused, explain
from gateway.recovery.drop import unsupported_param
from gateway.recovery.evidence import failure_texts
from gateway.recovery.ladder import GiveUp, Ladder, RecoveryPolicy

S, M, OV, R, T, F = (Verdict.STRUCTURAL, Verdict.MEDIA, Verdict.OVERFLOW,
                     Verdict.REQUEST_TOO_LARGE, Verdict.TRANSIENT, Verdict.FATAL)


def j(value: Any) -> str:
    """Compact JSON, as most providers send it."""
    return json.dumps(value, separators=(",", ":"))


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
              "user_id": "user_31kQ"})


def mistral(message: Any, kind: str = "invalid_request_error", code: Any = None) -> str:
    return j({"object": "error", "message": message, "type": kind, "param": None, "code": code})


def litellm(message: str, code: str = "400") -> str:
    return j({"error": {"message": message, "type": None, "param": None, "code": code}})


def cerebras(message: str, kind: str, param: str | None, code: str) -> str:
    return j({"message": message, "type": kind, "param": param, "code": code})


def xai(message: str, code: str = "Client specified an invalid argument") -> str:
    return j({"code": code, "error": message})


AWS = {"x-amzn-errortype": "ValidationException:http://internal.amazon.com/coral/com.amazon"
       ".bedrock/", "x-amzn-requestid": "9d0f4c1e-2b7a-4e55-8f3a-61c2d0e9a7b4"}


def aws(kind: str) -> dict[str, str]:
    return {**AWS, "x-amzn-errortype": f"{kind}:http://internal.amazon.com/coral/"}


HTML = {"content-type": "text/html"}
TEXT = {"content-type": "text/plain; charset=utf-8"}

CLOUDFLARE_502 = (
    "<!DOCTYPE html>\n<!--[if lt IE 7]> <html class=\"no-js ie6 oldie\" lang=\"en-US\"> "
    "<![endif]-->\n<html lang=\"en-US\"><head><title>llm.example.com | 502: Bad gateway</title>"
    "<meta charset=\"UTF-8\" /></head><body><div id=\"cf-wrapper\"><h1><span>Bad gateway</span>"
    "<span>Error code 502</span></h1><p>The web server reported a bad gateway error.</p>"
    "<p>Cloudflare Ray ID: <strong>8e2f1c7a9b3d4e5f</strong></p></div></body></html>")
NGINX_504 = ("<html>\r\n<head><title>504 Gateway Time-out</title></head>\r\n<body>\r\n<center>"
             "<h1>504 Gateway Time-out</h1></center>\r\n<hr><center>nginx</center>\r\n"
             "</body>\r\n</html>\r\n")
CLOUDFLARE_413 = (
    "<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n"
    "<center><h1>413 Request Entity Too Large</h1></center>\r\n<hr><center>cloudflare</center>"
    "\r\n</body>\r\n</html>\r\n")

def gemini_quota(quota_id: str, limit: int, delay: str) -> str:
    """Gemini's free-tier 429 (OmniRoute#9504, Roo-Code#3883): billing words for any quota."""
    metric = "generativelanguage.googleapis.com/generate_content_free_tier_requests"
    return google(
        429, "You exceeded your current quota, please check your plan and billing details. For "
        "more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-"
        "limits. To monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota "
        f"exceeded for metric: {metric}, limit: {limit}, model: gemini-2.5-flash\nPlease retry "
        f"in {delay}.", "RESOURCE_EXHAUSTED",
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{
            "quotaMetric": metric, "quotaId": quota_id,
            "quotaDimensions": {"location": "global", "model": "gemini-2.5-flash"},
            "quotaValue": str(limit)}]},
        {"@type": "type.googleapis.com/google.rpc.RetryInfo",
         "retryDelay": delay.split(".")[0] + "s"})


NO_IMAGE_ENDPOINTS = j({"error": {"message": "No endpoints found that support image input",
                                  "code": 404}, "user_id": "user_31kQ"})

# (name, status, headers, body, request had images, verdict)
Case = tuple[str, int, dict[str, str], str, bool, Verdict]

CASES: list[Case] = [
    # --- structural: strict projection -----------------------------------------------------
    ("bedrock-more-tool-results-than-uses", 400, AWS,
     # OpenHands#4912, pydantic-ai#2327 (a pruned history keeps results of dropped calls).
     j({"message": "The number of toolResult blocks at messages.4.content exceeds the number "
                   "of toolUse blocks of previous turn."}), False, S),
    ("litellm-bedrock-tool-results-exceed", 400, {},
     litellm("litellm.BadRequestError: BedrockException - {\"message\":\"The number of "
             "toolResult blocks at messages.2.content exceeds the number of toolUse blocks of "
             "previous turn.\"}. Received Model Group=claude-3-7\nAvailable Model Group "
             "Fallbacks=None"), False, S),
    ("bedrock-conversation-and-tool-use-same-turn", 400, AWS,
     # quarkus-langchain4j#1983 (Llama on Bedrock refuses text beside tool use).
     j({"message": "messages.7.content: Conversation blocks and tool use blocks cannot be "
                   "provided in the same turn."}), False, S),
    ("bedrock-invoke-empty-content-array", 400, AWS,
     # InvokeModel's JSON-schema wording for an empty content list.
     j({"message": "Malformed input request: #/messages/3/content: expected minimum item "
                   "count: 1, found: 0, please reformat your input and try again."}), False, S),
    ("bedrock-toolconfig-undefined", 400, AWS,
     # A history with tool blocks sent without tools (BerriAI/litellm's modify_params).
     j({"message": "The toolConfig field must be defined when using toolUse and toolResult "
                   "content blocks."}), False, S),
    ("gemini-parts-must-not-be-empty", 400, {},
     # egoist/chatwise-releases#250, QuantumNous/new-api#1060.
     google(400, "* GenerateContentRequest.contents[3].parts: contents.parts must not be "
            "empty.\n", "INVALID_ARGUMENT"), False, S),
    ("vertex-at-least-one-parts-field", 400, {},
     google(400, "Unable to submit request because it must include at least one parts field, "
            "which describes the prompt input. Learn more: https://cloud.google.com/vertex-ai/"
            "generative-ai/docs/model-reference/gemini", "INVALID_ARGUMENT"), False, S),
    ("gemini-function-response-name-empty", 400, {},
     # langflow-ai/langflow#9437 (a tool result without the name of its call).
     google(400, "* GenerateContentRequest.contents[5].parts[0].function_response.name: Name "
            "cannot be empty.\n* GenerateContentRequest.contents[7].parts[0].function_response"
            ".name: Name cannot be empty.\n", "INVALID_ARGUMENT"), False, S),
    ("openrouter-vertex-function-response-turn", 400, {},
     openrouter(400, google(400, "Please ensure that function response turn comes immediately "
                            "after a function call turn.", "INVALID_ARGUMENT"),
                "Google Vertex"), False, S),
    ("azure-empty-tool-calls-array", 400, {"apim-request-id": "5c2e"},
     openai("Invalid 'messages[4].tool_calls': empty array. Expected an array with minimum "
            "length 1, but got an empty array instead.", param="messages[4].tool_calls",
            code="empty_array"), False, S),
    ("azure-tool-without-preceding-call-inner-error", 400, {},
     j({"error": {"message": "Invalid parameter: messages with role 'tool' must be a response "
                             "to a preceeding message with 'tool_calls'.",
                  "type": "invalid_request_error", "param": "messages.[5].role",
                  "code": None, "inner_error": {"code": "invalid_request"}}}), False, S),
    ("llamacpp-two-assistants-at-end", 400, {},
     # llama.cpp server's chat template check.
     j({"error": {"code": 400, "message": "Cannot have 2 or more assistant messages at the end "
                  "of the list.", "type": "invalid_request_error"}}), False, S),
    ("lmstudio-no-user-query", 400, {},
     # Qwen3's chat template, rendered by LM Studio, on a history with no user turn.
     j({"error": "Error rendering prompt with jinja template: \"No user query found in "
                 "messages.\".\n\nThis is usually an issue with the model's prompt template. If "
                 "you are using a popular model, you can try to search the model under "
                 "lmstudio-community, which will have fixed prompt templates."}), False, S),
    ("vllm-pydantic-tool-call-id-missing", 400, {},
     mistral("[{'type': 'missing', 'loc': ('body', 'messages', 3, 'typed-dict', "
             "'tool_call_id'), 'msg': 'Field required', 'input': {'role': 'tool', 'content': "
             "'ok'}}]", "BadRequestError", 400), False, S),
    ("cohere-tool-role-must-follow", 400, {},
     j({"id": "2f9d5a61-7c0e", "message": "invalid request: message role 'tool' must follow an "
        "assistant message with tool calls."}), False, S),
    ("xai-tool-result-id-unknown", 400, {},
     xai("Tool result with tool_call_id 'call_71823' does not correspond to any tool call in "
         "the preceding assistant message"), False, S),
    ("groq-assistant-content-or-tool-calls", 400, {},
     j({"error": {"message": "'messages.3' : for 'role:assistant' the following must be "
                  "satisfied[('messages.3' : one of the following must be satisfied[('messages"
                  ".3.content' : value must not be empty) OR ('messages.3.tool_calls' : value "
                  "must be an array)])]", "type": "invalid_request_error"}}), False, S),
    ("together-duplicate-tool-call-ids", 400, {},
     j({"id": "o9x1", "error": {"message": "Tool call ids must be unique within a message: "
        "'call_0' is repeated", "type": "invalid_request_error", "param": "messages",
        "code": None}}), False, S),
    ("mistral-message-object-tool-order", 400, {},
     mistral({"detail": "Unexpected role 'user' after role 'tool'"},
             "invalid_request_message_order", "3230"), False, S),
    ("deepseek-null-content-deserialize", 422, {},
     "Failed to deserialize the JSON body into the target type: messages[3]: invalid type: "
     "null, expected a string at line 1 column 1873", False, S),
    ("minimax-tool-result-id-not-found", 400, {},
     j({"type": "error", "error": {"type": "bad_request_error", "message": "invalid params, "
        "tool result's tool id(call_function_8k2j) not found (2013)", "http_code": "400"}}),
     False, S),
    ("perplexity-roles-alternating", 400, {},
     j({"error": {"message": "After the (optional) system message(s), user and assistant roles "
        "should be alternating.", "type": "invalid_message", "code": 400}}), False, S),
    ("nim-problem-json-detail", 400, {"content-type": "application/problem+json"},
     j({"type": "urn:nvidia:error", "title": "Bad Request", "status": 400, "detail":
        "messages.2: tool call id call_0 has no corresponding tool message"}), False, S),
    ("azure-foundry-422-details", 422, {},
     # A serverless (MaaS) deployment: the reason in a pydantic ``details`` list.
     j({"error": {"code": "Invalid input", "status": 422, "message": "invalid input error",
                  "details": [{"type": "value_error", "loc": ["body", "messages", 2],
                               "msg": "Value error, Tool message must follow an assistant "
                                      "message with tool_calls"}]}}), False, S),
    ("dashscope-tool-calls-code-prefix", 400, {},
     j({"code": "InvalidParameter", "message": "<400> InternalError.Algo.InvalidParameter: An "
        "assistant message with \"tool_calls\" must be followed by tool messages responding to "
        "each \"tool_call_id\". The following tool_call_ids did not have response messages: "
        "message[2].role", "request_id": "b7c1e0d2-5a4f-9c1e-8b7a-3f2e1d0c9b8a"}), False, S),
    ("portkey-status-failure", 400, {},
     j({"status": "failure", "message": "anthropic error: messages: text content blocks must "
        "be non-empty"}), False, S),
    ("litellm-sse-bodied-400", 400, {"content-type": "text/event-stream"},
     # LiteLLM's proxy refusing a streamed request: the error as an SSE line on a 400.
     "data: {\"error\": {\"message\": \"litellm.BadRequestError: AnthropicException - "
     "messages.4: `tool_use` ids were found without `tool_result` blocks immediately after: "
     "toolu_01\", \"type\": null, \"code\": \"400\"}}\n\n", False, S),
    ("anthropic-prefill-unsupported", 400, {},
     j({"type": "error", "error": {"type": "invalid_request_error", "message": "This model does "
        "not support assistant message prefill. The conversation must end with a user "
        "message."}}), False, S),
    ("bedrock-llama-pre-fill", 400, AWS,
     j({"message": "The model returned the following errors: Your API request included an "
                   "`assistant` message in the final position, which would pre-fill the "
                   "`assistant` response. When using tools, pre-filling the `assistant` "
                   "response is not supported."}), False, S),
    ("openai-developer-role-invalid-value", 400, {},
     openai("Invalid value: 'developer'. Supported values are: 'system', 'assistant', 'user', "
            "'function', and 'tool'.", param="messages[0].role", code="invalid_value"),
     False, S),
    ("groq-developer-role-discriminator", 400, {},
     openai("'messages.0' : discriminator property 'role' has invalid value 'developer'"),
     False, S),
    ("kilo-developer-jsonschema", 400, {},
     openai("'developer' is not one of ['system', 'assistant', 'user', 'tool', 'function'] - "
            "'messages.[6].role'"),
     False, S),
    ("deepseek-developer-unknown-variant", 422, {},
     "Failed to deserialize the JSON body into the target type: messages[0]: unknown variant "
     "`developer`, expected one of `system`, `user`, `assistant`, `tool` at line 1 column 29",
     False, S),
    ("llamacpp-prefill-with-thinking", 400, {},
     j({"error": {"code": 400, "message": "Assistant response prefill is incompatible with "
                  "enable_thinking.", "type": "invalid_request_error"}}), False, S),

    # --- media: degraded (then strip) ------------------------------------------------------
    ("azure-unsupported-image-mime", 400, {},
     openai("Invalid 'messages[2].content[1].image_url.url'. Expected a base64-encoded data URL "
            "with an image MIME type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but "
            "got unsupported MIME type 'image/heic'.",
            param="messages[2].content[1].image_url.url", code="invalid_value"), True, M),
    ("vertex-cannot-fetch-url", 400, {},
     google(400, "Cannot fetch content from the provided URL. Please ensure the URL is valid "
            "and accessible by Vertex AI. Vertex AI respects robots.txt rules, so confirm the "
            "URL is allowed to be crawled.", "INVALID_ARGUMENT"), True, M),
    ("openrouter-gemini-image-retry-wording", 400, {},
     openrouter(400, google(400, "Unable to process input image. Please retry or report in "
                            "https://developers.generativeai.google/guide/troubleshooting",
                            "INVALID_ARGUMENT"), "Google AI Studio"), True, M),
    ("groq-base64-image-too-large", 400, {},
     openai("messages[0].content[1].image_url.url: base64 encoded images must be smaller than "
            "4MB", param="messages"), True, M),
    ("mistral-message-object-image-url", 422, {},
     mistral({"detail": [{"type": "value_error", "loc": ["body", "messages", 0, "user",
                                                          "content", 1, "image_url"],
                          "msg": "Value error, Image url must be a valid URL or a base64 data "
                                 "url", "input": "data:image/png;base64,"}]}), True, M),
    ("ollama-500-missing-vision-data", 500, {},
     # A text-only model given an image: Ollama's runner answers 500.
     j({"error": "this model is missing data required for image input"}), True, M),
    ("bedrock-image-over-5mb", 400, AWS,
     j({"message": "The model returned the following errors: messages.0.content.1.image.source."
                   "base64: image exceeds 5 MB maximum: 7340032 bytes > 5242880 bytes"}),
     True, M),
    ("fireworks-too-many-images", 400, {},
     j({"error": {"object": "error", "type": "invalid_request_error", "message": "Too many "
        "images in the request: 34, the model accepts at most 30"}}), True, M),
    ("vllm-at-most-images-per-prompt", 400, {},
     j({"error": {"message": "At most 1 image(s) may be provided in one prompt.",
                  "type": "BadRequestError", "param": None, "code": 400}}), True, M),
    ("xai-image-bytes-over-limit", 400, {},
     xai("Image file size 12582912 bytes exceeds the limit of 10485760 bytes"), True, M),
    ("openrouter-404-no-image-endpoints", 404, {},
     # NousResearch/hermes-agent#23411, openclaw/openclaw#99079: a text-only model.
     NO_IMAGE_ENDPOINTS, True, M),
    ("mimo-404-no-image-endpoints", 404, {},
     # JohnnyZ93/oai-compatible-copilot#229 (Xiaomi MiMo's own API, OpenRouter's words).
     j({"error": {"code": "404", "message": "No endpoints found that support image input",
                  "param": "", "type": ""}}), True, M),
    ("xai-image-input-exceeds-max-length", 400, {},
     # Worded like a long prompt, about an image: the image goes first.
     xai("Image input exceeds the maximum length of 10485760 bytes"), True, M),
    ("groq-text-only-model", 400, {},
     openai("messages[1]: unsupported content type: image_url"), True, M),
    ("vllm-multimodal-disabled", 400, {},
     mistral("Model does not support multimodal inputs", "BadRequestError", 400), True, M),
    ("hyperbolic-too-many-images", 400, {},
     j({"object": "error", "message": "Too many images in the request"}), True, M),
    ("cloudflare-413-html-with-images", 413, HTML, CLOUDFLARE_413, True, R),
    ("xml-413-entity-too-large", 413, {"content-type": "application/xml"},
     "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>RequestEntityTooLarge</Code>"
     "<Message>Request body is too large</Message></Error>", False, R),
    ("plain-413-payload-too-large", 413, TEXT, "Payload Too Large", False, R),

    # --- context overflow: compaction ------------------------------------------------------
    ("fireworks-prompt-too-long", 400, {},
     j({"error": {"object": "error", "type": "invalid_request_error", "message": "The prompt is "
        "too long: 140215, model maximum context length: 131072"}}), False, OV),
    ("together-tgi-inputs-plus-new-tokens", 400, {},
     j({"id": "8f3b", "error": {"message": "Input validation error: `inputs` tokens + "
        "`max_new_tokens` must be <= 8193. Given: 8006 `inputs` tokens and 512 "
        "`max_new_tokens`", "type": "invalid_request_error", "param": None, "code": None}}),
     False, OV),
    ("sglang-input-longer-than-context", 400, {},
     # QwenLM/Qwen3#1321.
     mistral("The input (61709 tokens) is longer than the model's context length (40960 "
             "tokens).", "BadRequestError", 400), False, OV),
    ("sglang-input-length-exceeds-allowed", 400, {},
     # sgl-project/sglang#4048.
     mistral("Input length (160062 tokens) exceeds the maximum allowed length (59862 tokens).",
             "BadRequestError", 400), False, OV),
    ("lmstudio-n-keep-over-n-ctx", 400, {},
     # anomalyco/opencode#11141.
     j({"error": "Cannot truncate prompt with n_keep (15028) >= n_ctx (7424)"}), False, OV),
    ("lmstudio-tokens-to-keep", 400, {},
     # Gitlawb/openclaude#353.
     j({"error": "The number of tokens to keep from the initial prompt is greater than the "
                 "context length (n_keep: 13055>= n_ctx: 4096). Try to load the model with a "
                 "larger context length, or provide a shorter input."}), False, OV),
    ("vllm-nested-decoder-prompt", 400, {},
     j({"error": {"message": "The decoder prompt (length 70311) is longer than the maximum "
                             "model length of 65536. Make sure that `max_model_len` is no "
                             "smaller than the number of text tokens.",
                  "type": "BadRequestError", "param": None, "code": 400}}), False, OV),
    ("cohere-v2-too-many-tokens", 400, {},
     j({"id": "f1a0", "message": "invalid request: too many tokens: total number of tokens in "
        "the prompt cannot exceed 128000 - received 140021. Try using a shorter prompt, or "
        "enabling prompt truncation."}), False, OV),
    ("litellm-anthropic-prompt-too-long", 400, {},
     litellm("litellm.ContextWindowExceededError: litellm.BadRequestError: AnthropicException - "
             "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":"
             "\"prompt is too long: 210345 tokens > 200000 maximum\"}}\nmodel=claude-sonnet-4"),
     False, OV),
    ("bedrock-input-too-long-no-images", 400, AWS,
     j({"message": "Input is too long for requested model."}), False, OV),
    ("azure-context-length-inner-error", 400, {},
     j({"error": {"message": "This model's maximum context length is 128000 tokens. However, "
                             "your messages resulted in 131577 tokens. Please reduce the length "
                             "of the messages.", "type": "invalid_request_error",
                  "param": "messages", "code": "context_length_exceeded"}}), False, OV),
    ("zhipu-glm-1261", 400, {},
     # mangowhoiscloud/geode#668, NousResearch/hermes-agent#1877.
     j({"error": {"code": "1261", "message": "Prompt exceeds max length"}}), False, OV),
    ("zhipu-anthropic-endpoint-1210", 400, {},
     # foreveryh/claude-code-switch#12: a Chinese placeholder, the reason after it.
     j({"type": "error", "error": {"message": "API 调用参数有误，请检查文档。Request 182387 input "
        "tokens exceeds the model's maximum context length 202750", "code": "1210"}}),
     False, OV),
    ("volcengine-ark-input-length", 400, {},
     # langgenius/dify#32221.
     j({"error": {"code": "InvalidParameter", "message": "Input length 203743 exceeds the "
        "maximum length 202752. Request id: 0217646336000001a2b3c", "param": "",
        "type": "BadRequest"}}), False, OV),
    ("cloudflare-workers-ai-errors-list", 400, {},
     j({"errors": [{"message": "AiError: AiError: Input validation error: `inputs` tokens + "
        "`max_new_tokens` must be <= 4096. Given: 4200 `inputs` tokens and 256 "
        "`max_new_tokens`", "code": 3010}], "success": False, "result": {}, "messages": []}),
     False, OV),
    ("ollama-native-context", 400, {},
     j({"error": "input length exceeds maximum context length"}), False, OV),
    ("double-encoded-json-string", 400, {},
     # A proxy that JSON-encodes the provider's body once more.
     j(j({"type": "error", "error": {"type": "invalid_request_error",
                                     "message": "prompt is too long: 210345 tokens > 200000 "
                                                "maximum"}})), False, OV),
    ("openrouter-raw-deepseek-overflow", 400, {},
     openrouter(400, openai("This model's maximum context length is 163840 tokens. However, you "
                            "requested 171235 tokens (163043 in the messages, 8192 in the "
                            "completion). Please reduce the length of the messages or "
                            "completion."), "DeepInfra"), False, OV),

    # --- transient: backoff ----------------------------------------------------------------
    ("cerebras-tokens-per-minute", 429, {"retry-after": "7"},
     cerebras("Tokens per minute limit exceeded - too many tokens processed.",
              "too_many_tokens_error", "quota", "token_quota_exceeded"), False, T),
    ("azure-429-retry-after-ms", 429, {"retry-after-ms": "1500", "retry-after": "2",
                                       "x-ratelimit-remaining-requests": "0"},
     j({"error": {"code": "429", "message": "Requests to the ChatCompletions_Create Operation "
        "under Azure OpenAI API version 2025-01-01-preview have exceeded call rate limit of "
        "your current OpenAI S0 pricing tier. Please retry after 2 seconds."}}), False, T),
    ("together-model-rate-limit", 429, {},
     j({"id": "9b1c", "error": {"message": "You have reached the rate limit specific to this "
        "model meta-llama/Llama-3.3-70B-Instruct-Turbo. The maximum rate limit for this model "
        "is 6.0 queries and 180000 tokens per minute.", "type": "model_rate_limit",
        "param": None, "code": None}}), False, T),
    ("openrouter-529-overloaded", 529, {},
     j({"error": {"message": "Overloaded", "code": 529}, "user_id": "user_31kQ"}), False, T),
    ("openrouter-502-envoy-raw", 502, {},
     openrouter(502, "upstream connect error or disconnect/reset before headers. reset reason: "
                "connection termination", "Together"), False, T),
    ("deepseek-503-overloaded", 503, {},
     openai("Server overloaded, please try again later.", "service_unavailable_error"),
     False, T),
    ("vertex-429-per-minute-quota", 429, {},
     google(429, "Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_"
            "minute_per_project_per_base_model with base model: gemini-2.0-flash. Please "
            "submit a quota increase request. https://cloud.google.com/vertex-ai/docs/"
            "generative-ai/quotas-genai.", "RESOURCE_EXHAUSTED"), False, T),
    ("bedrock-model-not-ready", 429, aws("ModelNotReadyException"),
     j({"message": "Model is not ready for inference. Wait and try your request again."}),
     False, T),
    ("ollama-runner-terminated", 500, {},
     j({"error": {"message": "llama runner process has terminated: exit status 2",
                  "type": "api_error", "param": None, "code": None}}), False, T),
    ("tgi-424-generation-failed", 424, {},
     j({"error": "Request failed during generation: Server error: CUDA out of memory. Tried to "
                 "allocate 2.00 GiB", "error_type": "generation"}), False, T),
    ("litellm-no-deployments-cooldown", 429, {},
     litellm("litellm.RateLimitError: No deployments available for selected model, Try again "
             "in 60 seconds. Passed model=gpt-4o. pre-call-checks=False, cooldown_list=["
             "('a1b2c3', {'exception_received': 'litellm.RateLimitError', 'status_code': "
             "'429'})]", "429"), False, T),
    ("cloudflare-502-html", 502, HTML, CLOUDFLARE_502, False, T),
    ("nginx-504-html", 504, HTML, NGINX_504, False, T),
    ("envoy-503-plain-overflow", 503, TEXT,
     # Envoy's own words when its pending queue is full: "overflow" is no context overflow.
     "upstream connect error or disconnect/reset before headers. reset reason: overflow",
     False, T),
    ("gemini-429-free-tier-per-minute", 429, {},
     gemini_quota("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", 10, "26.71s"),
     False, T),
    ("moonshot-organization-rpm", 429, {},
     j({"error": {"message": "Your account org-3f1e <ak-9b2c> request reached organization max "
        "RPM: 3, please try again after 1 seconds", "type": "rate_limit_reached_error"}}),
     False, T),
    ("cloudflare-ai-gateway-error-list", 502, {},
     j({"success": False, "result": [], "messages": [], "error": [
         {"code": 2005, "message": "Failed to get response from provider"}]}), False, T),
    ("cloudflare-1015-html", 429, HTML,
     "<!DOCTYPE html><html><head><title>Access denied | api.example.com used Cloudflare to "
     "restrict access</title></head><body><h1>Error 1015</h1><h2>You are being rate limited"
     "</h2></body></html>", False, T),
    ("azure-apim-429", 429, {},
     j({"statusCode": 429, "message": "Rate limit is exceeded. Try again in 11 seconds."}),
     False, T),
    ("gemini-500-internal", 500, {},
     google(500, "An internal error has occurred. Please retry or report in https://developers"
            ".generativeai.google/guide/troubleshooting", "INTERNAL"), False, T),

    # --- nothing to repair: give up at once ------------------------------------------------
    ("azure-content-filter-inner-error", 400, {},
     # browser-use/browser-use#262 (the newer ``inner_error`` spelling, jailbreak shield).
     j({"error": {"inner_error": {"code": "ResponsibleAIPolicyViolation",
                                  "content_filter_results": {"jailbreak": {
                                      "filtered": True, "detected": True}}},
                  "code": "content_filter", "message": "The response was filtered due to the "
                  "prompt triggering Azure OpenAI's content management policy. Please modify "
                  "your prompt and retry. To learn more about our content filtering policies "
                  "please read our documentation: \r\nhttps://go.microsoft.com/fwlink/?linkid="
                  "2198766.", "param": "prompt", "type": None}}), False, F),
    ("azure-content-filter-on-image-request", 400, {},
     # The same refusal on a request with an image: no media step, the policy decides.
     j({"error": {"code": "content_filter", "message": "The response was filtered due to the "
        "prompt triggering Azure OpenAI's content management policy. Please modify your prompt "
        "and retry.", "param": "prompt", "type": None, "innererror": {
            "code": "ResponsibleAIPolicyViolation", "content_filter_result": {
                "sexual": {"filtered": True, "severity": "medium"}}}}}), True, F),
    ("cerebras-requests-per-day", 429, {},
     cerebras("Requests per day limit exceeded - too many requests sent.",
              "too_many_requests_error", "quota", "request_quota_exceeded"), False, F),
    ("openrouter-free-models-per-day", 429, {},
     j({"error": {"message": "Rate limit exceeded: free-models-per-day. Add 10 credits to "
        "unlock 1000 free model requests per day", "code": 429, "metadata": {"headers": {
            "X-RateLimit-Limit": "50", "X-RateLimit-Remaining": "0",
            "X-RateLimit-Reset": "1764720000000"}}}}), False, F),
    ("bedrock-tokens-per-day", 429, aws("ThrottlingException"),
     j({"message": "Too many tokens per day, please wait before trying again."}), False, F),
    ("gemini-429-free-tier-per-day", 429, {},
     # The same words and a RetryInfo, but a day's quota: no wait inside a request helps.
     gemini_quota("GenerateRequestsPerDayPerProjectPerModel-FreeTier", 20, "36.43s"),
     False, F),
    ("gemini-429-limit-zero", 429, {},
     # continuedev/continue#9570: a model without a free tier has a per-minute limit of 0.
     gemini_quota("GenerateRequestsPerMinutePerProjectPerModel-FreeTier", 0, "45.57s"),
     False, F),
    ("openrouter-404-no-image-endpoints-text-only", 404, {},
     # The same words on a request without images: nothing to take out, a missing route.
     NO_IMAGE_ENDPOINTS, False, F),
    ("openrouter-404-no-tool-endpoints", 404, {},
     j({"error": {"message": "No endpoints found that support tool use. Try disabling "
        "\"get_current_timestamp\". To learn more about provider routing, visit: https://"
        "openrouter.ai/docs/guides/routing/provider-selection", "code": 404}}), True, F),
    ("deepseek-null-stop-deserialize", 422, {},
     # The same serde words about a parameter, not a message: nothing to repair.
     "Failed to deserialize the JSON body into the target type: stop: invalid type: null, "
     "expected a string at line 1 column 96", False, F),
    ("gemini-429-minute-and-day-quotas", 429, {},
     # A per-minute and a per-day quota both exceeded: the day's decides.
     google(429, "You exceeded your current quota, please check your plan and billing "
            "details.", "RESOURCE_EXHAUSTED",
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                {"quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"},
                {"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}),
     False, F),
    ("dashscope-data-inspection", 400, {},
     # Qwen's content moderation, on a request with an image: a policy, not the image.
     j({"code": "DataInspectionFailed", "message": "Input data may contain inappropriate "
        "content.", "request_id": "5f1c"}), True, F),
    ("litellm-bedrock-guardrail", 400, {},
     litellm("{'error': 'Violated guardrail policy', 'bedrock_guardrail_response': 'Sorry, the "
             "model cannot answer this question.'}"), True, F),
    ("cloudflare-challenge-403", 403, HTML,
     "<!DOCTYPE html><html lang=\"en-US\"><head><title>Just a moment...</title></head><body>"
     "Enable JavaScript and cookies to continue</body></html>", False, F),
    ("mistral-message-object-extra-field", 422, {},
     # Gage-Technologies/mistral-go#2, BerriAI/litellm#30835: a field Mistral does not take.
     mistral({"detail": [{"type": "extra_forbidden", "loc": ["body", "messages", 6,
                                                             "assistant", "reasoning_content"],
                          "msg": "Extra inputs are not permitted", "input": "\n"}]}),
     False, F),
    ("vertex-invalid-function-declaration", 400, {},
     # SuperClaude-Org/SuperGemini_Framework#12: the tool table, not the history.
     j([{"error": {"code": 400, "message": "The GenerateContentRequest proto is invalid:\n  * "
         "tools[0].function_declarations[12].name: [FIELD_INVALID] Invalid function name. Must "
         "start with a letter or an underscore. Must be a-z, A-Z, 0-9, or contain underscores, "
         "dots and dashes, with a maximum length of 64.", "status": "INVALID_ARGUMENT"}}]),
     False, F),
    ("ollama-model-does-not-support-tools", 400, {},
     j({"error": "registry.ollama.ai/library/gemma2:latest does not support tools"}), False, F),
    ("bedrock-tool-choice-unsupported", 400, AWS,
     j({"message": "This model doesn't support the toolConfig.toolChoice.any field. Remove "
                   "toolConfig.toolChoice.any and try again."}), False, F),
    ("openrouter-403-moderation", 403, {},
     j({"error": {"message": "openai/gpt-4o requires moderation on OpenAI. Your input was "
        "flagged for \"violence\".", "code": 403, "metadata": {"reasons": ["violence"],
                                                           "flagged_input": "...",
                                                           "provider_name": "OpenAI"}}}),
     False, F),
    ("vllm-auto-tool-choice-not-enabled", 400, {},
     mistral("\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to "
             "be set", "BadRequestError", 400), False, F),
    ("vertex-request-invalid-argument-bare", 400, {},
     google(400, "Request contains an invalid argument.", "INVALID_ARGUMENT"), False, F),
    ("deepseek-model-not-exist", 400, {},
     openai("Model Not Exist", code="invalid_request_error"), False, F),
    ("litellm-proxy-invalid-key", 401, {},
     j({"error": {"message": "Authentication Error, Invalid proxy server token passed. Received "
        "API Key = sk-...7f3a, Key Hash (Token) =3c5e9b. Unable to find token in cache or "
        "`LiteLLM_VerificationTokenTable`", "type": "auth_error", "param": "None",
        "code": "401"}}), False, F),
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
    assert len(CASES) >= 50
    assert len({c[0] for c in CASES}) == len(CASES)
    assert {v: kinds.count(v) >= 2 for v in Verdict} == dict.fromkeys(Verdict, True)


# --- SSE error events: a stream's first event that is a refusal ----------------------------
# Read as the gateway reads them before the first byte reaches the client: the ``data:``
# line's JSON is the error body, the status the one it states (or 502 when it states none).
SSE_CASES: list[tuple[str, bytes, bool, Verdict]] = [
    ("openrouter-chunk-with-error", b'data: {"id":"gen-17","object":"chat.completion.chunk",'
     b'"created":1764633600,"model":"x","provider":"Chutes","error":{"code":502,"message":'
     b'"Provider disconnected unexpectedly"},"choices":[{"index":0,"delta":{"content":""},'
     b'"finish_reason":"error"}]}\n\n', False, T),
    ("litellm-stream-context-window", b'data: {"error": {"message": "litellm.Context'
     b'WindowExceededError: litellm.BadRequestError: ContextWindowExceededError: '
     b'OpenAIException - This model\'s maximum context length is 32768 tokens. However, your '
     b'messages resulted in 40112 tokens.", "type": null, "param": null, "code": "400"}}\n\n',
     False, OV),
    ("anthropic-event-overloaded", b'event: error\ndata: {"type":"error","error":{"type":'
     b'"overloaded_error","message":"Overloaded"}}\n\n', False, T),
    ("vllm-stream-image-error", b'data: {"error": {"object": "error", "message": "At most 1 '
     b'image(s) may be provided in one request.", "type": "BadRequestError", "param": null, '
     b'"code": 400}}\n\n', True, M),
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

def _plan_after(name: str) -> tuple[Verdict, Any]:
    status, headers, body = next((c[1], c[2], c[3]) for c in CASES if c[0] == name)
    failure = failure_from_http(status, headers, body.encode(), "p")
    verdict, _ = explain(failure)
    ladder = Ladder(RecoveryPolicy(max_retry_after=30.0))
    return verdict, ladder.after_failure(ladder.first(), failure, verdict, elapsed=0.0)


@pytest.mark.parametrize(("name", "wait"), [
    ("azure-429-retry-after-ms", 1.5),  # retry-after-ms wins over the rounded Retry-After
    ("cerebras-tokens-per-minute", 7.0),
    ("litellm-no-deployments-cooldown", None),  # "Try again in 60 seconds": over 30s, give up
    ("gemini-429-free-tier-per-minute", 26.0),  # google.rpc.RetryInfo
])
def test_the_wait_is_the_one_the_provider_named(name: str, wait: float | None) -> None:
    verdict, plan = _plan_after(name)
    assert verdict is T
    if wait is None:
        assert isinstance(plan, GiveUp) and "exceeds" in plan.reason
    else:
        assert not isinstance(plan, GiveUp) and plan.step == "retry"
        assert plan.delay == pytest.approx(wait)


# --- the window an overflow states is learned (compaction plans below it) ------------------

@pytest.mark.parametrize(("name", "window"), [
    ("lmstudio-n-keep-over-n-ctx", 7424),
    ("lmstudio-tokens-to-keep", 4096),
    ("sglang-input-longer-than-context", 40960),
    ("sglang-input-length-exceeds-allowed", 59862),
    ("fireworks-prompt-too-long", 131072),
    ("cohere-v2-too-many-tokens", 128000),
    ("zhipu-anthropic-endpoint-1210", 202750),
    ("volcengine-ark-input-length", 202752),
    ("vllm-nested-decoder-prompt", 65536),
])
def test_the_overflow_names_its_window(name: str, window: int) -> None:
    body = next(c[3] for c in CASES if c[0] == name)
    assert overflow_numbers(body).window == window


# --- drop_params: a pydantic server's 422 naming a top-level field as an extra input ---------

def mistral_extra(*locs: list[Any]) -> str:
    return mistral({"detail": [{"type": "extra_forbidden", "loc": loc,
                                "msg": "Extra inputs are not permitted", "input": 32000}
                               for loc in locs]})


@pytest.mark.parametrize(("status", "body", "dropped"), [
    # editor-code-assistant/eca#231: Mistral refuses max_completion_tokens.
    (422, mistral_extra(["body", "max_completion_tokens"]), "max_completion_tokens"),
    (422, mistral_extra(["body", "n"], ["body", "parallel_tool_calls"]), "n"),
    # A message's own field (reasoning_content) is no request field to leave out.
    (422, mistral_extra(["body", "messages", 6, "assistant", "reasoning_content"]), None),
    (422, mistral_extra(["body", "stream"]), None),  # the request itself stays
    (422, mistral_extra(["body", "seed"]), None),  # not sent: nothing to drop
    (500, mistral_extra(["body", "max_completion_tokens"]), None),
])
def test_an_extra_input_refusal_names_the_field_to_drop(status: int, body: str,
                                                         dropped: str | None) -> None:
    fields = {"model": "m", "messages": [], "stream": False, "max_completion_tokens": 64,
              "n": 1, "parallel_tool_calls": True}
    failure = failure_from_http(status, {}, body.encode(), "mistral")
    assert unsupported_param(failure, fields) == dropped


# --- a model without images: the media rung leaves them out at once --------------------------

@pytest.mark.parametrize(("name", "step"), [
    ("openrouter-404-no-image-endpoints", "media=strip"),
    ("vllm-multimodal-disabled", "media=strip"),
    ("ollama-500-missing-vision-data", "media=strip"),
    ("azure-unsupported-image-mime", "media=degraded"),  # a re-encoded image passes
    ("bedrock-image-over-5mb", "media=degraded"),
])
def test_the_media_rung_skips_degrading_for_a_model_without_images(name: str,
                                                                   step: str) -> None:
    status, headers, body = next((c[1], c[2], c[3]) for c in CASES if c[0] == name)
    failure = failure_from_http(status, headers, body.encode(), "p")
    verdict, _ = explain(failure, has_images=True)
    ladder = Ladder()
    plan = ladder.after_failure(ladder.first(), failure, verdict, elapsed=0.0)
    assert verdict is M and not isinstance(plan, GiveUp)
    assert plan.step == step
    if step == "media=strip":  # and gives up when stripping is off, with the reason
        off = Ladder(RecoveryPolicy(strip_media_last=False))
        gave_up = off.after_failure(off.first(), failure, verdict, elapsed=0.0)
        assert isinstance(gave_up, GiveUp) and "media=strip disabled" in gave_up.reason


@pytest.mark.parametrize(("name", "named"), [
    ("openai-developer-role-invalid-value", True),
    ("groq-developer-role-discriminator", True),
    ("deepseek-developer-unknown-variant", True),
    ("kilo-developer-jsonschema", True),
    ("mistral-message-object-tool-order", False),  # another role refused: no conversion
    ("azure-tool-without-preceding-call-inner-error", False),
])
def test_the_refusal_says_whether_the_developer_role_is_refused(name: str, named: bool) -> None:
    status, headers, body = next((c[1], c[2], c[3]) for c in CASES if c[0] == name)
    failure = failure_from_http(status, headers, body.encode(), "p")
    assert developer_role_refused(" | ".join(failure_texts(failure))) is named
