"""Shared pieces of the litellm tests (tests/providers/test_e2e_*.py, test_litellm_natives.py),
with ``Native``: one descriptor per native provider the shared scenarios run against.

The chain under test: the real ``openai`` SDK (its own retries off) -> a real gateway on
127.0.0.1 (``gateway_factory``) -> litellm -> a fake native server (FakeAnthropic /
FakeGemini) that validates requests and answers like the real API.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai
import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan

from gateway.providers.base import UpstreamCall
from gateway.providers.litellm_adapter import LiteLLMProvider
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import assistant, calls, tool, user
from tests.fakes.anthropic_rules import MISSING_TOOL_RESULT
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.gemini_server import PART_COUNT, FakeGemini, gemini_error
from tests.fakes.gemini_server import field as gemini_field
from tests.fakes.native_base import Canned, FakeServer, MidStreamError, RecordedRequest

ANTHROPIC_MODEL = "anthropic/claude-sonnet-4-5-20250929"
GEMINI_MODEL = "gemini/gemini-2.5-flash"
UPSTREAM_KEY = "native-upstream-key-5d1c"
# No waiting between retries: every wait the ladder takes comes from a Retry-After of 0.
FAST_RECOVERY: dict[str, Any] = {"backoff_base": 0.0, "backoff_cap": 0.0, "deadline": 30.0}
# litellm builds pydantic schemas lazily (inside the gateway, in this process) and pydantic
# warns about their ReadOnly TypedDict items; harmless, but -W error would fail the request.
IGNORE_SCHEMA_WARNINGS = pytest.mark.filterwarnings(
    "ignore:.*using the `ReadOnly` qualifier:UserWarning"
)
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look something up",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    },
]


async def start_native_gateway(
    factory: GatewayFactory,
    api_base: str,
    model: str,
    *,
    name: str = "native",
    recovery: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    **model_info: Any,
) -> RunningGateway:
    """A gateway serving ``name`` through litellm from the fake at ``api_base``."""
    config: dict[str, Any] = {
        "model_list": [model_entry(name, api_base, model=model, api_key=UPSTREAM_KEY,
                                   **model_info)],
        "recovery": {**FAST_RECOVERY, **(recovery or {})},
        **(extra or {}),
    }
    return await factory(config)


def sdk(gw: RunningGateway) -> openai.AsyncOpenAI:
    """An SDK client for the gateway that never retries on its own."""
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key", max_retries=0,
                              timeout=60.0)


async def raw_sse(
    gw: RunningGateway, headers: dict[str, str] | None = None, **body: Any
) -> tuple[dict[str, str], list[Any]]:
    """Stream through the SDK's raw streaming response: the response headers and every SSE
    ``data:`` payload as sent (parsed JSON, ``"[DONE]"`` kept as text)."""
    events: list[Any] = []
    async with sdk(gw) as client, client.chat.completions.with_streaming_response.create(
        stream=True, extra_headers=headers, **body
    ) as response:
        assert response.http_response.status_code == 200
        got_headers = dict(response.headers)
        async for line in response.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            payload = line[len("data: "):]
            events.append("[DONE]" if payload == "[DONE]" else orjson.loads(payload))
    return got_headers, events


async def complete(provider: LiteLLMProvider, body: dict[str, Any]) -> dict[str, Any]:
    """A whole (non-streaming) answer of ``provider`` to ``body``, checked to be JSON."""
    response = await provider.send(UpstreamCall(body=body, stream=False))
    raw = b"".join([chunk async for chunk in response.chunks()])
    await response.aclose()
    assert response.status == 200 and response.content_type == "application/json"
    parsed: dict[str, Any] = orjson.loads(raw)
    return parsed


def stream_text(events: list[Any]) -> str:
    """The concatenated ``delta.content`` of chat.completion.chunk events."""
    return "".join(
        e["choices"][0]["delta"].get("content") or ""
        for e in events
        if isinstance(e, dict) and e.get("choices")
    )


def chat_span(gw: RunningGateway, index: int = -1) -> ReadableSpan:
    """The ``gateway.chat`` span of a finished request (the last one by default)."""
    spans = [s for s in gw.spans.get_finished_spans() if s.name == "gateway.chat"]
    return spans[index]


History = list[dict[str, Any]]


@dataclass(frozen=True)
class Native:
    """One native provider the litellm end-to-end scenarios run against: its fake server,
    how a request looks on its wire, and how its refusals look."""

    id: str
    fake: Callable[..., FakeServer]
    model: str  # the litellm model id
    name: str  # the gateway's model name for it
    check_plain: Callable[[RecordedRequest], None]  # the native request of the plain chat
    call_id: str  # how the ids of its tool calls begin
    tool_answer: Callable[[str], str]  # the fake's answer to a tool result
    tool_kinds: Callable[[Any], list[str]]  # the calls and results of a native history
    native_image: Callable[[Any], tuple[str, str]]  # (media type, base64) of the first image
    stream_path: str  # how the path of a streaming request ends
    refusal_field: tuple[str, str]  # the error field and value of a native 400, as relayed
    broken: dict[str, tuple[History, str, str | None]]  # history, repair, native refusal
    transient: dict[str, Canned]  # refusals the ladder retries, by test id
    mid_stream: MidStreamError
    mid_stream_error: dict[str, str]  # what the SSE error event carries for it
    models: Callable[[str], list[dict[str, Any]]]  # a model list served from a base url
    capabilities: dict[str, dict[str, Any]] = field(default_factory=dict)  # by model name


def _anthropic_plain(sent: RecordedRequest) -> None:
    assert sent.path == "/v1/messages" and sent.headers["x-api-key"] == UPSTREAM_KEY
    assert sent.body["model"] == "claude-sonnet-4-5-20250929"
    assert sent.body["system"][0]["text"] == "Be brief."
    assert sent.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hello there"}]}]
    assert (sent.body["max_tokens"], sent.body["temperature"]) == (100, 0.2)


def _gemini_plain(sent: RecordedRequest) -> None:
    assert sent.path == "/models/gemini-2.5-flash:generateContent"
    assert sent.headers["x-goog-api-key"] == UPSTREAM_KEY
    assert gemini_field(sent.body, "systemInstruction")["parts"] == [{"text": "Be brief."}]
    assert gemini_field(sent.body, "contents") == [
        {"role": "user", "parts": [{"text": "hello there"}]}]
    config = gemini_field(sent.body, "generationConfig")
    assert (gemini_field(config, "maxOutputTokens"), config["temperature"]) == (100, 0.2)


def _anthropic_tool_kinds(body: Any) -> list[str]:
    native = body["messages"]
    uses = [b for m in native for b in m["content"] if isinstance(b, dict)
            and b.get("type") == "tool_use"]
    results = [b for m in native for b in m["content"] if isinstance(b, dict)
               and b.get("type") == "tool_result"]
    assert [u["id"] for u in uses] == [r["tool_use_id"] for r in results]
    assert native[-1] == {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
    return ["call"] * len(uses) + ["result"] * len(results)


def _gemini_tool_kinds(body: Any) -> list[str]:
    contents = gemini_field(body, "contents")
    assert [c["role"] for c in contents][-1] == "user"
    kinds = [next(iter(p)) for c in contents for p in c["parts"]]
    return [{"functionCall": "call", "function_call": "call"}.get(k, "result")
            for k in kinds if k.startswith("function")]


def _anthropic_image(body: Any) -> tuple[str, str]:
    block = body["messages"][0]["content"][1]
    assert block["type"] == "image" and block["source"]["type"] == "base64"
    return block["source"]["media_type"], block["source"]["data"]


def _gemini_image(body: Any) -> tuple[str, str]:
    inline = gemini_field(gemini_field(body, "contents")[0]["parts"][1], "inlineData")
    return gemini_field(inline, "mimeType"), inline["data"]


ANTHROPIC = Native(
    id="anthropic",
    fake=FakeAnthropic,
    model=ANTHROPIC_MODEL,
    name="claude",
    check_plain=_anthropic_plain,
    call_id="toolu_",
    tool_answer=lambda result: f"tool results: {result}",
    tool_kinds=_anthropic_tool_kinds,
    native_image=_anthropic_image,
    stream_path="/v1/messages",
    refusal_field=("type", "invalid_request_error"),
    broken={
        "missing tool result": (
            [user("read it"), calls("toolu_a"), user("never mind, something else")],
            "tool_result_synthesized",
            MISSING_TOOL_RESULT.format(i=1, ids="toolu_a"),
        ),
        "orphan tool result": (
            [user("hi"), tool("toolu_ghost", "stale"), user("go on")],
            "orphan_tool_result_dropped",
            # litellm folds the tool result into the user turn before it: messages.0.content.1
            "messages.0.content.1: unexpected `tool_use_id` found in `tool_result` blocks: "
            "toolu_ghost. Each `tool_result` block must have a corresponding `tool_use` block "
            "in the previous message.",
        ),
        # Without the repair litellm itself would replace the empty text by a placeholder (it
        # does so whatever modify_params says); the gateway's reported repair comes first.
        "empty assistant text": ([user("hello"), assistant(" "), user("next")],
                                 "empty_content_dropped", None),
    },
    transient={
        "429": anthropic_error(
            429, "This request would exceed the rate limit for your organization",
            "rate_limit_error", {"retry-after": "0"}),
        "529": anthropic_error(529, "Overloaded", "overloaded_error",
                               {"retry-after": "0", "x-should-retry": "true"}),
    },
    mid_stream=MidStreamError("Overloaded"),
    mid_stream_error={"message": "Overloaded"},
    models=lambda base: [
        {"model_name": "claude", "litellm_params": {"model": ANTHROPIC_MODEL, "api_base": base}},
        {"model_name": "claude-small",
         "litellm_params": {"model": ANTHROPIC_MODEL, "api_base": base},
         "model_info": {"max_input_tokens": 50_000, "supports_vision": False}},
        {"model_name": "mystery",
         "litellm_params": {"model": "anthropic/claude-unreleased-9", "api_base": base}},
    ],
    capabilities={
        "claude": {"context_window": 200_000, "max_output_tokens": 64_000,
                   "supports_images": True, "supports_tools": True},
        "claude-small": {"context_window": 50_000, "max_output_tokens": 64_000,
                         "supports_images": False, "supports_tools": True},
        "mystery": {"context_window": 128_000, "max_output_tokens": 4_096,
                    "supports_images": True, "supports_tools": True},
    },
)

GEMINI = Native(
    id="gemini",
    fake=FakeGemini,
    model=GEMINI_MODEL,
    name="gem",
    check_plain=_gemini_plain,
    call_id="call_",
    tool_answer=lambda result: f'tool results: {{"content":"{result}"}}',
    tool_kinds=_gemini_tool_kinds,
    native_image=_gemini_image,
    stream_path=":streamGenerateContent",
    refusal_field=("code", "INVALID_ARGUMENT"),
    broken={
        "missing tool result": (
            [user("read it"), calls("call_a"), user("never mind, something else")],
            "tool_result_synthesized",
            PART_COUNT,
        ),
        "result separated from its call": (
            [user("read it"), calls("call_a"), user("hurry up"), tool("call_a", "done")],
            "tool_result_reordered",
            PART_COUNT,
        ),
    },
    transient={"503": gemini_error(503, "The model is overloaded. Please try again later.",
                                   headers={"retry-after": "0"})},
    mid_stream=MidStreamError("The model is overloaded.", code=503),
    mid_stream_error={"message": "The model is overloaded.", "code": "UNAVAILABLE"},
    models=lambda base: [
        {"model_name": "gem", "litellm_params": {"model": GEMINI_MODEL, "api_base": base}},
        {"model_name": "gem-tools-off",
         "litellm_params": {"model": GEMINI_MODEL, "api_base": base},
         "model_info": {"supports_function_calling": False, "max_output_tokens": 1000}},
    ],
    capabilities={
        "gem": {"context_window": 1_048_576, "max_output_tokens": 65_536,
                "supports_images": True, "supports_tools": True},
        "gem-tools-off": {"context_window": 1_048_576, "max_output_tokens": 1000,
                          "supports_images": True, "supports_tools": False},
    },
)

NATIVES = [pytest.param(ANTHROPIC, id="anthropic"), pytest.param(GEMINI, id="gemini")]
