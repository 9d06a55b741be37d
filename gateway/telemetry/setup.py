"""OpenTelemetry setup: an SDK tracer provider, exporting nowhere unless configured.

The YAML (``gateway.telemetry``) wins where it sets a key; otherwise the standard variables
apply: ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``, ``none``), ``OTEL_SERVICE_NAME``,
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER`` and
``OTEL_SDK_DISABLED``.
"""

from __future__ import annotations

import os

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
from opentelemetry.trace import NoOpTracer, Tracer

from gateway.config import TelemetryConfig
from gateway.telemetry.redacting import RedactingProcessor

TRACER_NAME = "gateway"


def effective_exporter(config: TelemetryConfig) -> str:
    """``otlp``, ``console`` or ``none``: the YAML's when set, else ``OTEL_TRACES_EXPORTER``."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return "none"
    if "exporter" in config.model_fields_set:
        return config.exporter
    env = os.environ.get("OTEL_TRACES_EXPORTER", "").split(",")[0].strip().lower()
    return env if env in ("otlp", "console") else "none"


def _service_name(config: TelemetryConfig) -> str:
    if "service_name" in config.model_fields_set:
        return config.service_name
    return os.environ.get("OTEL_SERVICE_NAME") or config.service_name


def build_tracer_provider(
    config: TelemetryConfig, extra_processors: tuple[SpanProcessor, ...] = ()
) -> TracerProvider:
    """A tracer provider for the gateway. The exporter is off by default; ``otlp`` sends
    OTLP/HTTP to ``endpoint`` (or the standard OTEL_EXPORTER_OTLP_* variables). Every
    processor gets its spans redacted (``redacting``)."""
    provider = TracerProvider(resource=Resource.create({"service.name": _service_name(config)}))
    exporter_name = effective_exporter(config)
    if exporter_name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=config.endpoint) if config.endpoint else (
            OTLPSpanExporter()
        )
        provider.add_span_processor(RedactingProcessor(BatchSpanProcessor(exporter)))
    elif exporter_name == "console":
        provider.add_span_processor(RedactingProcessor(BatchSpanProcessor(ConsoleSpanExporter())))
    for processor in extra_processors:
        provider.add_span_processor(RedactingProcessor(processor))
    return provider


def tracer_from(provider: TracerProvider, *, exporting: bool) -> Tracer:
    """The gateway's tracer from a provider (not the global one, so tests can inject).

    With nothing to export to (the default), spans would be built and dropped on every
    request: a no-op tracer skips that work on the hot path.
    """
    if not exporting:
        return NoOpTracer()
    return provider.get_tracer(TRACER_NAME)
