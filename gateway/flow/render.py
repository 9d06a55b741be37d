"""Everything a client, a trace or a dashboard sees of a request, rendered from its Flow.

One function per output, each in one place: response headers, the error body of a give-up
or refusal, span attributes (the gateway's and the GenAI conventions'), the debug log line,
and the finished request's :class:`~gateway.telemetry.record.RequestRecord` that metrics,
the access log and the inspector are rendered from.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import error_body
from gateway.flow.flow import Attempt, Flow
from gateway.projection.condense import Condensed
from gateway.projection.invisible import header as invisible_header
from gateway.projection.lazy_messages import LazyMessages
from gateway.providers.errors import openai_error_envelope
from gateway.providers.failure import UpstreamFailure
from gateway.providers.openai_compat import relayed_failure_headers
from gateway.providers.prompt_cache import prefix_fingerprints
from gateway.redact import redact_bytes
from gateway.telemetry.context import ContextBreakdown
from gateway.telemetry.genai import request_attributes, response_attributes
from gateway.telemetry.record import SUMMARY_STEP, AttemptRecord, RequestRecord
from gateway.telemetry.repairs import anomaly_counts, metric_counts, repairs_header

__all__ = ["added_seconds", "error", "error_message", "headers", "log_fields", "record",
           "span_answered", "span_end", "span_start", "upstream_seconds"]

WIRE = "chat"  # the client-facing API of a Flow (``/v1/chat/completions``)
CLIENT_CLOSED = 499  # nginx's code for "the client closed the connection first"


def compaction_header(flow: Flow) -> str | None:
    """``x-gateway-compaction``: how the history was compacted, tokens before and after."""
    applied = flow.compaction
    if applied is None:
        return None
    return (f"{applied.how}; tokens_before={applied.tokens_before}; "
            f"tokens_after={applied.tokens_after}" + ("; unstored" if applied.unstored else ""))


def headers(flow: Flow) -> dict[str, str]:
    """The ``x-gateway-*`` response headers (and ``Retry-After`` of a give-up)."""
    out: dict[str, str] = {}
    if flow.context is not None:
        out["x-gateway-context"] = flow.context.header()
    elif flow.context_level is not None:
        out["x-gateway-context"] = flow.context_level
    compacted = compaction_header(flow)
    if compacted is not None:
        out["x-gateway-compaction"] = compacted
        summary_failed = flow.compaction.summary_failed if flow.compaction else None
        if summary_failed:
            out["x-gateway-compaction-summary-failed"] = summary_failed
    failed = flow.compaction_failed
    if failed is not None:
        out["x-gateway-compaction-failed"] = failed
    # (on a give-up too: the refusal quotes the body the gateway sent, not the client's)
    sent = flow.projection if flow.response is not None else flow.refused_projection
    if sent is not None and sent.repaired:
        out["x-gateway-repairs"] = repairs_header(sent.counts())
    if flow.would_repair:
        out["x-gateway-would-repair"] = repairs_header(anomaly_counts(flow.would_repair))
    if flow.invisible is not None:
        out["x-gateway-invisible"] = invisible_header(flow.invisible)
    if flow.condensed is not None and flow.response is not None:
        name = "x-gateway-condensed" if flow.condensed.applied else "x-gateway-would-condense"
        out[name] = condensed_header(flow.condensed)
    if flow.response is not None or flow.give_up is not None:
        out["x-gateway-attempts"] = str(len(flow.chat_attempts))
        if flow.steps:
            out["x-gateway-recovery"] = ",".join(flow.steps)
    if flow.served_by is not None:
        out["x-gateway-model-used"] = flow.served_by.name
        if flow.served_by.deployment_id:
            out["x-gateway-deployment"] = flow.served_by.deployment_id
    out.update(litellm_headers(flow))
    if flow.give_up is not None:
        # The upstream's rate-limit state and request id, on a refusal too.
        out.update(relayed_failure_headers(flow.give_up.failure.headers))
    if flow.recall is not None and flow.recall.calls:
        out["x-gateway-recall"] = str(flow.recall.calls)
    if flow.give_up is not None and flow.give_up.failure.retry_after is not None:
        out["Retry-After"] = str(max(1, round(flow.give_up.failure.retry_after)))
    if flow.give_up is not None and "retry" in flow.steps:
        # The gateway already retried with backoff: the openai and anthropic SDKs (2 retries
        # by default) would otherwise run the whole ladder again, tripling upstream calls.
        out["x-should-retry"] = "false"
    return out


def litellm_headers(flow: Flow) -> dict[str, str]:
    """The response headers LiteLLM's proxy sends that clients read: ``x-litellm-model-id``
    (the deployment: its ``model_info.id``), ``x-litellm-model-group`` (the group that
    served), ``x-litellm-attempted-retries`` and, after a fallback,
    ``x-litellm-attempted-fallbacks``."""
    out: dict[str, str] = {}
    if flow.served_by is not None:
        out["x-litellm-model-group"] = flow.served_by.name
        if flow.served_by.deployment_id:
            out["x-litellm-model-id"] = flow.served_by.deployment_id
    if flow.response is not None or flow.give_up is not None:
        attempts = flow.chat_attempts
        out["x-litellm-attempted-retries"] = str(sum(a.step == "retry" for a in attempts))
        fallbacks = sum(a.step == "fallback" for a in attempts) + (1 if flow.moved_from else 0)
        if fallbacks:
            out["x-litellm-attempted-fallbacks"] = str(fallbacks)
    return out


def error(flow: Flow) -> dict[str, Any]:
    """The error body of a request that got no answer: the provider's own error when the
    ladder gave up (with a ``gateway`` object listing what was tried), else the gateway's."""
    req = flow.request
    tried = [a.report() for a in flow.chat_attempts]
    if flow.give_up is None:
        refusal = flow.refusal
        assert refusal is not None, "error() needs a flow that gave up or was refused"
        extra = None
        if refusal.reason is not None:
            extra = {"gateway": {"attempts": tried, "gave_up": refusal.reason,
                                 "request_id": req.request_id}}
        elif refusal.violations:
            extra = {"gateway": {"violations": list(refusal.violations),
                                 "request_id": req.request_id}}
        return error_body(refusal.message, status=refusal.status, param=refusal.param,
                          code=refusal.code, extra=extra)
    body = _client_error_object(flow.give_up.failure)
    body["gateway"] = {"attempts": tried, "gave_up": flow.give_up.reason,
                       "request_id": req.request_id}
    # A provider may echo the key it was given; no configured secret reaches the client.
    raw = orjson.dumps(body)
    masked = redact_bytes(raw)
    return body if masked is raw else orjson.loads(masked)


def _client_error_object(failure: UpstreamFailure) -> dict[str, Any]:
    """The provider's own OpenAI-style error object when it sent one, else one built from it."""
    try:
        parsed = orjson.loads(failure.body) if failure.body else None
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        err = parsed["error"]
        if isinstance(err.get("message"), str) and "type" in err:
            return {"error": {"param": None, "code": None, **err}}
    return openai_error_envelope(failure)


def context_attributes(context: ContextBreakdown) -> dict[str, Any]:
    """The breakdown as span attributes: ``gen_ai.usage.input_tokens`` is the provider's;
    these are the gateway's estimate of what makes it up (``gateway.context.*``)."""
    out: dict[str, Any] = {f"gateway.context.{source}_tokens": n
                           for source, n in context.tokens().items()}
    out["gateway.context.total_tokens"] = context.total
    if context.level is not None:
        out["gateway.context.level"] = context.level
    if context.used is not None:
        out["gateway.context.used"] = round(context.used, 4)
    return out


def span_start(flow: Flow) -> dict[str, Any]:
    """Attributes of the ``gateway.chat`` span known when the request starts."""
    req = flow.request
    route = req.route
    # (the system messages the edge collected while reading: the history is not walked)
    known = req.known if req.body.get("messages") is req.messages else None
    systems = known.systems if known is not None else None
    if systems is None and req.wire is not None \
            and isinstance(req.body.get("messages"), LazyMessages):
        systems = []  # (a Messages history left unparsed: that wire has no system messages)
    system_hash, tools_hash = prefix_fingerprints(req.body, systems)
    return {
        "gateway.request_id": req.request_id,
        "gateway.model": route.name,
        "gateway.upstream_model": route.upstream_model,
        "gateway.provider": route.provider_name,
        "gateway.stream": req.stream,
        "gateway.messages": len(req.messages),
        "gateway.prompt.system_hash": system_hash,
        "gateway.prompt.tools_hash": tools_hash,
        **request_attributes(route.provider_name, route.name, req.client_wire, req.session_id,
                            req.body),
    }


def span_end(flow: Flow) -> dict[str, Any]:
    """Attributes of the ``gateway.chat`` span known when the request is answered."""
    out: dict[str, Any] = {"gateway.attempts": len(flow.chat_attempts),
                           "gateway.status": flow.status}
    reason = flow.give_up.reason if flow.give_up else flow.refusal.reason if flow.refusal \
        else None
    if reason:
        out["gateway.gave_up"] = reason
    if flow.compaction_failed:
        out["gateway.compaction.failed"] = flow.compaction_failed
    if flow.recall is not None and flow.recall.calls:
        out["gateway.recall.calls"] = flow.recall.calls
    out["gateway.owner"] = flow.request.owner_name
    if flow.request.policy != "repair":
        out["gateway.repair.policy"] = flow.request.policy
    for kind, n in anomaly_counts(flow.would_repair).items():
        out[f"gateway.would_repair.{kind}"] = n
    if flow.rejected:
        out["gateway.rejected"] = True
    if flow.context is not None:
        out.update(context_attributes(flow.context))
    if flow.invisible is not None:
        out["gateway.invisible.count"] = flow.invisible.total
        out["gateway.invisible.where"] = ",".join(flow.invisible.places())
        out["gateway.invisible.action"] = flow.invisible_mode
    if flow.condensed is not None and flow.response is not None:
        out["gateway.condensed.outputs"] = flow.condensed.outputs
        out["gateway.condensed.saved_chars"] = flow.condensed.saved_chars
        out["gateway.condensed.action"] = flow.condensed.action
    return out


def condensed_header(condensed: Condensed) -> str:
    """``x-gateway-condensed``: the tool results condensed (of them, replaced by a
    reference to an earlier identical one) and their characters before and after."""
    return (f"outputs={condensed.outputs}; same_as_earlier={condensed.referenced}; "
            f"chars={condensed.chars_before}->{condensed.chars_after}")


def upstream_seconds(flow: Flow) -> float:
    """Time spent waiting on upstreams: every call (summary calls too), plus relaying the
    answer to the client."""
    total = sum((a.ended or a.started) - a.started for a in flow.attempts)
    answered = flow.answered
    if answered is not None and answered.ended is not None and flow.relayed is not None:
        total += max(0.0, flow.relayed - answered.ended)
    return total


def added_seconds(flow: Flow) -> float:
    """Time the gateway itself added: the request's time but the upstream waits and the
    ladder's backoff."""
    began = flow.started if flow.received is None else flow.received
    ended = flow.relayed if flow.relayed is not None else flow.started + flow.elapsed()
    return max(0.0, ended - began - upstream_seconds(flow) - flow.backoff)


def _how(flow: Flow) -> str:
    applied = flow.compaction
    if applied is not None and applied.how is not None:
        return applied.how
    return "failed" if flow.compaction_failed else ""


def error_message(flow: Flow) -> str:
    """Why the request got no answer (empty when answered)."""
    if flow.give_up is not None:
        return flow.give_up.failure.message
    return flow.refusal.message if flow.refusal is not None else ""


def span_answered(flow: Flow) -> dict[str, Any]:
    """Attributes of the request span known once the answer was written (or the client
    left): usage and response model (streams included), the gateway's timings."""
    route = flow.route
    out: dict[str, Any] = {
        "http.response.status_code": CLIENT_CLOSED if flow.disconnected else flow.status,
        "gateway.deployment": route.litellm_model,
        "gateway.added_ms": round(added_seconds(flow) * 1000, 3),
        "gateway.upstream_ms": round(upstream_seconds(flow) * 1000, 3),
        **response_attributes(flow.response_model, flow.input_tokens, flow.output_tokens),
    }
    if flow.request.owner:
        out["gateway.client"] = flow.request.owner[:8]
    how = _how(flow)
    if how:
        out["gateway.compaction"] = how
    if flow.disconnected:
        out["gateway.client_disconnected"] = True
    cache = flow.cache
    if cache is not None and cache.cache_read is not None:
        out["gen_ai.usage.cache_read.input_tokens"] = cache.cache_read
    if cache is not None and cache.cache_write is not None:
        out["gen_ai.usage.cache_creation.input_tokens"] = cache.cache_write
    return out


def _attempt(flow: Flow, a: Attempt, began: float) -> AttemptRecord:
    step = SUMMARY_STEP if a.kind == "summary" else a.step or "initial"
    ended = a.ttfb if a.ttfb is not None else a.ended
    return AttemptRecord(a.number, step, a.deployment or flow.route.litellm_model,
                         a.started - began, (ended or a.started) - a.started, a.status,
                         a.verdict or "ok")


def record(flow: Flow, http: RequestRecord) -> RequestRecord:
    """The finished request as a flat view: the HTTP facts of the edge (``http``: method,
    path, status, duration, client) completed from the Flow, in place (``http`` is built for
    this request alone; filling it costs a third of a copy) and returned."""
    req, route = flow.request, flow.route
    began = flow.started if flow.received is None else flow.received
    answered = flow.answered
    projection = flow.projection if flow.response is not None else None
    rec = http
    rec.wire, rec.model, rec.deployment = req.client_wire, route.name, route.litellm_model
    rec.provider, rec.stream, rec.session_id = route.provider_name, req.stream, req.session_id
    rec.upstream_seconds, rec.backoff_seconds = upstream_seconds(flow), flow.backoff
    rec.ttfb = (answered.ttfb - answered.started
                if answered is not None and answered.ttfb is not None else None)
    rec.attempts = [_attempt(flow, a, began) for a in flow.attempts]
    if projection is not None and projection.anomalies:
        rec.repairs, rec.repair_metrics = projection.counts(), metric_counts(projection)
        rec.anomalies = projection.anomalies  # (dicts made only for the inspector's page)
    else:
        rec.repairs, rec.repair_metrics, rec.anomalies = {}, {}, ()
    rec.strict, rec.recovery = flow.strict, ",".join(flow.steps)
    rec.compaction = compaction_header(flow) or ""
    rec.compaction_failed = flow.compaction_failed or ""
    rec.compaction_runs = [(c.seconds, c.how is not None) for c in flow.compactions
                           if c.seconds is not None]
    rec.input_tokens, rec.output_tokens = flow.input_tokens, flow.output_tokens
    rec.recalls = flow.recall.calls if flow.recall is not None else 0
    rec.response_model, rec.error = flow.response_model, error_message(flow)
    rec.disconnected = http.disconnected or flow.disconnected
    rec.client_messages, rec.upstream_messages = req.messages, flow.sent
    rec.owner_name, rec.policy = req.owner_name, req.policy
    if flow.would_repair:
        rec.would_repair = anomaly_counts(flow.would_repair)
        rec.would_anomalies = flow.would_repair
    if flow.rejected and flow.refusal is not None:
        rec.violations = list(flow.refusal.violations)
    if flow.invisible is not None:
        rec.invisible, rec.invisible_action = flow.invisible, flow.invisible_mode
    if flow.condensed is not None and flow.response is not None:
        rec.condensed_outputs = flow.condensed.outputs
        rec.condensed_saved_chars = flow.condensed.saved_chars
        rec.condensed_action = flow.condensed.action
    rec.context = flow.context
    rec.prefix = flow.prefix
    if flow.cache is not None and flow.cache.prompt_tokens is not None:
        rec.prompt_tokens = flow.cache.prompt_tokens
        rec.cache_read_tokens = flow.cache.cache_read
        rec.cache_write_tokens = flow.cache.cache_write
    return rec


def log_fields(flow: Flow) -> dict[str, Any]:
    """The fields of the request's log line."""
    return {
        "request_id": flow.request.request_id,
        "model": flow.route.name,
        "status": flow.status,
        "attempts": len(flow.chat_attempts),
        "summary_calls": sum(1 for a in flow.attempts if a.kind == "summary"),
        "recovery": ",".join(flow.steps),
        "elapsed_ms": round(flow.elapsed() * 1000, 1),
    }
