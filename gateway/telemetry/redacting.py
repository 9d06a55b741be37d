"""Spans leave the gateway redacted, whatever their attributes carry.

A client may put a key where the gateway reads a plain value: a session header, a
``prompt_cache_key``, ``metadata.user_id``. The span attributes copied from such values
(``gen_ai.conversation.id``, ...) would carry the key to the tracing backend, so every
processor (the exporters, a test's) is given the span with each registered secret masked
(``gateway.redact``): attributes, event attributes, the name and the status text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import Status

from gateway.redact import redact


def _value(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, tuple | list) and any(isinstance(v, str) for v in value):
        return tuple(redact(v) if isinstance(v, str) else v for v in value)
    return value


def _attributes(attrs: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A masked copy of ``attrs``, or None when nothing in it needs masking."""
    if not attrs:
        return None
    masked = {key: _value(value) for key, value in attrs.items()}
    return masked if any(masked[k] != v for k, v in attrs.items()) else None


def redacted_span(span: ReadableSpan) -> ReadableSpan:
    """``span`` itself when no secret is in it, else a copy with each secret masked."""
    attrs = _attributes(span.attributes)
    events = [Event(e.name, _attributes(e.attributes), e.timestamp)
              if _attributes(e.attributes) is not None else e for e in span.events]
    description = span.status.description
    status = (Status(span.status.status_code, redact(description))
              if description and redact(description) != description else span.status)
    name = redact(span.name)
    if (attrs is None and status is span.status and name == span.name
            and all(a is b for a, b in zip(events, span.events, strict=True))):
        return span
    return ReadableSpan(
        name=name, context=span.context, parent=span.parent, resource=span.resource,
        attributes=attrs if attrs is not None else span.attributes, events=events,
        links=span.links, kind=span.kind, status=status, start_time=span.start_time,
        end_time=span.end_time, instrumentation_scope=span.instrumentation_scope)


class RedactingProcessor(SpanProcessor):
    """Hands ``inner`` each finished span redacted (:func:`redacted_span`)."""

    def __init__(self, inner: SpanProcessor) -> None:
        self._inner = inner

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Passed on as it is (nothing is exported at the start)."""
        self._inner.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        """The span, redacted, to the inner processor."""
        self._inner.on_end(redacted_span(span))

    def shutdown(self) -> None:
        """Shut the inner processor down."""
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the inner processor."""
        return self._inner.force_flush(timeout_millis)
