"""OpenTelemetry setup: an SDK tracer provider, exporting nowhere unless configured."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.trace import NoOpTracer, Tracer

from gateway.config import TelemetryConfig

TRACER_NAME = "gateway"


def build_tracer_provider(
    config: TelemetryConfig, extra_processors: tuple[SpanProcessor, ...] = ()
) -> TracerProvider:
    """A tracer provider for the gateway. The exporter is off by default; ``otlp`` sends
    OTLP/HTTP to ``endpoint`` (or the standard OTEL_EXPORTER_OTLP_* variables)."""
    provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}))
    if config.exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=config.endpoint) if config.endpoint else (
            OTLPSpanExporter()
        )
        provider.add_span_processor(BatchSpanProcessor(exporter))
    elif config.exporter == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    for processor in extra_processors:
        provider.add_span_processor(processor)
    return provider


def tracer_from(provider: TracerProvider, *, exporting: bool) -> Tracer:
    """The gateway's tracer from a provider (not the global one, so tests can inject).

    With nothing to export to (the default), spans would be built and dropped on every
    request: a no-op tracer skips that work on the hot path.
    """
    if not exporting:
        return NoOpTracer()
    return provider.get_tracer(TRACER_NAME)
