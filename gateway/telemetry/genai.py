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

from gateway.telemetry.record import RequestRecord

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


def start_request_span(tracer: Tracer, headers: Mapping[str, str], rec: RequestRecord) -> Span:
    """The request's span, joined to the client's trace when it sent ``traceparent``."""
    parent = propagate.extract(headers) if "traceparent" in headers else None
    return tracer.start_span(CHAT_SPAN, context=parent, kind=SpanKind.SERVER)


def describe_request(span: Span, rec: RequestRecord) -> None:
    """GenAI request attributes, once the model is known."""
    if not span.is_recording():
        return
    system = provider_name(rec.provider)
    span.set_attributes({
        "gen_ai.operation.name": OPERATION,
        "gen_ai.request.model": rec.model,
        "gen_ai.system": system,
        "gen_ai.provider.name": system,
        "gateway.wire": rec.wire,
        **rec.request_params,
    })
    if rec.session_id:
        span.set_attribute("gen_ai.conversation.id", rec.session_id)


def finish_request_span(span: Span, rec: RequestRecord) -> None:
    """Response-side attributes: status, response model, usage, the gateway's timings."""
    if not span.is_recording():
        return
    attrs: dict[str, Any] = {
        "http.response.status_code": rec.status,
        "gateway.deployment": rec.deployment,
        "gateway.added_ms": round(rec.added_seconds * 1000, 3),
        "gateway.upstream_ms": round(rec.upstream_seconds * 1000, 3),
    }
    if rec.response_model:
        attrs["gen_ai.response.model"] = rec.response_model
    if rec.input_tokens is not None:
        attrs["gen_ai.usage.input_tokens"] = rec.input_tokens
    if rec.output_tokens is not None:
        attrs["gen_ai.usage.output_tokens"] = rec.output_tokens
    if rec.client_key_id:
        attrs["gateway.client"] = rec.client_key_id
    if rec.compaction_how:
        attrs["gateway.compaction"] = rec.compaction_how
    if rec.disconnected:
        attrs["gateway.client_disconnected"] = True
    span.set_attributes(attrs)
    if rec.status >= 500 or (rec.status >= 400 and rec.wire):
        span.set_status(Status(StatusCode.ERROR, rec.error[:200] or str(rec.status)))


def describe_attempt(span: Span, rec: RequestRecord, upstream_model: str) -> None:
    """GenAI client-side attributes of one upstream attempt."""
    if span.is_recording():
        system = provider_name(rec.provider)
        span.set_attributes({"gen_ai.operation.name": OPERATION,
                             "gen_ai.request.model": upstream_model,
                             "gen_ai.system": system, "gen_ai.provider.name": system})


def trace_headers(span: Span) -> tuple[tuple[str, str], ...]:
    """``traceparent`` (and ``tracestate``) for the upstream call made under ``span``: the
    gateway's attempt span when tracing, else the client's own context passed on."""
    if not span.get_span_context().is_valid:
        return ()
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple(carrier.items())
