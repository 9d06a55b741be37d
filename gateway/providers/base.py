"""The one narrow interface every upstream provider implements."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from gateway.providers.failure import UpstreamFailure

# A stream's opening events (the role, ``message_start``) are held until its first output so
# that a failure right after them is still retried; this long before the first byte's
# deadline, a stream still without output is relayed as it is (a model slow to start).
OPENING_HOLD_MARGIN = 0.5


def hold_until(deadline: float, now: float) -> float:
    """When to stop holding a stream's opening events, for a first byte due at ``deadline``
    (both on one clock): :data:`OPENING_HOLD_MARGIN` before it, or a tenth of what is left
    when that is shorter."""
    return deadline - min(OPENING_HOLD_MARGIN, max(0.0, deadline - now) / 10)


class UpstreamError(Exception):
    """Raised by a provider when the upstream refused or could not be reached."""

    def __init__(self, failure: UpstreamFailure) -> None:
        super().__init__(f"{failure.provider} {failure.status}: {failure.message}")
        self.failure = failure


# litellm_params keys that are Chat Completions request fields: LiteLLM sends them with every
# request to the deployment, unless the client set the field itself.
REQUEST_DEFAULTS = frozenset({
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "presence_penalty",
    "frequency_penalty", "stop", "seed", "n", "logit_bias", "user", "response_format",
    "reasoning_effort", "logprobs", "top_logprobs", "service_tier", "verbosity",
    "prediction", "modalities", "audio", "web_search_options",
})


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    """One request to send upstream.

    ``body`` is the OpenAI Chat Completions body the provider should send, with ``model``
    already renamed to the upstream model and ``messages`` already projected. ``raw`` is the
    exact serialized form of ``body`` when the caller already has it (passthrough sends it
    as-is instead of serializing again); None means "serialize ``body``".
    """

    body: dict[str, Any]
    stream: bool
    raw: bytes | None = None
    request_id: str = ""
    # Trace context (``traceparent``) for the upstream's own tracing.
    headers: tuple[tuple[str, str], ...] = ()
    # The request's deadline (``time.monotonic()``): no exchange outlives it, a late retry
    # included.
    deadline: float | None = None


class UpstreamResponse(Protocol):
    """A successful upstream answer, in the OpenAI wire format.

    For a stream, the provider returns only after the upstream's status and first event
    have arrived, so a refusal can still be recovered; ``chunks()`` then yields raw SSE
    bytes (``data: {...}\\n\\n`` ... ``data: [DONE]\\n\\n``) as they arrive. A failure after
    the first event is yielded as an SSE error event in the OpenAI shape, then the
    iterator ends. For a non-stream, ``chunks()`` yields the whole JSON body.
    """

    status: int
    content_type: str
    # Upstream headers worth relaying to the client (rate-limit state, processing time).
    relay_headers: tuple[tuple[str, str], ...]

    def chunks(self) -> AsyncIterator[bytes]:
        """Yield the response body as it arrives."""
        ...

    async def aclose(self) -> None:
        """Release the upstream connection (cancels an unfinished upstream request)."""
        ...


class Provider(Protocol):
    """An upstream that speaks (or is adapted to) the OpenAI Chat Completions wire."""

    name: str

    async def send(self, call: UpstreamCall) -> UpstreamResponse:
        """Send one request. Raises UpstreamError with a normalized failure on refusal."""
        ...
