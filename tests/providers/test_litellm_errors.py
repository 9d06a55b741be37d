"""Provider refusals through litellm become UpstreamError with the provider's own words."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.providers.base import UpstreamCall, UpstreamError
from gateway.providers.failure import UpstreamFailure
from gateway.providers.litellm_adapter import LiteLLMProvider
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.gemini_server import FakeGemini, gemini_error
from tests.fakes.native_base import Canned, MidStreamError, read_sse

BODY = {"messages": [{"role": "user", "content": "hello there my good friend"}], "max_tokens": 50}

# litellm builds pydantic schemas lazily and pydantic warns about ReadOnly TypedDict items
# then; harmless, but -W error would turn it into a failed upstream call.
pytestmark = pytest.mark.filterwarnings("ignore:.*using the `ReadOnly` qualifier:UserWarning")


@pytest.fixture
async def anthropic() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@pytest.fixture
async def gemini() -> AsyncIterator[FakeGemini]:
    async with FakeGemini() as server:
        yield server


def claude(fake: FakeAnthropic) -> LiteLLMProvider:
    return LiteLLMProvider(
        "claude",
        {"model": "anthropic/claude-sonnet-4-5", "api_base": fake.base_url, "api_key": "sk-fake"},
    )


def gem(fake: FakeGemini) -> LiteLLMProvider:
    return LiteLLMProvider(
        "gem", {"model": "gemini/gemini-2.5-flash", "api_base": fake.base_url, "api_key": "fake"}
    )


async def refusal(provider: LiteLLMProvider, stream: bool) -> UpstreamFailure:
    with pytest.raises(UpstreamError) as caught:
        await provider.send(UpstreamCall(body=BODY, stream=stream))
    return caught.value.failure


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("canned", "status", "message"),
    [
        (
            anthropic_error(400, "prompt is too long: 219898 tokens > 200000 maximum"),
            400,
            "prompt is too long: 219898 tokens > 200000 maximum",
        ),
        (
            anthropic_error(
                429,
                "This request would exceed the rate limit for your organization",
                "rate_limit_error",
            ),
            429,
            "This request would exceed the rate limit for your organization",
        ),
        (
            anthropic_error(401, "invalid x-api-key", "authentication_error"),
            401,
            "invalid x-api-key",
        ),
    ],
)
async def test_anthropic_refusal_keeps_status_and_message(
    anthropic: FakeAnthropic, canned: Canned, status: int, message: str, stream: bool
) -> None:
    anthropic.script(canned)
    failure = await refusal(claude(anthropic), stream)
    assert (failure.status, failure.message, failure.provider) == (status, message, "claude")
    assert "litellm" not in failure.message and "Exception" not in failure.message


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("canned", "status", "message"),
    [
        (
            gemini_error(
                400,
                "The input token count (3475108) exceeds the maximum number of "
                "tokens allowed (1048576).",
            ),
            400,
            "The input token count (3475108) exceeds the maximum number of tokens allowed "
            "(1048576).",
        ),
        (
            gemini_error(
                429, "You exceeded your current quota, please check your plan and billing details."
            ),
            429,
            "You exceeded your current quota, please check your plan and billing details.",
        ),
    ],
)
async def test_gemini_refusal_keeps_status_and_message(
    gemini: FakeGemini, canned: Canned, status: int, message: str, stream: bool
) -> None:
    gemini.script(canned)
    failure = await refusal(gem(gemini), stream)
    assert (failure.status, failure.message) == (status, message)


# litellm relabels these statuses (529 -> 500, Gemini 503 -> 500, 413 -> 400) and keeps the
# provider's headers aside (litellm_response_headers); the failure has the provider's own.
@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_overloaded_keeps_529_and_retry_headers(
    anthropic: FakeAnthropic, stream: bool
) -> None:
    anthropic.script(
        anthropic_error(
            529, "Overloaded", "overloaded_error", {"x-should-retry": "true", "retry-after": "3"}
        )
    )
    failure = await refusal(claude(anthropic), stream=stream)
    assert (failure.status, failure.message, failure.type) == (529, "Overloaded",
                                                               "overloaded_error")
    assert failure.retry_after == 3.0 and failure.should_retry is True


@pytest.mark.parametrize("stream", [False, True])
async def test_gemini_unavailable_keeps_503(gemini: FakeGemini, stream: bool) -> None:
    gemini.script(gemini_error(503, "The model is overloaded. Please try again later.",
                               headers={"retry-after": "4"}))
    failure = await refusal(gem(gemini), stream=stream)
    assert (failure.status, failure.message, failure.code) == (
        503,
        "The model is overloaded. Please try again later.",
        "UNAVAILABLE",
    )
    assert failure.retry_after == 4.0


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_request_too_large_keeps_413(anthropic: FakeAnthropic,
                                                     stream: bool) -> None:
    message = "Request exceeds the maximum allowed number of bytes."
    anthropic.script(anthropic_error(413, message, "request_too_large"))
    failure = await refusal(claude(anthropic), stream=stream)
    assert (failure.status, failure.message, failure.type) == (413, message, "request_too_large")


async def test_gemini_deadline_answer_is_the_providers_504(gemini: FakeGemini) -> None:
    # litellm raises its Timeout class for this answer; it is still the provider's refusal.
    gemini.script(gemini_error(504, "Deadline expired before operation could complete.",
                               "DEADLINE_EXCEEDED"))
    failure = await refusal(gem(gemini), stream=False)
    assert (failure.status, failure.message, failure.code) == (
        504, "Deadline expired before operation could complete.", "DEADLINE_EXCEEDED")


async def test_rate_limit_retry_after_survives(anthropic: FakeAnthropic) -> None:
    anthropic.script(anthropic_error(429, "slow down", "rate_limit_error", {"retry-after": "7"}))
    failure = await refusal(claude(anthropic), stream=False)
    assert failure.retry_after == 7.0


async def stream_events(provider: LiteLLMProvider) -> list[Any]:
    response = await provider.send(UpstreamCall(body=BODY, stream=True))
    return await read_sse(response.chunks())


async def test_failure_after_first_chunk_is_an_sse_error_event(
    anthropic: FakeAnthropic, gemini: FakeGemini
) -> None:
    anthropic.script(MidStreamError("Overloaded"))
    gemini.script(MidStreamError("The model is overloaded.", code=503))
    for events in (await stream_events(claude(anthropic)), await stream_events(gem(gemini))):
        assert events[0]["choices"][0]["delta"]["content"] == "you said: hello "
        assert "[DONE]" not in events
        error = events[-1]["error"]
        # The one OpenAI envelope (gateway.errors), as on the passthrough path.
        assert set(error) == {"message", "type", "param", "code"}
        assert "Overloaded" in error["message"] or "overloaded" in error["message"]


async def test_mid_stream_error_message_is_the_providers_own(
    anthropic: FakeAnthropic, gemini: FakeGemini
) -> None:
    anthropic.script(MidStreamError("Overloaded"))
    gemini.script(MidStreamError("The model is overloaded.", code=503))
    events = await stream_events(claude(anthropic))
    assert events[-1]["error"] == {"message": "Overloaded", "type": "api_error", "param": None,
                                   "code": None}
    events = await stream_events(gem(gemini))
    assert events[-1]["error"] == {"message": "The model is overloaded.", "type": "api_error",
                                   "param": None, "code": "UNAVAILABLE"}


@pytest.mark.parametrize(
    "model",
    [
        "gemini/gemini-2.5-flash",
        "anthropic/claude-sonnet-4-5",
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_unreachable_upstream_is_a_502(model: str, stream: bool) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = LiteLLMProvider(
        "p", {"model": model, "api_base": f"http://127.0.0.1:{port}", "api_key": "sk-fake"}
    )
    failure = await refusal(provider, stream=stream)
    assert failure.status == 502
    assert failure.message.startswith("upstream connection failed: Cannot connect to host")
