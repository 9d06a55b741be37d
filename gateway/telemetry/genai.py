"""Spans that other tools understand: OpenTelemetry GenAI semantic conventions next to the
gateway's own ``gateway.*`` attributes, the client's ``traceparent`` honoured, and the trace
propagated upstream.

The request span (``gateway.chat``, kind SERVER) is opened at the edge as a child of the
client's trace context and lives until the last byte of the answer is written, so the
streamed usage and the response model reach it. Attempt spans (kind CLIENT) carry the
upstream side of the conventions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import propagate
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from gateway.redact import redact

CHAT_SPAN = "gateway.chat"
OPERATION = "chat"

# LiteLLM provider prefixes -> the conventions' gen_ai.provider.name values.
_PROVIDERS = {
    "anthropic": "anthropic", "openai": "openai", "azure": "azure.ai.openai",
    "gemini": "gcp.gemini", "vertex_ai": "gcp.vertex_ai", "bedrock": "aws.bedrock",
    "groq": "groq", "deepseek": "deepseek", "mistral": "mistral_ai", "cohere": "cohere",
    "xai": "x_ai", "perplexity": "perplexity", "watsonx": "ibm.watsonx.ai",
}
_REQUEST_PARAMS = {
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "seed": "gen_ai.request.seed",
}


def provider_name(provider: str) -> str:
    """``gen_ai.provider.name`` for a LiteLLM provider prefix (unknown ones as given)."""
    return _PROVIDERS.get(provider, provider or "openai")


def request_params(body: Mapping[str, Any]) -> dict[str, Any]:
    """The request's sampling parameters as GenAI attributes."""
    out: dict[str, Any] = {}
    for key, attr in _REQUEST_PARAMS.items():
        value = body.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[attr] = value
    return out


def start_request_span(tracer: Tracer, headers: Mapping[str, str]) -> Span:
    """The request's span, joined to the client's trace when it sent ``traceparent``; its
    ``tracestate`` and ``baggage`` come along unless they quote a secret (a key pasted
    there would be exported with every span and sent upstream)."""
    if "traceparent" not in headers:
        return tracer.start_span(CHAT_SPAN, kind=SpanKind.SERVER)
    carrier = {"traceparent": headers["traceparent"]}
    for name in ("tracestate", "baggage"):
        value = headers.get(name)
        if value is not None and redact(value) == value:
            carrier[name] = value
    return tracer.start_span(CHAT_SPAN, context=propagate.extract(carrier),
                             kind=SpanKind.SERVER)


def request_attributes(provider: str, model: str, wire: str, session_id: str | None,
                       body: Mapping[str, Any]) -> dict[str, Any]:
    """GenAI request attributes of the request span (``model``: the configured name)."""
    system = provider_name(provider)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": OPERATION,
        "gen_ai.request.model": model,
        "gen_ai.system": system,
        "gen_ai.provider.name": system,
        "gateway.wire": wire,
        **request_params(body),
    }
    if session_id:
        attrs["gen_ai.conversation.id"] = session_id
    return attrs


def response_attributes(response_model: str, input_tokens: int | None,
                        output_tokens: int | None) -> dict[str, Any]:
    """GenAI response attributes: the model that answered and the usage it reported."""
    attrs: dict[str, Any] = {}
    if response_model:
        attrs["gen_ai.response.model"] = response_model
    if input_tokens is not None:
        attrs["gen_ai.usage.input_tokens"] = input_tokens
    if output_tokens is not None:
        attrs["gen_ai.usage.output_tokens"] = output_tokens
    return attrs


def finish_request_span(span: Span, attrs: Mapping[str, Any], status: int, wire: bool,
                        error: str) -> None:
    """Set the response-side attributes and the status, then end the request span."""
    if span.is_recording():
        span.set_attributes(attrs)
        if status >= 500 or (status >= 400 and wire):
            span.set_status(Status(StatusCode.ERROR, error[:200] or str(status)))
    span.end()


def attempt_attributes(provider: str, upstream_model: str) -> dict[str, Any]:
    """GenAI client-side attributes of one upstream attempt."""
    system = provider_name(provider)
    return {"gen_ai.operation.name": OPERATION, "gen_ai.request.model": upstream_model,
            "gen_ai.system": system, "gen_ai.provider.name": system}


def trace_headers(span: Span) -> tuple[tuple[str, str], ...]:
    """``traceparent`` (and ``tracestate``) for the upstream call made under ``span``: the
    gateway's attempt span when tracing, else the client's own context passed on."""
    if not span.get_span_context().is_valid:
        return ()
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple(carrier.items())
