"""Shared pieces of the recovery ladder's end-to-end tests (tests/recovery/test_e2e_*.py).

Each test runs a real gateway on loopback (``gateway_factory``) in front of a local upstream
(the referee, or a small aiohttp app), and talks to it through the real ``openai`` SDK with
its own retries off, so every retry seen is the gateway's.
"""

from __future__ import annotations

from typing import Any

import openai
from opentelemetry.sdk.trace import ReadableSpan

from tests.conftest import GatewayFactory, RunningGateway, model_entry

# Short waits everywhere: backoff without Retry-After is at most backoff_cap seconds.
FAST_RECOVERY: dict[str, Any] = {"backoff_base": 0.01, "backoff_cap": 0.05, "deadline": 20.0}


def client(gw: RunningGateway) -> openai.AsyncOpenAI:
    """An SDK client for the gateway that never retries on its own."""
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="client-key", max_retries=0,
                              timeout=30.0)


async def start_gateway(
    factory: GatewayFactory,
    api_base: str,
    *,
    name: str = "demo",
    recovery: dict[str, Any] | None = None,
    media: dict[str, Any] | None = None,
    extra_models: list[dict[str, Any]] | None = None,
    **model_info: Any,
) -> RunningGateway:
    """A gateway serving ``name`` from ``api_base``, with fast global recovery settings."""
    config: dict[str, Any] = {
        "model_list": [model_entry(name, api_base, model="openai/referee", **model_info),
                       *(extra_models or [])],
        "recovery": {**FAST_RECOVERY, **(recovery or {})},
    }
    if media is not None:
        config["media"] = media
    return await factory(config)


def attempt_spans(gw: RunningGateway) -> list[ReadableSpan]:
    """The finished ``gateway.attempt`` spans, in attempt order."""
    spans = [s for s in gw.spans.get_finished_spans() if s.name == "gateway.attempt"]
    return sorted(spans, key=lambda s: int(_attr(s, "gateway.attempt")))


def _attr(span: ReadableSpan, name: str) -> Any:
    attributes = span.attributes or {}
    return attributes.get(name)


def span_summary(span: ReadableSpan) -> dict[str, Any]:
    """What a trace reader sees of one attempt span: step, policy, status, verdict."""
    return {
        "attempt": _attr(span, "gateway.attempt"),
        "step": _attr(span, "gateway.step"),
        "structure": _attr(span, "gateway.policy.structure"),
        "media": _attr(span, "gateway.policy.media"),
        "status": _attr(span, "gateway.upstream.status"),
        "verdict": _attr(span, "gateway.verdict"),
        "error": span.status.status_code.name == "ERROR",
    }
