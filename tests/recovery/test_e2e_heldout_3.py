"""A representative third of test_classifier_heldout_3's refusals end to end: a real gateway
on loopback, the real ``openai`` SDK (and ``anthropic`` for the Messages wire), and an
upstream (the referee) that answers the provider's body first, with its status and content
type, and judges normally after. What the client gets and what the upstream received show the
rung; no refusal leaks the upstream key.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import assistant, system, user
from tests.recovery.e2e_support import FAST_RECOVERY, client, start_gateway
from tests.recovery.test_classifier_heldout_2 import CASES as SECOND_CASES
from tests.recovery.test_classifier_heldout_3 import (
    CASES,
    gemini_quota,
    mistral_extra,
)
from tests.recovery.test_e2e_heldout_2 import agent_history, image_side, wide_png

BODY = {name: (status, headers, body) for name, status, headers, body, _i, _v in CASES}
TWO_ASSISTANTS = [user("q"), assistant("first"), assistant("second"), user("next")]
UPSTREAM_KEY = "upstream-secret-key"  # model_entry's default api_key
SSE = {"content-type": "text/event-stream"}


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai") as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await start_gateway(gateway_factory, referee.base_url,
                               media={"max_side": 256, "allowed_formats": ["png", "jpeg"]})


def script(referee: Referee, name: str, *, times: int = 1, **headers: str) -> None:
    status, case_headers, body = BODY[name]
    referee.script(status, body, {**case_headers, **headers}, times=times)


# --- structural: the strict rung ---------------------------------------------------------

@pytest.mark.parametrize("name", [
    "bedrock-conversation-and-tool-use-same-turn",
    "litellm-bedrock-tool-results-exceed",
    "vertex-at-least-one-parts-field",
    "gemini-parts-must-not-be-empty",
    "llamacpp-two-assistants-at-end",
    "openrouter-vertex-function-response-turn",
    "mistral-message-object-tool-order",
    "deepseek-null-content-deserialize",  # a 422 in plain text
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
    assert raw.headers["x-gateway-attempts"] == "2"
    first, second = (r.json()["messages"] for r in referee.requests)
    assert [m["role"] for m in first] == ["user", "assistant", "assistant", "user"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]  # merged


async def test_no_user_turn_refusal_puts_a_user_turn_in_front(
    gw: RunningGateway, referee: Referee
) -> None:
    # A trimmed session that starts mid-exchange; Qwen's template (LM Studio) wants a user.
    script(referee, "lmstudio-no-user-query")
    messages = [system("You are terse."), assistant("Done: the tests pass.")]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=messages)
    assert raw.headers["x-gateway-recovery"] == "strict"
    first, second = (r.json()["messages"] for r in referee.requests)
    assert [m["role"] for m in first] == ["system", "assistant"]
    assert [m["role"] for m in second] == ["system", "user", "assistant"]
    assert "<system-reminder>" in second[1]["content"]


# --- media: the degraded rung ------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "azure-unsupported-image-mime",
    "vertex-cannot-fetch-url",
    "openrouter-gemini-image-retry-wording",
    "mistral-message-object-image-url",
    "cloudflare-413-html-with-images",
])
async def test_media_refusal_degrades_the_image(
    gw: RunningGateway, referee: Referee, name: str
) -> None:
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


SECOND_ROUND = {name: (status, headers, body) for name, status, headers, body, _i, _v
                in SECOND_CASES}


@pytest.mark.parametrize("name", [
    "openrouter-404-no-image-endpoints", "vllm-multimodal-disabled", "llamacpp-no-mmproj",
    "lmstudio-text-only-model", "ollama-500-missing-vision-data"])
async def test_a_model_without_images_gets_the_request_without_them_at_once(
    gw: RunningGateway, referee: Referee, name: str
) -> None:
    # A smaller image fails the same way: no degraded resend, the images are left out.
    status, headers, body = BODY.get(name) or SECOND_ROUND[name]
    referee.script(status, body, headers)
    messages = [user([{"type": "text", "text": "what is this?"},
                      {"type": "image_url", "image_url": {"url": wide_png()}}])]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=messages)
    assert raw.parse().choices[0].message.content == "referee: accepted 1 messages"
    assert raw.headers["x-gateway-recovery"] == "media=strip"
    assert [r.status for r in referee.requests] == [status, 200]
    final = referee.requests[-1].json()["messages"][0]["content"]
    assert all(part.get("type") != "image_url" for part in final)
    assert "what is this?" in json.dumps(final)


# --- overflow: compaction ----------------------------------------------------------------

@pytest.mark.parametrize("name", [
    "lmstudio-n-keep-over-n-ctx",
    "sglang-input-length-exceeds-allowed",
    "together-tgi-inputs-plus-new-tokens",
    "fireworks-prompt-too-long",
    "zhipu-glm-1261",
])
async def test_overflow_refusal_is_compacted(
    gateway_factory: GatewayFactory, referee: Referee, name: str
) -> None:
    gw = await start_gateway(gateway_factory, referee.base_url, max_input_tokens=100_000)
    script(referee, name)
    history = agent_history(6)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=history)
    assert raw.parse().choices[0].message.content.startswith("referee: accepted")
    assert raw.headers["x-gateway-recovery"] == "compact"
    assert referee.requests[0].status == BODY[name][0]
    final = referee.requests[-1].json()["messages"]
    assert referee.requests[-1].status == 200
    assert len(final) < len(history)  # the compacted history, not the same one again


# --- transient: backoff ------------------------------------------------------------------

@pytest.mark.parametrize(("name", "headers"), [
    # Cerebras's per-minute token limit: waited for, never compacted ("too many tokens").
    ("cerebras-tokens-per-minute", {"retry-after": "0"}),
    ("azure-429-retry-after-ms", {"retry-after-ms": "20", "retry-after": "0"}),
    ("openrouter-529-overloaded", {}),
    ("envoy-503-plain-overflow", {}),
    ("cloudflare-502-html", {}),
])
async def test_transient_refusal_is_retried_unchanged(
    gw: RunningGateway, referee: Referee, name: str, headers: dict[str, str]
) -> None:
    script(referee, name, **headers)
    history = agent_history(2)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo", messages=history)
    assert raw.parse().choices[0].message.content.startswith("referee: accepted")
    assert raw.headers["x-gateway-recovery"] == "retry"
    assert [r.status for r in referee.requests] == [BODY[name][0], 200]
    assert referee.requests[0].body == referee.requests[1].body


async def test_a_per_minute_gemini_quota_is_waited_for(
    gw: RunningGateway, referee: Referee
) -> None:
    # Billing words, a per-minute quotaId and a RetryInfo: the wait the body names.
    referee.script(429, gemini_quota("GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                                     10, "0.05s"))
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                messages=[user("hi")])
    assert raw.headers["x-gateway-recovery"] == "retry"
    assert [r.status for r in referee.requests] == [429, 200]


async def test_a_per_day_gemini_quota_is_relayed_at_once(
    gw: RunningGateway, referee: Referee
) -> None:
    referee.script(429, gemini_quota("GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                                     20, "0.05s"))
    async with client(gw) as c:
        with pytest.raises(openai.RateLimitError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
    assert info.value.response.headers["x-gateway-attempts"] == "1"
    assert "check your plan and billing" in info.value.response.json()["error"]["message"]
    assert len(referee.requests) == 1


# --- give up at once, in the client's wire format ----------------------------------------

@pytest.mark.parametrize(("name", "error"), [
    ("azure-content-filter-inner-error", openai.BadRequestError),
    ("mistral-message-object-extra-field", openai.UnprocessableEntityError),
    ("openrouter-free-models-per-day", openai.RateLimitError),
    ("bedrock-tokens-per-day", openai.RateLimitError),
    ("vertex-request-invalid-argument-bare", openai.BadRequestError),
    ("cloudflare-challenge-403", openai.PermissionDeniedError),  # an HTML page upstream
])
async def test_a_refusal_no_rung_fixes_is_relayed_at_once(
    gw: RunningGateway, referee: Referee, name: str, error: type[openai.APIStatusError]
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
    message = got["error"]["message"]
    assert isinstance(message, str) and message  # an object upstream, a string here
    assert len(referee.requests) == 1


async def test_a_policy_refusal_of_a_request_with_an_image_keeps_the_image(
    gw: RunningGateway, referee: Referee
) -> None:
    # Moderation, not the image: no media rung, the provider's words reach the client.
    script(referee, "dashscope-data-inspection")
    messages = [user([{"type": "text", "text": "what is this?"},
                      {"type": "image_url", "image_url": {"url": wide_png()}}])]
    async with client(gw) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="demo", messages=messages)
    got = info.value.response.json()
    assert got["error"]["message"] == "Input data may contain inappropriate content."
    assert info.value.response.headers["x-gateway-attempts"] == "1"
    assert len(referee.requests) == 1


async def test_a_streamed_request_refused_for_good_gets_a_json_error(
    gw: RunningGateway, referee: Referee
) -> None:
    # Nothing was streamed yet: the refusal is an HTTP error the SDK raises, not an event.
    script(referee, "azure-content-filter-inner-error")
    async with client(gw) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")], stream=True)
    response = info.value.response
    assert response.headers["content-type"].startswith("application/json")
    assert "content management policy" in response.json()["error"]["message"]
    assert len(referee.requests) == 1


@pytest.mark.parametrize("drop_params", [True, False])
async def test_a_field_mistral_refuses_as_extra_is_dropped_where_drop_params_allows(
    gateway_factory: GatewayFactory, referee: Referee, drop_params: bool
) -> None:
    gw = await gateway_factory({
        "model_list": [model_entry("demo", referee.base_url, model="openai/referee")],
        "litellm_settings": {"drop_params": drop_params}, "recovery": FAST_RECOVERY})
    referee.script(422, mistral_extra(["body", "max_completion_tokens"]))
    async with client(gw) as c:
        if not drop_params:
            with pytest.raises(openai.UnprocessableEntityError) as info:
                await c.chat.completions.create(model="demo", messages=[user("hi")],
                                                max_completion_tokens=64)
            assert "Extra inputs are not permitted" in info.value.response.json()["error"][
                "message"]
            assert len(referee.requests) == 1
            return
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=[user("hi")], max_completion_tokens=64)
    assert raw.headers["x-gateway-recovery"] == "drop_param"
    first, second = (r.json() for r in referee.requests)
    assert first["max_completion_tokens"] == 64
    assert "max_completion_tokens" not in second
    assert second["messages"] == first["messages"]


async def test_a_message_object_reaches_a_messages_client_as_its_error(
    gw: RunningGateway, referee: Referee
) -> None:
    script(referee, "mistral-message-object-extra-field")
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                        max_retries=0) as c:
        with pytest.raises(anthropic.UnprocessableEntityError) as info:
            await c.messages.create(model="demo", max_tokens=64,
                                    messages=[{"role": "user", "content": "hi"}])
    got = info.value.response.json()
    assert got["type"] == "error"
    assert isinstance(got["error"]["message"], str)
    assert "Extra inputs are not permitted" in got["error"]["message"]
    assert len(referee.requests) == 1


# --- nothing leaks: a refusal that echoes the upstream key -------------------------------

ECHOES: list[tuple[int, str, type[openai.APIStatusError], str]] = [
    (401, '{"error":{"message":"Incorrect API key provided: ' + UPSTREAM_KEY + '. You can '
          'find your API key at https://platform.openai.com/account/api-keys.","type":'
          '"invalid_request_error","param":null,"code":"invalid_api_key"}}',
     openai.AuthenticationError, "fatal:"),
    # OpenRouter relaying a provider body that echoes the request's headers.
    (400, '{"error":{"message":"Provider returned error","code":400,"metadata":{"raw":'
          '"{\\"message\\":\\"Conversation blocks and tool use blocks cannot be provided in '
          'the same turn.\\",\\"request_headers\\":{\\"authorization\\":\\"Bearer '
          + UPSTREAM_KEY + '\\"}}","provider_name":"Amazon Bedrock"}}}',
     openai.BadRequestError, "structural:"),
]


@pytest.mark.parametrize(("status", "body", "error", "gave_up"), ECHOES,
                         ids=["401-key-in-message", "400-key-in-metadata-raw"])
async def test_a_refusal_echoing_the_key_reaches_the_client_without_it(
    gw: RunningGateway, referee: Referee, status: int, body: str,
    error: type[openai.APIStatusError], gave_up: str
) -> None:
    referee.script(status, body, times=2)
    async with client(gw) as c:
        with pytest.raises(error) as info:
            await c.chat.completions.create(model="demo", messages=TWO_ASSISTANTS)
    response = info.value.response
    assert response.status_code == status
    assert response.json()["gateway"]["gave_up"].startswith(gave_up)
    assert UPSTREAM_KEY not in response.text
    assert all(UPSTREAM_KEY not in value for value in response.headers.values())


# --- SSE error events --------------------------------------------------------------------

def sse(*events: dict[str, Any] | str) -> str:
    return "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events)


OPENROUTER_ERROR_CHUNK = {
    "id": "gen-17", "object": "chat.completion.chunk", "created": 1764633600, "model": "x",
    "provider": "Chutes", "error": {"code": 502, "message": "Provider disconnected unexpectedly"},
    "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]}
LITELLM_OVERFLOW_EVENT = {"error": {
    "message": "litellm.ContextWindowExceededError: litellm.BadRequestError: "
               "ContextWindowExceededError: OpenAIException - This model's maximum context "
               "length is 32768 tokens. However, your messages resulted in 40112 tokens.",
    "type": None, "param": None, "code": "400"}}


async def read_stream(stream: Any) -> str:
    text = ""
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    return text


async def test_a_first_event_error_on_a_200_stream_is_retried(
    gw: RunningGateway, referee: Referee
) -> None:
    referee.script(200, sse(OPENROUTER_ERROR_CHUNK, "[DONE]"), SSE)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=[user("stream please")], stream=True)
        assert raw.headers["x-gateway-recovery"] == "retry"
        assert raw.headers["x-gateway-attempts"] == "2"
        text = await read_stream(raw.parse())
    assert text == "referee: accepted 1 messages"
    assert len(referee.requests) == 2


async def test_a_first_event_overflow_on_a_200_stream_is_compacted(
    gateway_factory: GatewayFactory, referee: Referee
) -> None:
    gw = await start_gateway(gateway_factory, referee.base_url, max_input_tokens=100_000)
    referee.script(200, sse(LITELLM_OVERFLOW_EVENT), SSE)
    history = agent_history(6)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=history, stream=True)
        assert raw.headers["x-gateway-recovery"] == "compact"
        text = await read_stream(raw.parse())
    assert text.startswith("referee: accepted")
    assert len(referee.requests[-1].json()["messages"]) < len(history)


async def test_an_error_event_after_the_first_byte_ends_the_stream_without_a_retry(
    gw: RunningGateway, referee: Referee
) -> None:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1764633600,
             "model": "x", "choices": [{"index": 0, "delta": {"role": "assistant",
                                                            "content": "partial "}}]}
    error = {"error": {"message": "Provider disconnected unexpectedly (key "
                       + UPSTREAM_KEY + ")", "code": 502}}
    referee.script(200, sse(chunk, error), SSE)
    text = ""
    async with client(gw) as c:
        stream = await c.chat.completions.create(model="demo", messages=[user("hi")],
                                                 stream=True)
        with pytest.raises(openai.APIError) as info:
            async for part in stream:
                if part.choices:
                    text += part.choices[0].delta.content or ""
    assert text == "partial "
    assert UPSTREAM_KEY not in str(info.value.message)
    assert len(referee.requests) == 1  # no ladder step once a byte reached the client



async def test_retries_used_up_on_an_html_page_end_in_a_json_error(
    gw: RunningGateway, referee: Referee
) -> None:
    script(referee, "cloudflare-502-html", times=4)  # the first answer and three retries
    async with client(gw) as c:
        with pytest.raises(openai.InternalServerError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
    response = info.value.response
    assert response.status_code == 502
    assert response.headers["content-type"].startswith("application/json")
    assert response.headers["x-gateway-attempts"] == "4"
    got = response.json()
    assert got["gateway"]["gave_up"] == "transient: 3 retries used"
    assert "<html" not in got["error"]["message"].lower()
    assert "502: Bad gateway" in got["error"]["message"]
    assert len(referee.requests) == 4
