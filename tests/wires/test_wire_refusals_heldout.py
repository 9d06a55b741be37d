"""Held-out provider refusals on the agent wires: invented in the real shapes of the Anthropic
Messages and OpenAI Responses APIs (not copies of tests/data/provider-errors.jsonl or
wire-errors.jsonl), each answered by the native fake to the first attempt.

Through the official SDK a user sees: the rung the ladder took (``x-gateway-recovery``,
``x-gateway-attempts``, ``x-gateway-compaction``), an answer when a rung can rescue the
request, and otherwise the provider's own refusal in the wire's error shape, with the
provider's status and message (never a 500, never a wait that cannot help).
"""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp import web
from PIL import Image

from tests.conftest import GatewayFactory, RunningGateway, serve_app
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.native_base import Canned, png_bytes, rough_tokens
from tests.fakes.responses_server import FakeResponses

CLAUDE = "claude-sonnet-4-5"
GPT = "gpt-5"
PNG = base64.b64encode(png_bytes()).decode()


def image_data(width: int, height: int, *, stored: bool = False) -> str:
    """A base64 PNG; ``stored``: without compression (over 5 MB from 1400 x 1400 up)."""
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(
        out, format="PNG", compress_level=0 if stored else 6)
    return base64.b64encode(out.getvalue()).decode()


# The image each ``history`` carries: (media type it is labelled with, base64 data).
IMAGES = {
    "image": ("image/png", PNG),  # a tiny valid image: nothing to degrade, only to strip
    "mislabelled": ("image/jpeg", PNG),  # a PNG labelled JPEG: degraded relabels it
    "large": ("image/png", ""),  # over 5 MB: degraded re-encodes it (built on first use)
    "wide": ("image/png", ""),  # 2000 px wide: degraded scales it down
}


def gateway_config(anthropic_base: str, responses_base: str) -> dict[str, Any]:
    return {
        "model_list": [
            {"model_name": CLAUDE, "litellm_params": {
                "model": f"anthropic/{CLAUDE}", "api_base": anthropic_base,
                "api_key": "upstream-anthropic-key"},
             "model_info": {"max_input_tokens": 200_000}},
            {"model_name": GPT, "litellm_params": {
                "model": f"openai/{GPT}", "api_base": f"{responses_base}/v1",
                "api_key": "upstream-openai-key"},
             "model_info": {"max_input_tokens": 400_000}}],
        "gateway": {"api_keys": ["client-key"]},
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
    }


@dataclass(frozen=True)
class Refusal:
    """One invented refusal and what the client must see.

    ``rung``: the ``x-gateway-recovery`` value of a rescued request, or ``"fatal"`` (the
    refusal reaches the client). ``history``: ``"short"`` (one question), ``"long"`` (an
    agent history worth compacting), or one question with an image: a key of ``IMAGES``
    (Messages) or ``DATA_URLS`` (Responses).
    """

    status: int
    message: str
    kind: str  # ``error.type`` (Anthropic, Responses); ``x-amzn-ErrorType`` (Bedrock)
    rung: str
    history: str = "short"
    code: str | None = None  # Responses ``error.code``
    param: str | None = None  # Responses ``error.param``
    headers: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # more fields of the error object
    stream: bool = False
    window: int | None = None  # the context window the fake really has (overflow cases)


# -- Anthropic Messages -------------------------------------------------------------------

ANTHROPIC: dict[str, Refusal] = {
    "prompt too long, stated window": Refusal(
        400, "prompt is too long: 6120 tokens > 1500 maximum", "invalid_request_error",
        "compact", "long", window=1500),
    "input plus max_tokens over the context limit": Refusal(
        400, "input length and `max_tokens` exceed context limit: 4230 + 64 > 1500, decrease "
        "input length or `max_tokens` and try again", "invalid_request_error", "compact",
        "long", window=1500),
    "vertex-served overflow (req_vrtx id)": Refusal(
        400, "prompt is too long: 6044 tokens > 1500 maximum", "invalid_request_error",
        "compact", "long", window=1500),
    "image not the media type it says": Refusal(
        400, "messages.0.content.0.image.source.base64.data: Image does not match the "
        "provided media type image/jpeg", "invalid_request_error", "media=degraded", "mislabelled"),
    "could not process image": Refusal(
        400, "Could not process image", "invalid_request_error", "media=strip", "image"),
    "image over 5 MB": Refusal(
        400, "messages.0.content.0.image.source.base64: image exceeds 5 MB maximum: 7340032 "
        "bytes > 5242880 bytes", "invalid_request_error", "media=degraded", "large"),
    "image dimensions for many-image requests": Refusal(
        400, "messages.0.content.0.image.source.base64.data: At least one of the image "
        "dimensions exceed max allowed size for many-image requests: 2000 pixels",
        "invalid_request_error", "media=degraded", "wide"),
    # Claude Code users pasting a screenshot (anthropics/claude-code#6364), reworded.
    "413 request size over the context window, with a large image": Refusal(
        413, "Request size exceeds the model context window", "invalid_request_error",
        "media=degraded", "large"),
    "413 request_too_large with an image": Refusal(
        413, "Request exceeds the maximum allowed number of bytes.", "request_too_large",
        "media=strip", "image"),
    "429 input tokens per minute, retry-after 0": Refusal(
        429, "This request would exceed your organization's rate limit of 30,000 input tokens "
        "per minute (org: 5f1c, model: claude-sonnet-4-5). For details, refer to: "
        "https://docs.claude.com/en/api/rate-limits.", "rate_limit_error", "retry",
        headers={"retry-after": "0"}),
    "429 acceleration limit": Refusal(
        429, "Your organization's usage increased too quickly and hit an acceleration limit. "
        "Please ramp up traffic gradually.", "rate_limit_error", "retry"),
    "529 overloaded, streamed": Refusal(
        529, "Overloaded. Please retry shortly.", "overloaded_error", "retry", stream=True),
    "500 api_error": Refusal(
        500, "An unexpected error has occurred internal to Anthropic's systems.", "api_error",
        "retry"),
    "403 permission_error": Refusal(
        403, "Your API key does not have permission to use the specified resource.",
        "permission_error", "fatal"),
    "404 model not found, streamed": Refusal(
        404, "model: claude-sonnet-9-9", "not_found_error", "fatal", stream=True),
    "credit balance too low": Refusal(
        400, "Your credit balance is too low to access the Anthropic API. Please go to Plans & "
        "Billing to upgrade or purchase credits.", "invalid_request_error", "fatal"),
    "429 monthly spend limit": Refusal(
        429, "You have reached your specified API usage limits. You will regain access on "
        "2027-01-01 at 00:00 UTC.", "rate_limit_error", "fatal",
        extra={"details": {"error_code": "enforced_spend_limit_reached"}}),
    "429 with a Retry-After of an hour": Refusal(
        429, "Number of request tokens has exceeded your per-minute rate limit "
        "(https://docs.claude.com/en/api/rate-limits); see the response headers for current "
        "usage. Please reduce the prompt length or the maximum tokens requested, or try again "
        "later.", "rate_limit_error", "fatal", headers={"retry-after": "3600"}),
    "output blocked by content filtering policy": Refusal(
        400, "Output blocked by content filtering policy", "invalid_request_error", "fatal"),
}


def image_of(history: str) -> tuple[str, str]:
    """The (media type, base64 data) of the image a ``history`` carries."""
    if history == "large":
        return "image/png", image_data(1400, 1400, stored=True)
    if history == "wide":
        return "image/png", image_data(2000, 40)
    return IMAGES[history]


def anthropic_messages(history: str) -> list[dict[str, Any]]:
    if history in IMAGES:
        media_type, data = image_of(history)
        return [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                         "data": data}},
            {"type": "text", "text": "what is this?"}]}]
    if history == "long":
        messages: list[dict[str, Any]] = []
        for i in range(8):
            messages.append({"role": "user", "content": f"task {i}: " + "explain the code " * 30})
            messages.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": f"toolu_{i}", "name": "read_file",
                 "input": {"n": i}}]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "x = 1\n" * 80}]})
            messages.append({"role": "assistant", "content": f"done with task {i}"})
        messages.append({"role": "user", "content": "and now the last step"})
        return messages
    return [{"role": "user", "content": "hi"}]


def claude_body(history: str) -> dict[str, Any]:
    """A Messages request with the named history (a long one declares its tool)."""
    body: dict[str, Any] = {
        "model": CLAUDE, "max_tokens": 64, "messages": anthropic_messages(history)}
    if history == "long":
        body["tools"] = [{"name": "read_file", "input_schema": {"type": "object"}}]
    return body


SUMMARY = Canned(200, {"id": "msg_summary", "type": "message", "role": "assistant",
                       "model": CLAUDE, "stop_reason": "end_turn", "stop_sequence": None,
                       "content": [{"type": "text", "text": "## Task\nExplain the code of "
                                    "tasks 0-7; the last step is still open."}],
                       "usage": {"input_tokens": 600, "output_tokens": 20}})

ANTHROPIC_ERRORS = {400: anthropic.BadRequestError, 403: anthropic.PermissionDeniedError,
                    404: anthropic.NotFoundError, 429: anthropic.RateLimitError}


@pytest.mark.parametrize("name", list(ANTHROPIC))
async def test_anthropic_refusal(gateway_factory: GatewayFactory, name: str) -> None:
    case = ANTHROPIC[name]
    async with FakeAnthropic(api_key="upstream-anthropic-key",
                             context_window=case.window or 200_000) as fake:
        refusal = anthropic_error(case.status, case.message, case.kind, case.headers)
        refusal.body["error"].update(case.extra)
        if "vertex" in name:  # Claude on Vertex AI answers with its own request ids
            refusal.body["request_id"] = "req_vrtx_011CXheld0ut"
        if case.rung == "compact":
            fake.script(refusal, SUMMARY)
        else:
            fake.script(refusal)
        gw = await gateway_factory(gateway_config(fake.base_url, "http://127.0.0.1:9"))
        body = claude_body(case.history)
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            if case.rung == "fatal":
                await _anthropic_fatal(c, case, body, fake)
                return
            if case.stream:
                async with c.messages.with_streaming_response.create(
                        **body, stream=True) as streamed:
                    headers = streamed.headers
                    events = [event async for event in await streamed.parse()]
                assert events[-1].type == "message_stop"
            else:
                raw = await c.messages.with_raw_response.create(**body)
                headers = raw.headers
                message = await raw.parse()
                assert message.content and message.content[0].type == "text"
    assert headers["x-gateway-recovery"] == case.rung, dict(headers)
    if case.rung == "compact":
        assert headers["x-gateway-compaction"].startswith("summarized")
        # The summary call and the compacted request each fit the window the refusal named
        # (a real provider would refuse them otherwise; the fake checks only the last).
        assert case.window is not None and len(fake.requests) == 3
        for sent in fake.requests[1:]:
            size = rough_tokens([sent.body.get("tools"), sent.body.get("system"),
                                 sent.body["messages"]])
            assert size + sent.body["max_tokens"] <= case.window, (size, sent.body["max_tokens"])
    elif case.rung.startswith("media"):
        assert headers["x-gateway-attempts"] == "2"
        before, after = (r.body["messages"][0]["content"][0] for r in fake.requests)
        if case.rung == "media=degraded":  # the image went, as an image the API can read
            assert after["type"] == "image" and after != before
        else:  # nothing to degrade: the image was taken out, and the model told so
            assert after["type"] == "text" and "image removed" in after["text"]
    else:
        assert headers["x-gateway-attempts"] == "2"
        assert fake.requests[0].raw == fake.requests[1].raw  # the same request, again


async def _anthropic_fatal(c: anthropic.AsyncAnthropic, case: Refusal, body: dict[str, Any],
                           fake: FakeAnthropic) -> None:
    error = ANTHROPIC_ERRORS[case.status]
    with pytest.raises(error) as refused:
        if case.stream:
            async with c.messages.stream(**body) as stream:
                async for _ in stream:
                    pass
        else:
            await c.messages.create(**body)
    assert refused.value.status_code == case.status
    assert refused.value.body["type"] == "error"  # type: ignore[index]
    assert refused.value.body["error"]["type"] == case.kind  # type: ignore[index]
    assert refused.value.body["error"]["message"] == case.message  # type: ignore[index]
    assert len(fake.requests) == 1  # nothing a rung or a wait could change
    assert refused.value.response.headers["x-gateway-attempts"] == "1"
    if "retry-after" in case.headers:
        assert refused.value.response.headers["retry-after"] == case.headers["retry-after"]


# -- OpenAI Responses ---------------------------------------------------------------------

RESPONSES: dict[str, Refusal] = {
    "input exceeds the context window": Refusal(
        400, "Your input exceeds the context window of this model. Please adjust your input "
        "and try again.", "invalid_request_error", "compact", "long",
        code="context_length_exceeded", param="input"),
    # A Responses-compatible server (vLLM-style wording) that states its window: the
    # summary call and the compacted request are sized for it.
    "maximum context length stated": Refusal(
        400, "This model's maximum context length is 1500 tokens. However, your request has "
        "2714 input tokens. Please reduce the length of the input messages.",
        "BadRequestError", "compact", "long", param="input", window=1500),
    "invalid image URL (svg data URL)": Refusal(
        400, "Invalid image URL: 'input[0].content[1].image_url'. Expected a base64-encoded "
        "data URL with an image MIME type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), "
        "but got unsupported MIME type 'image/svg+xml'.", "invalid_request_error",
        "media=degraded", "svg", code="invalid_value", param="input[0].content[1].image_url"),
    "image data not a valid image": Refusal(
        400, "The image data you provided does not represent a valid image. Please check your "
        "input and try again with one of the supported image formats: ['image/jpeg', "
        "'image/png', 'image/gif', 'image/webp'].", "invalid_request_error", "media=degraded",
        "garbage", code="invalid_image_format", param="input"),
    # A Responses-compatible server in front of a text-only model (vLLM-style wording):
    # the words name no image, the request has one.
    "text-only model refuses multimodal input": Refusal(
        400, "This model does not support multimodal input.", "BadRequestError",
        "media=strip", "image", param="input"),
    "413 from the proxy in front, with an image": Refusal(
        413, "Request Entity Too Large: the request body exceeds the maximum request size "
        "of 20 MB.", "invalid_request_error", "media=strip", "image"),
    "429 tokens per minute, retry-after-ms": Refusal(
        429, "Rate limit reached for gpt-5 in organization org-h3ld0ut on tokens per min "
        "(TPM): Limit 30000, Used 29500, Requested 1200. Please try again in 1.4s. Visit "
        "https://platform.openai.com/account/rate-limits to learn more.", "tokens", "retry",
        code="rate_limit_exceeded", headers={"retry-after-ms": "5"}),
    "500 server_error, streamed": Refusal(
        500, "The server had an error processing your request. Sorry about that! You can retry "
        "your request, or contact us through our help center at help.openai.com if you keep "
        "seeing this error.", "server_error", "retry", code="server_error", stream=True),
    "503 engine overloaded": Refusal(
        503, "The engine is currently overloaded, please try again later", "server_error",
        "retry"),
    "404 model does not exist": Refusal(
        404, "The model `gpt-9-turbo` does not exist or you do not have access to it.",
        "invalid_request_error", "fatal", code="model_not_found", param="model"),
    "429 insufficient quota, streamed": Refusal(
        429, "You exceeded your current quota, please check your plan and billing details. "
        "For more information on this error, read the docs: "
        "https://platform.openai.com/docs/guides/error-codes/api-errors.", "insufficient_quota",
        "fatal", code="insufficient_quota", stream=True),
    "prompt flagged by the usage policy": Refusal(
        400, "Invalid prompt: your prompt was flagged as potentially violating our usage "
        "policy. Please try again with a different prompt.", "invalid_request_error", "fatal",
        code="invalid_prompt"),
    # The Codex backend's plan limit: a window of hours, not seconds.
    "429 usage limit reached": Refusal(
        429, "The usage limit has been reached", "usage_limit_reached", "fatal",
        code="usage_limit_reached"),
    # The provider could not fetch the image URL: the degraded rung fetches it itself and
    # sends it inline (here it cannot be fetched either: it goes as a note instead).
    "timeout while downloading the image URL": Refusal(
        400, "Timeout while downloading https://images.example.invalid/screenshot.png.",
        "invalid_request_error", "media=degraded", "remote", code="invalid_image_url",
        param="url"),
    "single request over the TPM budget": Refusal(
        429, "Request too large for gpt-5 in organization org-h3ld0ut on tokens per min (TPM): "
        "Limit 30000, Requested 48213. The input or output tokens must be reduced in order to "
        "run successfully. Visit https://platform.openai.com/account/rate-limits to learn "
        "more.", "tokens", "fatal", code="rate_limit_exceeded"),
}

OPENAI_ERRORS = {400: openai.BadRequestError, 404: openai.NotFoundError,
                 429: openai.RateLimitError}


SVG = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8">'
                       b'<rect width="8" height="8" fill="red"/></svg>').decode()
NOT_AN_IMAGE = base64.b64encode(b"these bytes are no image at all").decode()
DATA_URLS = {"remote": "https://images.example.invalid/screenshot.png",
             "image": f"data:image/png;base64,{PNG}",
             "svg": f"data:image/svg+xml;base64,{SVG}",
             "garbage": f"data:image/png;base64,{NOT_AN_IMAGE}"}


def responses_input(history: str) -> list[dict[str, Any]]:
    if history in DATA_URLS:
        return [{"role": "user", "content": [
            {"type": "input_text", "text": "what is this?"},
            {"type": "input_image", "image_url": DATA_URLS[history]}]}]
    if history == "long":
        items: list[dict[str, Any]] = []
        for i in range(8):
            items.append({"role": "user", "content": f"task {i}: " + "explain the code " * 30})
            items.append({"type": "function_call", "call_id": f"call_{i}", "name": "read_file",
                          "arguments": f'{{"n": {i}}}'})
            items.append({"type": "function_call_output", "call_id": f"call_{i}",
                          "output": "x = 1\n" * 80})
            items.append({"role": "assistant", "content": f"done with task {i}"})
        items.append({"role": "user", "content": "and now the last step"})
        return items
    return [{"role": "user", "content": "hi"}]


class ResponsesAndChat(FakeResponses):
    """The fake Responses API that also answers ``/v1/chat/completions`` with a summary, as
    OpenAI serves both: the gateway's summary calls go over Chat Completions."""

    def _routes(self, app: web.Application) -> None:
        super()._routes(app)
        app.router.add_post("/v1/chat/completions", self._summary)

    async def _summary(self, request: web.Request) -> web.Response:
        await self.record(request)
        return web.json_response({
            "id": "chatcmpl-summary", "object": "chat.completion", "created": 0, "model": GPT,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant",
                "content": "## Task\nExplain the code of tasks 0-7; the last step is open."}}],
            "usage": {"prompt_tokens": 600, "completion_tokens": 20, "total_tokens": 620}})


@pytest.fixture
async def responses_fake() -> AsyncIterator[FakeResponses]:
    async with ResponsesAndChat(api_key="upstream-openai-key") as server:
        yield server


@pytest.mark.parametrize("name", list(RESPONSES))
async def test_responses_refusal(gateway_factory: GatewayFactory,
                                 responses_fake: FakeResponses, name: str) -> None:
    case = RESPONSES[name]
    fake = responses_fake
    error = {"message": case.message, "type": case.kind, "param": case.param,
             "code": case.code, **case.extra}
    fake.script(Canned(case.status, {"error": error}, case.headers))
    gw = await gateway_factory(gateway_config("http://127.0.0.1:9", fake.base_url))
    body: dict[str, Any] = {"model": GPT, "input": responses_input(case.history)}
    if case.history == "long":
        body["tools"] = [{"type": "function", "name": "read_file",
                          "parameters": {"type": "object", "properties": {}}}]
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                  max_retries=0) as c:
        if case.rung == "fatal":
            await _responses_fatal(c, case, body, fake)
            return
        if case.stream:
            async with c.responses.with_streaming_response.create(**body, stream=True) as s:
                headers = s.headers
                events = [event async for event in await s.parse()]
            assert events[-1].type == "response.completed"
        else:
            raw = await c.responses.with_raw_response.create(**body)
            headers = raw.headers
            assert raw.parse().output_text
    assert headers["x-gateway-recovery"] == case.rung, dict(headers)
    if case.rung == "compact":
        assert headers["x-gateway-compaction"].startswith("summarized")
        paths = [r.path for r in fake.requests]
        assert paths == ["/v1/responses", "/v1/chat/completions", "/v1/responses"]
        assert len(fake.requests[-1].raw) < len(fake.requests[0].raw)
        if case.window is not None:
            summary, compacted = fake.requests[1].body, fake.requests[2].body
            budget = summary.get("max_completion_tokens") or summary.get("max_tokens")
            assert rough_tokens(summary["messages"]) + budget <= case.window
            assert rough_tokens([compacted.get("tools"), compacted["input"]]) <= case.window
    elif case.rung.startswith("media"):
        assert headers["x-gateway-attempts"] == "2"
        before, after = (r.body["input"][0]["content"] for r in fake.requests)
        images = [p for p in after if p["type"] == "input_image"]
        if case.history in ("svg", "garbage", "remote"):  # nothing the rung could decode
            assert not images and "image removed" in str(after), after
        elif case.rung == "media=degraded":  # re-encoded as an image the API can read
            assert images and images[0]["image_url"].startswith(("data:image/png",
                                                                 "data:image/jpeg"))
            assert after != before
        else:
            assert not images and "image removed" in str(after)
    else:
        assert headers["x-gateway-attempts"] == "2"
        assert fake.requests[0].raw == fake.requests[1].raw


async def _responses_fatal(c: openai.AsyncOpenAI, case: Refusal, body: dict[str, Any],
                           fake: FakeResponses) -> None:
    with pytest.raises(OPENAI_ERRORS[case.status]) as refused:
        if case.stream:
            async with c.responses.with_streaming_response.create(**body, stream=True) as s:
                async for _ in await s.parse():
                    pass
        else:
            await c.responses.create(**body)
    assert refused.value.status_code == case.status
    assert refused.value.message.endswith(case.message)
    assert refused.value.code == case.code
    assert refused.value.body["message"] == case.message  # type: ignore[index]
    # Not resent: a request over a per-minute budget may only be compacted, and a history
    # of one question cannot be (the summary call is all that is tried).
    assert [r.path for r in fake.requests].count("/v1/responses") == 1
    assert refused.value.response.headers["x-gateway-attempts"] == "1"


# -- Bedrock-served Claude, a litellm route -------------------------------------------------

BEDROCK_MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"
AMZN = ":http://internal.amazon.com/coral/com.amazon.bedrock/"


class FakeBedrock:
    """Bedrock Runtime's Converse API (``POST /model/{id}/converse``), as litellm calls it:
    the scripted refusals first (``{"message": ...}`` with ``x-amzn-ErrorType``), then an
    answer naming how many requests came before it."""

    def __init__(self, *refusals: tuple[int, str, str]) -> None:
        self.script = list(refusals)
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.root = ""
        self._runner: web.AppRunner | None = None

    async def _converse(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, await request.json()))
        if self.script:
            status, kind, message = self.script.pop(0)
            return web.json_response({"message": message}, status=status,
                                     headers={"x-amzn-ErrorType": kind + AMZN})
        text = f"answer {len(self.requests)}: Explain the code of tasks 0-7; last step open."
        return web.json_response({
            "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": "end_turn", "metrics": {"latencyMs": 12},
            "usage": {"inputTokens": 40, "outputTokens": 12, "totalTokens": 52}})

    async def __aenter__(self) -> FakeBedrock:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/model/{model}/converse", self._converse)
        self._runner, self.root = await serve_app(app)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


def bedrock_config(root: str) -> dict[str, Any]:
    return {
        "model_list": [{"model_name": CLAUDE, "litellm_params": {
            "model": f"bedrock/{BEDROCK_MODEL}", "api_base": root,
            "aws_access_key_id": "AKIAHELDOUTFAKE", "aws_secret_access_key": "fake-secret",
            "aws_region_name": "us-east-1"}, "model_info": {"max_input_tokens": 200_000}}],
        "gateway": {"api_keys": ["client-key"]},
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
    }


BEDROCK: dict[str, Refusal] = {
    "throttled: too many tokens, please wait": Refusal(
        429, "Too many tokens, please wait before trying again.", "ThrottlingException",
        "retry"),
    "424 model error": Refusal(
        424, "Received error from the model: The system encountered an unexpected error "
        "during processing. Try your request again.", "ModelErrorException", "retry"),
    "503 unable to process": Refusal(
        503, "Bedrock is unable to process your request.", "ServiceUnavailableException",
        "retry"),
    "Claude's overflow relayed by Bedrock": Refusal(
        400, "The model returned the following errors: input length and `max_tokens` exceed "
        "context limit: 4230 + 64 > 1500, decrease input length or `max_tokens` and try again",
        "ValidationException", "compact", "long", window=1500),
    "Claude's image refusal relayed by Bedrock": Refusal(
        400, "The model returned the following errors: messages.0.content.0.image.source."
        "base64.data: Image does not match the provided media type image/jpeg",
        "ValidationException", "media=degraded", "mislabelled"),
    # The client's max_tokens over the model's output limit: no rung can change that (a
    # summary would only lose the history).
    "max tokens over the model limit": Refusal(
        400, "The maximum tokens you requested exceeds the model limit of 64000. Try again "
        "with a maximum tokens value that is lower than 64000.", "ValidationException",
        "fatal", "long"),
    "403 no access to the model": Refusal(
        403, "You don't have access to the model with the specified model ID.",
        "AccessDeniedException", "fatal"),
    "404 model identifier unknown": Refusal(
        404, "Could not resolve the foundation model from the provided model identifier.",
        "ResourceNotFoundException", "fatal"),
}
BEDROCK_TYPES = {400: "invalid_request_error", 403: "permission_error",
                 404: "not_found_error"}


@pytest.mark.parametrize("name", list(BEDROCK))
async def test_bedrock_refusal_on_the_messages_wire(gateway_factory: GatewayFactory,
                                                    name: str) -> None:
    case = BEDROCK[name]
    async with FakeBedrock((case.status, case.kind, case.message)) as fake:
        gw = await gateway_factory(bedrock_config(fake.root))
        body = claude_body(case.history)
        async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key",
                                            max_retries=0) as c:
            if case.rung == "fatal":
                with pytest.raises(ANTHROPIC_ERRORS[case.status]) as refused:
                    await c.messages.create(**body)
                assert refused.value.status_code == case.status
                error = refused.value.body["error"]  # type: ignore[index]
                assert error == {"type": BEDROCK_TYPES[case.status], "message": case.message}
                assert refused.value.response.headers["x-gateway-attempts"] == "1"
                assert len(fake.requests) == 1
                return
            raw = await c.messages.with_raw_response.create(**body)
            headers = raw.headers
            message = await raw.parse()
            assert message.content[0].type == "text"
            assert message.content[0].text.startswith("answer")
    assert headers["x-gateway-recovery"] == case.rung, dict(headers)
    if case.rung == "compact":
        assert headers["x-gateway-compaction"].startswith("summarized")
        assert len(fake.requests) == 3
        for _path, sent in fake.requests[1:]:  # the summary call, then the compacted request
            size = rough_tokens([sent.get("toolConfig"), sent.get("system"), sent["messages"]])
            assert size + sent["inferenceConfig"]["maxTokens"] <= case.window, size
    elif case.rung.startswith("media"):
        image = fake.requests[-1][1]["messages"][0]["content"][0]["image"]
        assert image["format"] == "png"  # relabelled as what it is
    else:
        assert len(fake.requests) == 2 and fake.requests[0] == fake.requests[1]


async def test_bedrock_refusal_on_the_responses_wire(gateway_factory: GatewayFactory) -> None:
    """The same litellm route through /v1/responses: a throttle is retried, a denial reaches
    the openai SDK as the 403 it is, in the Responses error shape."""
    async with FakeBedrock((429, "ThrottlingException", "Too many requests, please wait "
                            "before trying again. You have sent too many requests.")) as fake:
        gw = await gateway_factory(bedrock_config(fake.root))
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key",
                                      max_retries=0) as c:
            raw = await c.responses.with_raw_response.create(model=CLAUDE, input="hi")
            assert raw.parse().output_text.startswith("answer 2")
            assert raw.headers["x-gateway-recovery"] == "retry"
            fake.script.append((403, "AccessDeniedException", "You don't have access to the "
                                "model with the specified model ID."))
            with pytest.raises(openai.PermissionDeniedError) as refused:
                await c.responses.create(model=CLAUDE, input="hi")
    assert refused.value.status_code == 403
    assert refused.value.body["message"] == (  # type: ignore[index]
        "You don't have access to the model with the specified model ID.")
    assert len(fake.requests) == 3


# -- a refusal inside a 200 stream, before any output ---------------------------------------


def failed_stream(code: str, message: str) -> Canned:
    """A Responses stream that opens and then fails before any output, as OpenAI answers an
    overflow or a rate limit found once the response was created."""
    base = {"id": "resp_held0ut", "object": "response", "created_at": 1700000000,
            "model": GPT, "output": [], "error": None, "incomplete_details": None,
            "usage": None}
    events = [
        {"type": "response.created", "sequence_number": 0,
         "response": {**base, "status": "in_progress"}},
        {"type": "response.in_progress", "sequence_number": 1,
         "response": {**base, "status": "in_progress"}},
        {"type": "response.failed", "sequence_number": 2,
         "response": {**base, "status": "failed",
                      "error": {"code": code, "message": message}}},
    ]
    raw = b"".join(f"event: {e['type']}\ndata: ".encode() + orjson.dumps(e) + b"\n\n"
                   for e in events)
    return Canned(200, raw, {"content-type": "text/event-stream"})


OVERFLOW_IN_STREAM = ("Your input exceeds the context window of this model. Please adjust "
                      "your input and try again.")


async def _stream_long(gw: RunningGateway) -> tuple[Any, list[Any]]:
    body: dict[str, Any] = {
        "model": GPT, "input": responses_input("long"), "stream": True,
        "tools": [{"type": "function", "name": "read_file",
                   "parameters": {"type": "object", "properties": {}}}]}
    c = openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key", max_retries=0)
    async with c, c.responses.with_streaming_response.create(**body) as s:
        return s.headers, [event async for event in await s.parse()]


async def test_responses_stream_failing_every_time_reaches_the_client_as_its_error(
    gateway_factory: GatewayFactory, responses_fake: FakeResponses,
) -> None:
    for _ in range(8):  # whatever the ladder tries, the upstream fails the same way
        responses_fake.script(failed_stream("context_length_exceeded", OVERFLOW_IN_STREAM))
    gw = await gateway_factory(gateway_config("http://127.0.0.1:9", responses_fake.base_url))
    with pytest.raises(openai.BadRequestError) as failed:
        await _stream_long(gw)
    assert failed.value.code == "context_length_exceeded"
    assert OVERFLOW_IN_STREAM in failed.value.message


async def test_responses_stream_failed_before_output_climbs_the_ladder(
    gateway_factory: GatewayFactory, responses_fake: FakeResponses,
) -> None:
    responses_fake.script(failed_stream("context_length_exceeded", OVERFLOW_IN_STREAM))
    gw = await gateway_factory(gateway_config("http://127.0.0.1:9", responses_fake.base_url))
    headers, events = await _stream_long(gw)
    assert events[-1].type == "response.completed", [e.type for e in events]
    assert headers["x-gateway-recovery"] == "compact"


def overloaded_after_start() -> Canned:
    """A Messages stream that opens and is then overloaded before any content block."""
    start = {"type": "message_start", "message": {
        "id": "msg_held0ut", "type": "message", "role": "assistant", "model": CLAUDE,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 9, "output_tokens": 1}}}
    events = [("message_start", start), ("ping", {"type": "ping"}),
              ("error", {"type": "error", "error": {"type": "overloaded_error",
                                                    "message": "Overloaded"}})]
    raw = b"".join(f"event: {name}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"
                   for name, data in events)
    raw = raw.replace(b"\n\nevent: error", b"\n\n: keep-alive\n\nevent: error")  # (a comment)
    return Canned(200, raw, {"content-type": "text/event-stream"})


async def _stream_hi(gw: RunningGateway) -> list[Any]:
    c = anthropic.AsyncAnthropic(base_url=gw.root, api_key="client-key", max_retries=0)
    async with c, c.messages.stream(model=CLAUDE, max_tokens=32,
                                    messages=[{"role": "user", "content": "hi"}]) as stream:
        return [event async for event in stream]


async def test_messages_stream_overloaded_every_time_reaches_the_client_as_its_error(
    gateway_factory: GatewayFactory,
) -> None:
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        for _ in range(8):  # more than the retries
            fake.script(overloaded_after_start())
        gw = await gateway_factory(gateway_config(fake.base_url, "http://127.0.0.1:9"))
        with pytest.raises(anthropic.APIStatusError) as failed:
            await _stream_hi(gw)
    assert failed.value.body["error"] == {  # type: ignore[index]
        "type": "overloaded_error", "message": "Overloaded"}


async def test_messages_stream_overloaded_before_content_is_retried(
    gateway_factory: GatewayFactory,
) -> None:
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        fake.script(overloaded_after_start())
        gw = await gateway_factory(gateway_config(fake.base_url, "http://127.0.0.1:9"))
        events = await _stream_hi(gw)
    assert events[-1].type == "message_stop"
