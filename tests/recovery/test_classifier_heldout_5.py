"""A fifth round on the classifier: refusals an outside probe found misread, each in the
provider's own layout, read through ``failure_from_http`` and ``explain`` as the gateway
reads them. The traps: an overflow stated in tokens that names images or links a
"multimodal" page (compaction, never the media rung that strips the user's screenshot), an
overflow in words no earlier rule held (DeepInfra, TensorRT-LLM), a text-only model refusing
a part list with an image as a shape error (the media rung, not strict), and bills that come
as 429s or with a retry hint (given up at once, never retried)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.compaction.window import OverflowNumbers, overflow_numbers
from gateway.providers.errors import failure_from_http
from gateway.recovery.classifier import Verdict, explain

M, OV, F, S = Verdict.MEDIA, Verdict.OVERFLOW, Verdict.FATAL, Verdict.STRUCTURAL
JSON = {"content-type": "application/json"}

# vLLM (v1 input processor) serving a multimodal model (Gemma 3, Qwen2.5-VL, Llama 4).
VLLM_MULTIMODAL = (
    "The decoder prompt (length 140000) is longer than the maximum model length of 131072. "
    "Make sure that `max_model_len` is no smaller than the number of text tokens plus "
    "multimodal tokens. For image inputs, the number of image tokens depends on the number "
    "of images, and possibly their aspect ratios as well.")
VERTEX = ("Unable to submit request because the input token count is 1200000 but model only "
          "supports up to 1048576. Reduce the input token count and try again. You can also "
          "use the CountTokens API to calculate prompt token count and billable characters. "
          "Learn more: https://cloud.google.com/vertex-ai/generative-ai/docs/multimodal/"
          "send-multimodal-prompts")


def openai(message: str, kind: Any = "invalid_request_error", code: Any = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


CASES: dict[str, tuple[int, dict[str, str], Any, bool, Verdict]] = {
    "vLLM multimodal overflow, text only": (
        400, {}, openai(VLLM_MULTIMODAL, "BadRequestError", 400), False, OV),
    "vLLM multimodal overflow, with an image": (
        400, {}, openai(VLLM_MULTIMODAL, "BadRequestError", 400), True, OV),
    "Vertex overflow linking its multimodal page, with an image": (
        400, {}, {"error": {"code": 400, "message": VERTEX, "status": "INVALID_ARGUMENT"}},
        True, OV),
    "DeepInfra overflow, a 400": (
        400, {}, {"error": {"message": "Requested input length 39818 exceeds maximum input "
                                       "length 32767"}}, False, OV),
    "DeepInfra overflow, a 500": (
        500, {}, {"error": {"message": "Requested input length 39818 exceeds maximum input "
                                       "length 32767"}}, False, OV),
    "DeepInfra overflow through OpenRouter": (
        400, {}, {"error": {"message": "Provider returned error", "code": 400, "metadata": {
            "raw": "Requested input length 39818 exceeds maximum input length 32767",
            "provider_name": "DeepInfra"}}}, False, OV),
    "TensorRT-LLM overflow": (
        400, {}, {"object": "error", "message": "Prompt length (40000) exceeds maximum input "
                  "length (32767). Set log level to info and check TRTGptModel logs for how "
                  "maximum input length is set", "type": "BadRequestError", "param": None,
                  "code": 400}, False, OV),
    "Groq text-only model given an image part": (
        400, {}, {"error": {"message": "messages[1].content must be a string",
                            "type": "invalid_request_error", "param": "messages[1].content"}},
        True, M),
    "Groq's content shape without an image stays the history's": (
        400, {}, {"error": {"message": "messages[1].content must be a string",
                            "type": "invalid_request_error", "param": "messages[1].content"}},
        False, S),
    "Anthropic credits required, a 429": (
        429, {"x-should-retry": "true"}, {"type": "error", "error": {
            "type": "rate_limit_error", "message": "Usage credits are required for this model.",
            "details": {"error_code": "credits_required", "model": "claude-fable-5"}}},
        False, F),
    "Anthropic credit balance with a retry hint": (
        400, {"x-should-retry": "true"}, {"type": "error", "error": {
            "type": "invalid_request_error", "message": "Your credit balance is too low to "
            "access the Anthropic API. Please go to Plans & Billing to upgrade or purchase "
            "credits."}}, False, F),
    "OpenAI billing not active, a 429": (
        429, {}, openai("Your account is not active, please check your billing details on "
                        "our website.", "billing_not_active", "billing_not_active"), False, F),
    "OpenAI access terminated, naming an image": (
        429, {}, openai("Your access was terminated due to violation of our policies on image "
                        "generation, please check your email for more information.",
                        "access_terminated", "access_terminated"), True, F),
    "a code under error_code alone": (
        429, {}, {"error": {"message": "Request refused.", "error_code": "billing_not_active"}},
        False, F),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_refusal_takes_its_rung(case: str) -> None:
    status, headers, body, images, verdict = CASES[case]
    failure = failure_from_http(status, {**JSON, **headers}, json.dumps(body).encode(), "p")
    assert explain(failure, has_images=images)[0] is verdict, explain(failure,
                                                                      has_images=images)


def test_a_refusal_without_figures_naming_an_image_is_still_media() -> None:
    # "too long" beside an image, no token figures: Bedrock's oversized image payload.
    body = {"message": "Input is too long for requested model."}
    failure = failure_from_http(400, {**JSON, "x-amzn-errortype": "ValidationException"},
                                json.dumps(body).encode(), "bedrock")
    assert explain(failure, has_images=True)[0] is M
    body = openai("Image too large: 25000000 bytes exceeds the maximum of 20971520 bytes")
    failure = failure_from_http(400, JSON, json.dumps(body).encode(), "p")
    assert explain(failure, has_images=True)[0] is M


@pytest.mark.parametrize(("text", "numbers"), [
    ("Requested input length 39818 exceeds maximum input length 32767",
     OverflowNumbers(32767, 39818)),
    (VLLM_MULTIMODAL, OverflowNumbers(131072, 140000)),
])
def test_the_stated_window_is_read_from_the_new_wordings(
        text: str, numbers: OverflowNumbers) -> None:
    assert overflow_numbers(text) == numbers
