"""A part of test_classifier_heldout_4's refusals end to end: a real gateway on loopback, the
real ``openai`` SDK (and ``anthropic`` for the Messages wire), and an upstream (the referee)
that answers the provider's body once, with its status and content type, and judges normally
after. What the client gets and what the upstream received show the rung taken; where no rung
applies, the provider's error reaches the client at once, in the client's wire format.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import assistant, user
from tests.recovery.e2e_support import client, start_gateway
from tests.recovery.test_classifier_heldout_4 import (
    CASES,
    OPENROUTER_WHOLE_WINDOW_OUTPUT,
    SSE_CASES,
    TOGETHER_WHOLE_WINDOW_OUTPUT,
)
from tests.recovery.test_e2e_heldout_2 import agent_history, image_side, wide_png

BODY = {name: (status, headers, body) for name, status, headers, body, _i, _v in CASES}
EVENT = {name: event for name, event, _i, _v in SSE_CASES}
TWO_ASSISTANTS = [user("q"), assistant("first"), assistant("second"), user("next")]
SSE = {"content-type": "text/event-stream"}


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai") as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await start_gateway(gateway_factory, referee.base_url)


def script(referee: Referee, name: str, **headers: str) -> None:
    status, case_headers, body = BODY[name]
    referee.script(status, body, {**case_headers, **headers})


# --- structural: the strict rung ---------------------------------------------------------

@pytest.mark.parametrize("name", [
    "gemini-list-function-call-turn-order",  # Gemini's list-wrapped body
    "bedrock-converse-blank-text-field",
    "openrouter-bedrock-conversation-starts-assistant",
])
async def test_structural_refusal_takes_the_strict_rung(
    gw: RunningGateway, referee: Referee, name: str
) -> None:
    script(referee, name)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                messages=TWO_ASSISTANTS)
    assert raw.parse().choices[0].message.content == "referee: accepted 3 messages"
    assert raw.headers["x-gateway-recovery"] == "strict"
    first, second = (r.json()["messages"] for r in referee.requests)
    assert [m["role"] for m in first] == ["user", "assistant", "assistant", "user"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]


# --- media: the degraded rung ------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "anthropic-image-media-type-mismatch",
    "gemini-list-unsupported-mime-type",
    "openrouter-vertex-anthropic-image",  # Anthropic's words inside OpenRouter's raw
])
async def test_media_refusal_degrades_the_image(
    gateway_factory: GatewayFactory, referee: Referee, name: str
) -> None:
    gw = await start_gateway(gateway_factory, referee.base_url,
                             media={"max_side": 256, "allowed_formats": ["png", "jpeg"]})
    script(referee, name)
    messages = [user([{"type": "text", "text": "what is this?"},
                      {"type": "image_url", "image_url": {"url": wide_png()}}])]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=messages)
    assert raw.parse().choices[0].message.content == "referee: accepted 1 messages"
    assert raw.headers["x-gateway-recovery"] == "media=degraded"
    first, second = (r.json() for r in referee.requests)
    assert image_side(first) == 1200
    assert image_side(second) <= 256


# --- overflow: compaction ----------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "llamacpp-request-tokens-over-context-size",
    "vllm-output-and-input-tokens-total",
    "tgi-422-inputs-plus-new-tokens",
    "litellm-500-relabelled-overflow",  # a 500 that is an overflow: compacted, not retried
    "gemini-list-input-token-count",
])
async def test_overflow_refusal_is_compacted(
    gateway_factory: GatewayFactory, referee: Referee, name: str
) -> None:
    gw = await start_gateway(gateway_factory, referee.base_url, max_input_tokens=2_000_000)
    script(referee, name)
    history = agent_history(6)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=history)
    assert raw.parse().choices[0].message.content.startswith("referee: accepted")
    assert raw.headers["x-gateway-recovery"] == "compact"
    assert referee.requests[0].status == BODY[name][0]
    assert referee.requests[-1].status == 200
    assert len(referee.requests[-1].json()["messages"]) < len(history)


VLLM_WHOLE_WINDOW_OUTPUT = json.dumps({"error": {
    "message": "This model's maximum context length is 32768 tokens. However, you requested "
               "32768 output tokens and your prompt contains at least 2210 input tokens, for a "
               "total of at least 34978 tokens. Please reduce the length of the input prompt "
               "or the number of requested output tokens.",
    "type": "BadRequestError", "param": None, "code": 400}})


@pytest.mark.parametrize(("body", "budget", "lowered"), [
    (VLLM_WHOLE_WINDOW_OUTPUT, 32768, 32768 - 2210 - 16),  # vLLM 0.20
    (OPENROUTER_WHOLE_WINDOW_OUTPUT, 131072, 131072 - 7884 - 16),
    (TOGETHER_WHOLE_WINDOW_OUTPUT, 32768, 32769 - 1200 - 16),
], ids=["vllm", "openrouter", "together-tgi"])
async def test_a_budget_filling_the_window_is_lowered_and_the_history_kept(
    gw: RunningGateway, referee: Referee, body: str, budget: int, lowered: int
) -> None:
    # The client's max_tokens is the whole window (a common default of agents): compacting
    # the history can never make room beside it; the budget is lowered to what is left.
    referee.script(400, body)
    history = [user("plan the release"), assistant("Here is the plan."), user("go on")]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=history, max_tokens=budget)
    assert raw.parse().choices[0].message.content.startswith("referee: accepted")
    first, second = (r.json() for r in referee.requests)
    assert first["max_tokens"] == budget
    assert second["max_tokens"] == lowered
    assert second["messages"] == first["messages"]  # nothing summarized
    assert raw.headers["x-gateway-compaction"].startswith("output_lowered;")


# --- transient: backoff ------------------------------------------------------------------

@pytest.mark.parametrize(("name", "headers"), [
    # "reduce the prompt length ... or try again later": the minute's budget, waited for.
    ("anthropic-429-input-tokens-per-minute", {"retry-after": "0"}),
    # "Please try again in 6.375s", shortened by the header the provider also sends.
    ("groq-429-minutes-and-seconds", {"retry-after": "0"}),
    ("gemini-list-503-overloaded", {}),
    ("hf-503-model-loading", {}),
    ("envoy-503-no-healthy-upstream", {}),  # plain text
    ("google-front-end-502", {}),  # an HTML page
])
async def test_transient_refusal_is_retried_unchanged(
    gw: RunningGateway, referee: Referee, name: str, headers: dict[str, str]
) -> None:
    script(referee, name, **headers)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                messages=agent_history(2))
    assert raw.parse().choices[0].message.content.startswith("referee: accepted")
    assert raw.headers["x-gateway-recovery"] == "retry"
    assert [r.status for r in referee.requests] == [BODY[name][0], 200]
    assert referee.requests[0].body == referee.requests[1].body


# --- give up at once, in the client's wire format ----------------------------------------

@pytest.mark.parametrize(("name", "error", "words"), [
    ("ollama-500-system-memory", openai.InternalServerError, "requires more system memory"),
    ("openai-429-insufficient-quota-retry-words", openai.RateLimitError, "current quota"),
    ("zhipu-429-1113-chinese", openai.RateLimitError, "余额不足"),  # a bill on a 429
    ("cloudflare-workers-ai-4006-daily-neurons", openai.RateLimitError,
     "daily free allocation"),  # a day's quota on a 429
    ("gemini-list-response-mime-type", openai.BadRequestError, "response mime type"),
    ("anthropic-context-management-extra-input", openai.BadRequestError,
     "context_management"),
    ("bedrock-on-demand-throughput", openai.BadRequestError, "inference profile"),
    # OpenRouter's raw body as an object: the provider's words, not "Provider returned error"
    ("openrouter-raw-object-extra-input", openai.BadRequestError,
     "context_management: Extra inputs are not permitted"),
    ("lmstudio-insufficient-resources", openai.BadRequestError,
     "insufficient system resources"),
])
async def test_a_refusal_no_rung_fixes_is_relayed_at_once(
    gw: RunningGateway, referee: Referee, name: str, error: type[openai.APIStatusError],
    words: str
) -> None:
    script(referee, name)
    async with client(gw) as c:
        with pytest.raises(error) as info:
            await c.chat.completions.create(model="demo", messages=agent_history(1))
    response = info.value.response
    assert response.status_code == BODY[name][0]
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["x-gateway-attempts"] == "1"
    got = response.json()
    assert got["gateway"]["gave_up"].startswith("fatal:")
    assert words in got["error"]["message"]
    assert len(referee.requests) == 1


async def test_a_server_that_cannot_load_the_model_reaches_a_messages_client_at_once(
    gw: RunningGateway, referee: Referee
) -> None:
    script(referee, "ollama-500-system-memory")
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                        max_retries=0) as c:
        with pytest.raises(anthropic.InternalServerError) as info:
            await c.messages.create(model="demo", max_tokens=64,
                                    messages=[{"role": "user", "content": "hi"}])
    got = info.value.response.json()
    assert got["type"] == "error"
    assert "requires more system memory (7.5 GiB)" in got["error"]["message"]
    assert len(referee.requests) == 1


# --- errors inside a 200 stream, before the first byte reached the client ----------------

async def read_stream(stream: Any) -> str:
    text = ""
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    return text


async def test_an_overflow_in_a_200_stream_is_compacted(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    # llama-server reports the overflow as the stream's first event, on a 200.
    gw = await start_gateway(gateway_factory, referee.base_url, max_input_tokens=100_000)
    referee.script(200, EVENT["llamacpp-stream-context-size"], SSE)
    history = agent_history(6)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=history, stream=True)
        assert raw.headers["x-gateway-recovery"] == "compact"
        text = await read_stream(raw.parse())
    assert text.startswith("referee: accepted")
    assert len(referee.requests[-1].json()["messages"]) < len(history)


async def test_an_overloaded_gemini_stream_is_retried(
    gw: RunningGateway, referee: Referee
) -> None:
    referee.script(200, EVENT["gemini-stream-overloaded"], SSE)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=[user("stream please")], stream=True)
        assert raw.headers["x-gateway-recovery"] == "retry"
        text = await read_stream(raw.parse())
    assert text == "referee: accepted 1 messages"
    assert len(referee.requests) == 2


async def test_a_quota_error_in_a_200_stream_is_a_json_error_at_once(
    gw: RunningGateway, referee: Referee
) -> None:
    referee.script(200, EVENT["responses-stream-insufficient-quota"], SSE)
    async with client(gw) as c:
        with pytest.raises(openai.RateLimitError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")], stream=True)
    response = info.value.response
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["x-gateway-attempts"] == "1"
    assert "check your plan and billing" in json.loads(response.text)["error"]["message"]
    assert len(referee.requests) == 1


async def test_a_retry_after_of_a_day_is_relayed_at_once_not_waited_for(
    gw: RunningGateway, referee: Referee
) -> None:
    # Azure's token-rate 429 asking for a day: no wait inside a request can honour it.
    script(referee, "azure-429-day-long-retry")
    async with client(gw) as c:
        with pytest.raises(openai.RateLimitError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
    response = info.value.response
    assert response.headers["x-gateway-attempts"] == "1"
    assert response.headers["retry-after"] == "86400"  # the client learns the wait
    assert "exceeds" in response.json()["gateway"]["gave_up"]
    assert len(referee.requests) == 1
