"""Summary calls: the compaction service's upstream calls, sent, traced and counted like
any other attempt of the request (or of a background compaction).

A model served at a Responses endpoint is asked there (some, like OpenAI's codex models,
are served nowhere else): the Chat Completions summary request becomes a Responses request
(the system message as ``instructions``, ``max_output_tokens``, ``store: false``) and the
answer's ``output_text`` is the summary."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from opentelemetry.trace import Status, StatusCode, Tracer

from gateway.compaction.summarizer import SummaryCallFailed, SummaryReply
from gateway.flow.flow import Attempt, Flow
from gateway.providers.base import Provider, UpstreamCall, UpstreamError
from gateway.recovery.classifier import Verdict, classify
from gateway.telemetry.metrics import Metrics

if TYPE_CHECKING:
    from gateway.routing import ModelRoute

_SUMMARY_VERDICTS = {Verdict.OVERFLOW: "overflow", Verdict.REQUEST_TOO_LARGE: "too_large",
                     Verdict.TRANSIENT: "transient"}


class SummaryCalls:
    """Sends summary requests; each call is an :class:`~gateway.flow.flow.Attempt` of
    ``flow`` (counted when the Flow is rendered), or, for a background compaction (no
    flow), counted in the attempt metrics at once."""

    def __init__(self, tracer: Tracer, metrics: Metrics, flow: Flow | None = None,
                 responses: Callable[[ModelRoute], Provider | None] | None = None) -> None:
        self.tracer = tracer
        self.metrics = metrics
        self.flow = flow
        # The route's Responses endpoint, when it has one (else the route's own provider).
        self.responses = responses

    def bound(self, flow: Flow) -> SummaryCalls:
        """The same sender, recording into ``flow``."""
        return SummaryCalls(self.tracer, self.metrics, flow, self.responses)

    async def __call__(self, route: ModelRoute, body: dict[str, object]) -> SummaryReply:
        """Send one summary request; raises SummaryCallFailed on refusal."""
        attempt = None
        if self.flow is not None:
            attempt = self.flow.start_attempt("summary", route.name,
                                              deployment=route.litellm_model)
        with self.tracer.start_as_current_span("gateway.compaction.summary_call") as span:
            span.set_attributes({"gateway.model": route.name,
                                 "gateway.upstream_model": route.upstream_model})
            native = self.responses(route) if self.responses is not None else None
            sender, sent = ((native, responses_body(body)) if native is not None
                            else (route.provider, dict(body)))
            try:
                response = await sender.send(UpstreamCall(body=sent, stream=False))
            except UpstreamError as err:
                verdict = classify(err.failure)
                self._count(route, err.failure.status, str(verdict.value), attempt)
                span.set_attributes({"gateway.upstream.status": err.failure.status,
                                     "gateway.verdict": str(verdict.value)})
                span.set_status(Status(StatusCode.ERROR, err.failure.message[:200]))
                raise SummaryCallFailed(_SUMMARY_VERDICTS.get(verdict, "fatal"),
                                        err.failure) from None
            self._count(route, response.status, "ok", attempt)
            span.set_attribute("gateway.upstream.status", response.status)
            try:
                raw = b"".join([chunk async for chunk in response.chunks()])
            finally:
                await response.aclose()
            reply = responses_reply_from(raw) if native is not None else reply_from(raw)
            span.set_attributes({"gateway.summary.chars": len(reply.text),
                                 "gateway.summary.finish_reason": reply.finish_reason or ""})
        return reply

    def _count(self, route: ModelRoute, status: int, outcome: str,
                attempt: Attempt | None) -> None:
        if attempt is not None:
            attempt.finish(status, outcome)  # counted when the request's Flow is rendered
        else:  # a background compaction: no request to render it with
            self.metrics.observe_attempt(route.name, route.litellm_model, "summary", outcome,
                                         status)


def reply_from(raw: bytes) -> SummaryReply:
    """The summary text and finish reason of a chat.completion body ("" when unreadable)."""
    try:
        data = orjson.loads(raw)
        choice = data["choices"][0]
        text = choice["message"].get("content") or ""
        return SummaryReply(text if isinstance(text, str) else "", choice.get("finish_reason"))
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
        return SummaryReply("", None)


def responses_body(chat: dict[str, object]) -> dict[str, Any]:
    """A Chat Completions summary request as a Responses request (not stored upstream)."""
    messages = chat.get("messages")
    system = [m.get("content") for m in messages or [] if isinstance(m, dict)
              and m.get("role") == "system"] if isinstance(messages, list) else []
    rest = [{"role": m.get("role"), "content": m.get("content")} for m in messages or []
            if isinstance(m, dict) and m.get("role") != "system"] if isinstance(
        messages, list) else []
    body: dict[str, Any] = {"model": chat.get("model"), "input": rest, "store": False}
    if system:
        body["instructions"] = "\n\n".join(str(text) for text in system)
    if chat.get("max_tokens") is not None:
        body["max_output_tokens"] = chat["max_tokens"]
    return body


def responses_reply_from(raw: bytes) -> SummaryReply:
    """The summary text of a Responses object (its ``output_text`` parts), "length" when it
    stopped at its output budget ("" when unreadable)."""
    try:
        data = orjson.loads(raw)
        texts = [part.get("text") or "" for item in data.get("output") or []
                 if isinstance(item, dict) and item.get("type") == "message"
                 for part in item.get("content") or []
                 if isinstance(part, dict) and part.get("type") == "output_text"]
        details = data.get("incomplete_details")
        cut = (data.get("status") == "incomplete" and isinstance(details, dict)
               and details.get("reason") == "max_output_tokens")
        return SummaryReply("".join(t for t in texts if isinstance(t, str)),
                            "length" if cut else "stop")
    except (orjson.JSONDecodeError, TypeError, AttributeError):
        return SummaryReply("", None)

