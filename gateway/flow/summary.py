"""Summary calls: the compaction service's upstream calls, sent, traced and counted like
any other attempt of the request (or of a background compaction)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from opentelemetry.trace import Status, StatusCode, Tracer

from gateway.compaction.summarizer import SummaryCallFailed, SummaryReply
from gateway.flow.flow import Attempt, Flow
from gateway.providers.base import UpstreamCall, UpstreamError
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

    def __init__(self, tracer: Tracer, metrics: Metrics, flow: Flow | None = None) -> None:
        self.tracer = tracer
        self.metrics = metrics
        self.flow = flow

    def bound(self, flow: Flow) -> SummaryCalls:
        """The same sender, recording into ``flow``."""
        return SummaryCalls(self.tracer, self.metrics, flow)

    async def __call__(self, route: ModelRoute, body: dict[str, object]) -> SummaryReply:
        """Send one summary request; raises SummaryCallFailed on refusal."""
        attempt = None
        if self.flow is not None:
            attempt = self.flow.start_attempt("summary", route.name,
                                              deployment=route.litellm_model)
        with self.tracer.start_as_current_span("gateway.compaction.summary_call") as span:
            span.set_attributes({"gateway.model": route.name,
                                 "gateway.upstream_model": route.upstream_model})
            try:
                response = await route.provider.send(UpstreamCall(body=dict(body),
                                                                  stream=False))
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
            reply = reply_from(raw)
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
