"""The one normalized record of an upstream failure, read by the recovery ladder."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gateway.redact import redact, redact_bytes


@dataclass(frozen=True, slots=True)
class UpstreamFailure:
    """An upstream refusal or transport failure, normalized across providers.

    ``status`` is the HTTP status the client should see (504 for a timeout, 502 for a
    connection failure). ``message`` is the provider's own text, without wrapper prefixes.
    ``retry_after`` is in seconds. ``should_retry`` mirrors ``x-should-retry`` when given.
    ``body`` is the raw upstream body (relayed to the client when nothing else applies).
    """

    status: int
    provider: str
    message: str
    type: str | None = None
    code: str | None = None
    param: str | None = None
    retry_after: float | None = None
    should_retry: bool | None = None
    body: bytes = b""
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = field(default=())


def redact_failure(failure: UpstreamFailure) -> UpstreamFailure:
    """``failure`` with its message, body and headers redacted (``gateway.redact``)."""
    message, body = redact(failure.message), redact_bytes(failure.body)
    headers = tuple((k, redact(v)) for k, v in failure.headers)
    if message == failure.message and body == failure.body and headers == failure.headers:
        return failure
    return replace(failure, message=message, body=body, headers=headers)
