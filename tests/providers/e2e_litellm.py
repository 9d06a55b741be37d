"""Shared pieces of the litellm end-to-end tests (tests/providers/test_e2e_*.py).

The chain under test: the real ``openai`` SDK (its own retries off) -> a real gateway on
127.0.0.1 (``gateway_factory``) -> litellm -> a fake native server (FakeAnthropic /
FakeGemini) that validates requests and answers like the real API.
"""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan

from tests.conftest import GatewayFactory, RunningGateway, model_entry

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
