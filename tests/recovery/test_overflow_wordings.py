"""Overflow refusals in the words of providers the first classifier missed (Vertex AI,
vLLM V1, xAI, Hugging Face TGI, Cerebras): each is an overflow (compaction helps), and the
window and prompt sizes they state are read."""

from __future__ import annotations

import json

import pytest

from gateway.compaction.window import overflow_numbers
from gateway.providers.failure import UpstreamFailure
from gateway.recovery.classifier import Verdict, classify

WORDINGS = {
    "vertex": (400, {"error": {"code": 400, "status": "INVALID_ARGUMENT", "message":
        "Unable to submit request because the input token count is 1195935 but model only "
        "supports up to 1048576. Reduce the input token count and try again."}},
        1048576, 1195935),
    "vllm_v1": (400, {"object": "error", "type": "BadRequestError", "code": 400, "message":
        "The decoder prompt (length 40000) is longer than the maximum model length of 32768. "
        "Make sure that `max_model_len` is no smaller than the number of text tokens."},
        32768, 40000),
    "xai": (400, {"code": "Client specified an invalid argument", "error":
        "This model's maximum prompt length is 131072 but the request contains 150000 "
        "tokens."}, 131072, 150000),
    "tgi": (422, {"error": "Input validation error: `inputs` must have less than 4096 tokens. "
        "Given: 5000", "error_type": "validation"}, 4096, 5000),
    "cerebras": (400, {"message": "Please reduce the length of the messages or completion. "
        "Current length is 9000 while limit is 8192", "type": "invalid_request_error",
        "param": "messages", "code": "context_length_exceeded"}, 8192, 9000),
    "bedrock_titan": (400, {"message": "Malformed input request: 400 Bad Request: Too many "
        "input tokens. Max input tokens: 8192, request input token count: 9000 "}, 8192, 9000),
    # A server's own length setting named beside the prompt (vLLM-style, ExLlama/TabbyAPI).
    "max_model_len": (400, {"object": "error", "message": "This model's max_model_len is "
        "8192, but the prompt has 12001 tokens.", "code": 400}, 8192, 12001),
    "tabbyapi_max_seq_len": (400, {"detail": "Prompt length 12001 is greater than "
        "max_seq_len 8192"}, 8192, 12001),
    "exllama_422": (422, {"detail": [{"type": "value_error", "msg": "Value error, Prompt "
        "exceeds max_seq_len (12001 > 8192)"}]}, 8192, 12001),
    "at_most_n_tokens": (400, {"message": "invalid request: prompt must be at most 8192 "
        "tokens, received 12001 tokens"}, 8192, 12001),
    # llama.cpp server answers a prompt past its KV cache with a 500 (not a transient).
    "llamacpp_kv_size": (500, {"error": {"code": 500, "message": "Input prompt is too big "
        "compared to KV size. Please try increasing KV size.", "type": "server_error"}},
        None, None),
    "zhipu_chinese": (400, {"error": {"code": "1261", "message": "Prompt 超过最大长度，"
        "请压缩输入后重试"}}, None, None),
}


@pytest.mark.parametrize("name", sorted(WORDINGS))
def test_the_wording_is_an_overflow_with_its_numbers(name: str) -> None:
    status, body, window, prompt = WORDINGS[name]
    raw = json.dumps(body)
    failure = UpstreamFailure(status=status, provider=name, message=raw, body=raw.encode())
    assert classify(failure) is Verdict.OVERFLOW
    numbers = overflow_numbers(raw)
    assert (numbers.window, numbers.prompt) == (window, prompt)


@pytest.mark.parametrize("text", [
    "The decoder prompt is fine; max_model_len was raised",
    "Invalid value for max_seq_len parameter",
    "This model supports up to 10 images per request",
])
def test_near_misses_state_no_window(text: str) -> None:
    assert overflow_numbers(text).window is None
